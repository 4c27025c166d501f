"""The reference a chat template is rendered against: plain jinja2, set up as Hugging Face's
`apply_chat_template` sets it up (an immutable sandbox, trim_blocks and lstrip_blocks, the
loopcontrols extension and the `{% generation %}` tag, and the globals and filter HF and
llama.cpp give every template: `raise_exception`, `strftime_now`, `tojson`), given the
messages exactly as the client sent them. No placeholders, no codec, no folding: what the
template itself writes."""

from __future__ import annotations

import json
from datetime import datetime
from typing import Any

import jinja2
import jinja2.ext
from jinja2.sandbox import ImmutableSandboxedEnvironment, SandboxedEnvironment


class _Generation(jinja2.ext.Extension):
    """HF's AssistantTracker without the tracking: `{% generation %}…{% endgeneration %}` renders its body."""

    tags = {"generation"}

    def parse(self, parser: Any) -> Any:
        next(parser.stream)
        return parser.parse_statements(("name:endgeneration",), drop_needle=True)


def _raise(message: str) -> None:
    raise jinja2.exceptions.TemplateError(message)


def _tojson(value: Any, ensure_ascii: bool = False, indent: int | None = None, separators: Any = None,
            sort_keys: bool = False) -> str:
    return json.dumps(value, ensure_ascii=ensure_ascii, indent=indent, separators=separators, sort_keys=sort_keys)


def environment(immutable: bool = True) -> jinja2.Environment:
    sandbox = ImmutableSandboxedEnvironment if immutable else SandboxedEnvironment
    env = sandbox(trim_blocks=True, lstrip_blocks=True, extensions=[jinja2.ext.loopcontrols, _Generation])
    env.filters["tojson"] = _tojson
    env.globals["raise_exception"] = _raise
    env.globals["strftime_now"] = lambda fmt: datetime.now().strftime(fmt)
    return env


def reference_render(template: str, messages: list[dict[str, Any]], *, bos_token: str = "", eos_token: str = "",
                     add_generation_prompt: bool = True, immutable: bool = True, **extra: Any) -> str:
    """The template's own rendering of `messages` (tools and other variables in `extra`).
    `immutable=False`: lists the template builds may change (`ns.ids.append(…)`: Kimi K2's
    templates; llama.cpp's engine allows it, HF's immutable sandbox refuses it)."""
    variables = {"messages": messages, "add_generation_prompt": add_generation_prompt, "bos_token": bos_token,
                 "eos_token": eos_token, **extra}
    return environment(immutable).from_string(template).render(**variables)
