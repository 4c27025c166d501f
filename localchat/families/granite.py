"""IBM Granite 3.x / 4: `<|start_of_role|>ROLE<|end_of_role|>` … `<|end_of_text|>`. Granite 3.x
calls tools with `<|tool_call|>` and a JSON list, and reasons in `<think>` when the template's
`thinking` is on; Granite 4 writes Hermes-style `<tool_call>` JSON."""

from dataclasses import replace

from .base import Family
from .codecs.json_codecs import GRANITE3, HERMES

TEMPLATE = (
    "{%- for m in messages -%}"
    "<|start_of_role|>{{ m.role }}<|end_of_role|>{{ m.content }}<|end_of_text|>{{ '\\n' }}"
    "{%- endfor -%}"
    "{%- if add_generation_prompt %}<|start_of_role|>assistant<|end_of_role|>{% endif -%}"
)

FAMILY = Family(
    name="granite",
    template="{#- calls: <|tool_call|>[{…}] -#}" + TEMPLATE,
    stop_tokens=("<|end_of_text|>",),
    control_tokens=("<|start_of_role|>", "<|end_of_role|>", "<|end_of_text|>", "<|tool_call|>"),
    template_markers=(("<|start_of_role|>", "<|tool_call|>"),),
    architectures=("granite",),
    eos_token="<|end_of_text|>",
    codec=GRANITE3,
    reasoning=("<think>", "</think>"),
    thinking_switch="thinking",
    models="Granite 3.x",
)

GRANITE4 = replace(FAMILY, name="granite4", codec=HERMES, template=TEMPLATE, template_markers=("<|start_of_role|>",),
                   control_tokens=FAMILY.control_tokens[:3], reasoning=None, architectures=("granitehybrid",),
                   models="Granite 4")
