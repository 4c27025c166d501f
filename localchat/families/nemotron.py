"""NVIDIA Nemotron Nano 2: `<SPECIAL_11>User` / `<SPECIAL_11>Assistant` turns, `<SPECIAL_12>`
ends the assistant's; the generation prompt opens `<think>` (a `/no_think` in the messages
closes it at once). Tool calls: a JSON list in `<TOOLCALL>[…]</TOOLCALL>`; results in
`<TOOL_RESPONSE>[…]</TOOL_RESPONSE>`."""

from .base import Family
from .codecs.json_codecs import NEMOTRON

TEMPLATE = (
    "{#- calls: <TOOLCALL>[{…}]</TOOLCALL> -#}"
    "<SPECIAL_10>System{{ '\\n' }}"
    "{%- if messages and messages[0].role == 'system' %}{{ messages[0].content }}{% endif -%}"
    "{{ '\\n\\n' }}"
    "{%- for m in (messages[1:] if messages and messages[0].role == 'system' else messages) -%}"
    "{%- if m.role == 'assistant' %}<SPECIAL_11>Assistant\n{{ m.content }}\n<SPECIAL_12>{{ '\\n' }}"
    "{%- else %}<SPECIAL_11>User\n{{ m.content }}\n{% endif -%}"
    "{%- endfor -%}"
    "{%- if add_generation_prompt %}<SPECIAL_11>Assistant\n<think>\n{% endif -%}"
)

FAMILY = Family(
    name="nemotron-nano-2",
    template=TEMPLATE,
    stop_tokens=("<SPECIAL_12>",),
    control_tokens=("<SPECIAL_10>", "<SPECIAL_11>", "<SPECIAL_12>"),
    template_markers=("<TOOLCALL>", ("<SPECIAL_10>", "<SPECIAL_11>", "<SPECIAL_12>")),
    architectures=("nemotron_h",),
    eos_token="<SPECIAL_12>",
    codec=NEMOTRON,
    reasoning=("<think>", "</think>"),
    thinking_switch="",  # `/think` or `/no_think` in a message
    models="Nemotron Nano 2 (9B, 12B)",
)
