"""Apriel (ServiceNow) 1.5 and 1.6 Thinker: 1.5 has Phi-3's turns (`<|user|>` … `<|end|>`), 1.6
`<|begin_user|>` and its kin. Both reason first, in plain text: "Here are my reasoning steps:"
(1.6's prompt writes it, 1.5 writes it itself), the answer after `[BEGIN FINAL RESPONSE]`. Tool
calls: a JSON list in `<tool_calls>[…]</tool_calls>`."""

from dataclasses import replace

from .base import Family
from .codecs.json_codecs import APRIEL

REASONING = ("Here are my reasoning steps:", "[BEGIN FINAL RESPONSE]")

TEMPLATE_15 = (
    "{#- reasons, then [BEGIN FINAL RESPONSE]; calls: <tool_calls>[{…}]</tool_calls> -#}"
    "{{ bos_token }}"
    "{%- for m in messages -%}"
    "<|{{ 'tool_result' if m.role == 'tool' else m.role }}|>\n{{ m.content }}\n<|end|>{{ '\\n' }}"
    "{%- endfor -%}"
    "{%- if add_generation_prompt %}<|assistant|>\n{% endif -%}"
)

TEMPLATE_16 = (
    "{#- reasons, then [BEGIN FINAL RESPONSE]; calls: <tool_calls>[{…}]</tool_calls> -#}"
    "{{ bos_token }}"
    "{%- for m in messages -%}"
    "{%- if m.role == 'assistant' %}{{ '\\n' }}<|begin_assistant|>\n{{ m.content }}\n<|end|>{{ '\\n' }}"
    "{%- else %}<|begin_{{ 'tool_result' if m.role == 'tool' else m.role }}|>\n{{ m.content }}"
    "{%- if m.role != 'user' %}{{ '\\n' }}{% endif %}{% endif -%}"
    "{%- endfor -%}"
    "{%- if add_generation_prompt %}{{ '\\n' }}<|begin_assistant|>\nHere are my reasoning steps:\n{% endif -%}"
)

APRIEL_15 = Family(
    name="apriel-1.5",
    template=TEMPLATE_15,
    stop_tokens=("<|end|>", "</s>"),
    control_tokens=("<s>", "</s>", "<|system|>", "<|user|>", "<|assistant|>", "<|end|>", "<|tool_result|>",
                    "<|content|>"),
    template_markers=(("[BEGIN FINAL RESPONSE]", "<|assistant|>", "<tool_calls>"),),
    bos_token="<s>",
    eos_token="<|end|>",
    codec=APRIEL,
    reasoning=REASONING,
    thinking_switch="",
    models="Apriel 1.5 15B Thinker",
)

APRIEL_16 = replace(
    APRIEL_15, name="apriel-1.6", template=TEMPLATE_16,
    control_tokens=("<s>", "</s>", "<|begin_system|>", "<|begin_user|>", "<|begin_assistant|>", "<|end|>",
                    "<|begin_tool_result|>", "<|begin_content|>"),
    template_markers=("<|begin_assistant|>",), models="Apriel 1.6 15B Thinker")
