"""Reading arguments written as XML-style elements, as they stream, into the text of a JSON
object: a raw-text value streams as a JSON string; a typed value is held until its closing tag,
then parsed (strict: as JSON; lenient: as JSON, a Python literal, or else kept as text)."""

from __future__ import annotations

import json
import os
import re
from typing import Any

from .jsonscan import JsonScanner
from .pattern import FAIL, PARTIAL, held_back, match
from .xmlargs import XmlArgs, is_text, typed

MAX_KEY = 256
CDATA = "<![CDATA["
QUOTES = "'\""
ATTRIBUTE_END = " \t\n/>"  # what may follow an attribute's closing quote


class XmlArgsReader:
    def __init__(self, xml: XmlArgs, props: dict[str, Any], post: str, strict: bool) -> None:
        self.xml, self.props, self.post, self.strict = xml, props, post, strict
        self.phase, self.count, self.key, self.raw = "key", 0, "", True
        self.schema: Any = None  # the current value's schema
        self.in_cdata = False  # the current value is in a CDATA section
        self.quote = ""  # the quote the current value opened with (an attribute)
        self.scan = JsonScanner()  # an attribute's JSON value, scanned as it comes
        self.key_stop = xml.key_close.strip().split("\n")[0] or xml.key_close
        if xml.quoted:
            self.key_stop = "="
        if xml.typed_key_close:  # (the text both closes start with)
            self.key_stop = os.path.commonprefix([self.key_stop, xml.typed_key_close.strip()]) or self.key_stop

    def read(self, buf: str, pos: int, final: bool, cut: bool = False) -> tuple[list[str], int, bool | None]:
        """(JSON fragments, where reading stopped, finished: True / False (wants more) / None
        (cannot be read)). `cut`: the output ended here; close what is open."""
        out: list[str] = []
        while True:
            phase = self.phase
            if phase == "key":
                if self.post and (self.post.startswith(self.xml.key_open) or not self.xml.key_open.strip()):
                    # (MiniMax M3: both `NS<`; attributes: a space opens a key, and may come before `/>`)
                    end = match((" " if self.xml.quoted else "") + self.post, buf, pos, final)
                    if end == PARTIAL and not cut:
                        return out, pos, False
                    if end >= 0:
                        return out + [self._close()], pos, True
                at = match(self.xml.key_open, buf, pos, final)
                if at >= 0:
                    pos, self.phase = at, "name"
                    continue
                end = match(self.post, buf, pos, final)
                if (at == PARTIAL or end == PARTIAL) and not cut:
                    return out, pos, False
                return out + [self._close()], pos, True  # the call's closing text, or a repair
            if phase == "name":
                at = buf.find(self.key_stop, pos)
                if at < 0 and final and self.xml.quoted and not buf[pos:].strip():
                    return out + [self._close()], pos, True  # (the output ended after a value: its `/>` missing)
                if at < 0 or at - pos > MAX_KEY or "\n" in buf[pos:at]:
                    if at < 0 and len(buf) - pos <= MAX_KEY and "\n" not in buf[pos:] and not (final or cut):
                        return out, pos, False
                    return (out + [self._close()], pos, True) if cut else (out, pos, None)
                self.key, pos, self.phase = buf[pos:at].strip(), at, "close-key"
                if self.xml.quoted and not re.fullmatch(r"[\w.-]+", self.key):  # (an attribute's name, or no call)
                    return (out + [self._close()], pos, True) if cut else (out, pos, None)
            elif phase == "close-key" and self.xml.quoted:
                at = match("= ", buf, pos, final)  # (any spacing after `=`)
                if at == PARTIAL or (at >= 0 and at == len(buf) and not (final or cut)):
                    return out, pos, False
                if at < 0 or buf[at] not in QUOTES:
                    return (out + [self._close()], pos, True) if cut else (out, pos, None)
                self.schema, self.quote = self.props.get(self.key), buf[at]
                self.raw = is_text(self.schema) or (self.schema is None and not self.strict)
                out.append(("{" if not self.count else ", ") + json.dumps(self.key, ensure_ascii=False) + ": "
                           + ('"' if self.raw else ""))
                pos, self.phase, self.in_cdata, self.scan = at + 1, "value", False, JsonScanner()
            elif phase == "close-key":
                at = match(self.xml.key_close, buf, pos, final)
                typed_at = match(self.xml.typed_key_close, buf, pos, final) if self.xml.typed_key_close else FAIL
                if PARTIAL in (at, typed_at) and not cut and max(at, typed_at) < 0:
                    return out, pos, False
                if at < 0 and typed_at < 0:
                    return (out + [self._close()], pos, True) if cut else (out, pos, None)
                schema = self.props.get(self.key)
                if typed_at >= 0 and at < 0:  # the syntax says the value is JSON
                    at, self.schema = typed_at, schema if schema is not None and not is_text(schema) else {}
                    self.raw = False
                else:
                    self.schema = schema
                    self.raw = is_text(schema) or (schema is None and not self.strict)
                out.append(("{" if not self.count else ", ") + json.dumps(self.key, ensure_ascii=False) + ": "
                           + ('"' if self.raw else ""))
                pos, self.phase = at, "value-start"
            elif phase == "value-start":
                if self.xml.newline:
                    if pos >= len(buf) and not (final or cut):
                        return out, pos, False
                    pos += buf.startswith("\n", pos)
                self.in_cdata = False
                if self.xml.cdata:
                    rest = buf[pos:pos + len(CDATA)]
                    if CDATA.startswith(rest) and len(rest) < len(CDATA) and not (final or cut):
                        return out, pos, False
                    if rest == CDATA:
                        pos, self.in_cdata = pos + len(CDATA), True
                self.phase = "value"
            elif phase == "value":
                pos, finished = self._value(buf, pos, final or cut, out)
                if not finished:
                    return out, pos, False
                if cut and pos >= len(buf):
                    return out + [self._close()], pos, True
            else:  # after a value
                at = match(self.xml.between, buf, pos, final or cut)
                if at == PARTIAL:
                    return out, pos, False
                pos, self.phase = max(at, pos), "key"

    def _value(self, buf: str, pos: int, final: bool, out: list[str]) -> tuple[int, bool]:
        closer = self.quote if self.xml.quoted else ("]]>" if self.in_cdata else "") + self.xml.close_for(self.key)
        at = self._attribute_end(buf, pos, final) if self.xml.quoted else buf.find(closer, pos)
        if at < 0 and not final:
            if self.raw:  # stream what cannot be the closing tag
                safe = len(buf) - (buf[pos:].endswith(closer) if self.xml.quoted else held_back(buf[pos:], (closer,)))
                if self.xml.newline and safe > pos and buf[safe - 1] == "\n":
                    safe -= 1
                out.append(json.dumps(buf[pos:safe], ensure_ascii=False)[1:-1]) if safe > pos else None
                return safe, False
            return pos, False
        end = at if at >= 0 else len(buf)
        text = buf[pos:end]
        if self.xml.newline and text.endswith("\n"):
            text = text[:-1]
        if self.raw:
            out.append(json.dumps(text, ensure_ascii=False)[1:-1] + '"')
        else:
            value = typed(text, self.schema, strict=False)
            out.append(json.dumps(value, ensure_ascii=False))
        self.count += 1
        self.phase = "after"
        return (end + len(closer) if at >= 0 else end), True

    def _attribute_end(self, buf: str, pos: int, final: bool) -> int:
        """Where an attribute's closing quote is (-1: not yet written, or not yet known): a JSON
        value's own end first (its strings may hold the quote), else the first quote followed by
        a space, `/` or `>`."""
        start = pos
        if not self.raw:
            end = self.scan.end if self.scan.end is not None else self.scan.feed(buf[pos + self.scan.seen:])
            if end is None and not final:
                return -1
            start = pos + end if end is not None and buf.startswith(self.quote, pos + end) else pos
        at = buf.find(self.quote, start)
        while at >= 0:
            after = buf[at + 1:at + 2]
            if after and after in ATTRIBUTE_END:
                return at
            if not after:
                return at if final else -1
            at = buf.find(self.quote, at + 1)
        return -1

    def _close(self) -> str:
        self.phase = "done"
        return "}" if self.count else "{}"
