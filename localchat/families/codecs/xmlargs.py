"""Arguments written one by one as XML-style elements (Qwen3-Coder's `<parameter=KEY>`, GLM's
`<arg_key>`/`<arg_value>`, MiniMax's `<parameter name="KEY">`): a value is raw text when the
schema allows a string, else JSON; either way the client gets a JSON object."""

from __future__ import annotations

import ast
import json
from dataclasses import dataclass
from typing import Any

from ...grammars.gbnf import literal
from ...grammars.members import member_rules
from ...grammars.text import excluding, fixed

_PLAIN_KEYWORDS = {"type", "properties", "required", "additionalProperties", "description", "title", "$defs",
                   "definitions", "$schema", "$id", "$comment", "examples", "default", "strict"}
_TEXT_KEYWORDS = ("pattern", "format", "contentEncoding", "contentMediaType")
MAX_BOUNDED = 256  # a raw value with a maxLength up to this is bounded exactly (and holds no "<")


@dataclass(frozen=True)
class XmlArgs:
    key_open: str  # before a key: '<parameter='
    key_close: str  # between the key and its value: '>'
    value_close: str  # after the value (exact text): '</parameter>'; "{key}" stands for the key
    between: str = "\n"  # after each value's close
    newline: bool = False  # the value sits on lines of its own: "\n" VALUE "\n"
    typed_key_close: str = ""  # key_close for a typed (JSON) value, where the syntax tells them apart
    cdata: bool = False  # a value holding <, & or a newline is written in <![CDATA[…]]> (MiniCPM 5)
    # (DeepSeek's DSML: `" string="true">` before raw text, `" string="false">` before JSON)
    # an XML attribute, `KEY='VALUE'`: read with either quote after `=` (any spacing), a JSON value to its end,
    # then the same quote; a text value to that quote before a space, `/` or `>` (the grammar writes `'`)
    quoted: bool = False

    def close_for(self, key: str) -> str:
        """The text that closes this key's value (MiniMax M3's `</KEY>`)."""
        return self.value_close.replace("{key}", key)

    @property
    def close_head(self) -> str:
        """The fixed text every value's close starts with."""
        return self.value_close.split("{key}")[0]

    def key_close_for(self, text: bool) -> str:
        return self.key_close if text or not self.typed_key_close else self.typed_key_close


# Qwen3-Coder's arguments: `<parameter=KEY>\nVALUE\n</parameter>`, a parameter a line
QWEN3_PARAMETERS = XmlArgs("<parameter=", ">", "</parameter>", "\n", newline=True)

def is_text(schema: Any) -> bool:
    """Whether a value for this schema is written as raw text (the schema allows a string)."""
    if not isinstance(schema, dict):
        return schema is True
    kind = schema.get("type")
    if kind == "string" or (isinstance(kind, list) and "string" in kind):
        return True
    values = [schema["const"]] if "const" in schema else schema.get("enum")
    if kind is None and isinstance(values, list) and values and all(isinstance(v, str) for v in values):
        return True
    branches = schema.get("anyOf") or schema.get("oneOf")
    return kind is None and isinstance(branches, list) and any(
        isinstance(b, dict) and b.get("type") == "string" for b in branches)


def properties(parameters: Any) -> dict[str, Any]:
    props = parameters.get("properties") if isinstance(parameters, dict) else None
    return props if isinstance(props, dict) else {}


def typed(text: str, schema: Any, strict: bool) -> Any:
    """A value's JSON: raw text as a string where the schema allows one; else the JSON it
    holds (leniently: a Python literal, then the text itself)."""
    if is_text(schema) or schema is None:
        return text
    try:
        return json.loads(text)
    except ValueError:
        if strict:
            raise
    try:
        value = ast.literal_eval(text.strip())  # a template that wrote Python's str() of a value
        json.dumps(value)
        return value
    except (ValueError, SyntaxError, TypeError, MemoryError, RecursionError):
        return text


def args_rule(xml: XmlArgs, parameters: Any, index: int, rules: dict[str, str], loosened: list[str],
              max_bytes: int) -> str:
    """The rule for one tool's arguments as elements: declared properties in order, required
    ones always, optional ones maybe; with no properties declared, any keys with text values."""
    text = excluding(xml.close_head, "xml-text", rules)
    props = properties(parameters)

    def element(key: str | None, value: str, text: bool = True) -> str:
        name = literal(key) if key is not None else "xml-key"
        wrapped = f'"\\n" {value} "\\n"' if xml.newline else value
        if key is not None:
            close = literal(xml.close_for(key))
        else:  # (any key: the close names some key)
            head, _, tail = xml.value_close.partition("{key}")
            close = " ".join(p for p in (fixed(head), "xml-key" if _ else "", fixed(tail) if tail else "") if p)
        parts = [fixed(xml.key_open), name, fixed(xml.key_close_for(text)), wrapped, close]
        return " ".join(p for p in parts if p) + (" " + fixed(xml.between) if xml.between else "")

    if not props:
        if isinstance(parameters, dict) and parameters.get("additionalProperties") is False:
            return '""'
        rules["xml-key"] = "[a-zA-Z0-9_.-]+"
        rules[f"t{index}-args"] = f"( {element(None, text)} )*"
        return f"t{index}-args"
    for keyword in parameters:
        if keyword not in _PLAIN_KEYWORDS:
            loosened.append(f"#:{keyword}")
    typed_keys = [k for k, s in props.items() if not is_text(s)]
    values, loose = member_rules(parameters, typed_keys, prefix=f"t{index}-", rules=rules,
                                 param=f"tools.{index}.parameters", max_bytes=max_bytes)
    loosened += loose
    required = set(parameters.get("required") or [])
    items = []
    for key, schema in props.items():
        value = values.get(key) or _text_value(schema, text, key, loosened)
        item = element(key, value, is_text(schema))
        items.append(item if key in required else f"( {item} )?")
    rules[f"t{index}-args"] = " ".join(items)
    return f"t{index}-args"


def _text_value(schema: Any, text: str, key: str, loosened: list[str]) -> str:
    values = [schema["const"]] if isinstance(schema, dict) and "const" in schema else \
        schema.get("enum") if isinstance(schema, dict) else None
    if isinstance(values, list) and values and all(isinstance(v, str) for v in values):
        return "( " + " | ".join(literal(v) for v in dict.fromkeys(values)) + " )"
    if not isinstance(schema, dict):
        return text
    loosened += [f"#/properties/{key}:{k}" for k in _TEXT_KEYWORDS if k in schema]
    low, high = schema.get("minLength"), schema.get("maxLength")
    if isinstance(low, int) and low > MAX_BOUNDED:
        loosened.append(f"#/properties/{key}:minLength")
    low = low if isinstance(low, int) and 0 < low <= MAX_BOUNDED else 0
    if isinstance(high, int) and 0 <= high <= MAX_BOUNDED:  # stricter than the schema: no "<" in a short value
        return f"[^<]{{{min(low, high)},{high}}}"
    if high is not None:
        loosened.append(f"#/properties/{key}:maxLength")
    return f"[^<]{{{low}}} {text}" if low else text
