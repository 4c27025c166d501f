"""Mistral / Mixtral (v0.3 tokenizer): `[INST] … [/INST]` with the system prompt folded into
the first user turn; `</s>` closes each answer."""

from .base import Family, ToolSyntax

TOOLS = ToolSyntax(
    open="[TOOL_CALLS][", close="]", separator=", ", trigger="[TOOL_CALLS]",
    instructions="[AVAILABLE_TOOLS][{tools}][/AVAILABLE_TOOLS]",
    result_open="[TOOL_RESULTS]", result_close="[/TOOL_RESULTS]",
    visible_tokens=("[TOOL_CALLS]",),
    tools_separator=", ",
)

TEMPLATE = (
    "{{ bos_token }}"
    "{%- set ns = namespace(system='') -%}"
    "{%- for m in messages -%}"
    "{%- if m.role == 'system' -%}{%- set ns.system = ns.system + m.content + '\n\n' -%}"
    "{%- elif m.role == 'assistant' -%}{{ m.content | trim }}{{ eos_token }}"
    "{%- else -%}[INST] {{ ns.system }}{% set ns.system = '' %}{{ m.content | trim }}[/INST]"
    "{%- endif -%}"
    "{%- endfor -%}"
)

FAMILY = Family(
    name="mistral",
    template=TEMPLATE,
    stop_tokens=("</s>",),
    control_tokens=("<s>", "</s>", "[INST]", "[/INST]", "[TOOL_CALLS]", "[AVAILABLE_TOOLS]",
                    "[/AVAILABLE_TOOLS]", "[TOOL_RESULTS]", "[/TOOL_RESULTS]"),
    template_markers=("[INST]",),
    bos_token="<s>",
    eos_token="</s>",
    tools=TOOLS,
)
