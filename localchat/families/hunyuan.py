"""Tencent Hy3: `<｜hy_User:opensource｜>` / `<｜hy_Assistant:opensource｜>` turns, reasoning in
`<think:opensource>` (the template's `reasoning_effort`: no_think, low, high); tool calls as
`<tool_call:opensource>NAME<tool_sep:opensource>` then `<arg_key:opensource>` /
`<arg_value:opensource>` lines, in a `<tool_calls:opensource>` block."""

from .base import Family
from .codecs.xml_codecs import HY3

_T = ":opensource"
TEMPLATE = (
    "{#- calls: <tool_calls:opensource> -#}"
    "{{ bos_token }}"
    "{%- for m in messages if m.role == 'system' %}{{ m.content }}{% endfor -%}"
    "{%- for m in messages -%}"
    "{%- if m.role == 'assistant' %}<｜hy_Assistant:opensource｜>{{ m.content }}<｜hy_eos:opensource｜>"
    "{%- elif m.role != 'system' %}<｜hy_User:opensource｜>{{ m.content }}{% endif -%}"
    "{%- endfor -%}"
    "{%- if add_generation_prompt %}<｜hy_Assistant:opensource｜><think:opensource></think:opensource>{% endif -%}"
)

FAMILY = Family(
    name="hy3",
    template=TEMPLATE,
    stop_tokens=(f"<｜hy_eos{_T}｜>",),
    control_tokens=(f"<｜hy_begin_of_sentence{_T}｜>", f"<｜hy_eos{_T}｜>", f"<｜hy_User{_T}｜>",
                    f"<｜hy_Assistant{_T}｜>", f"<｜hy_pad{_T}｜>"),
    template_markers=("<｜hy_Assistant",),
    bos_token=f"<｜hy_begin_of_sentence{_T}｜>",
    eos_token=f"<｜hy_eos{_T}｜>",
    codec=HY3,
    reasoning=(f"<think{_T}>", f"</think{_T}>"),
    thinking_switch="",  # (reasoning_effort takes no_think / low / high, not a switch)
    models="Tencent Hy3",
)
