"""Apertus (Swiss AI): `<|system_start|>` … `<|system_end|>`, a developer turn that switches
deliberation (`enable_thinking`) and lists the tools, `<|user_start|>` / `<|assistant_start|>`
turns; thoughts between `<|inner_prefix|>` and `<|inner_suffix|>`. Tool calls: a JSON list of
{"NAME": {…arguments}} between `<|tools_prefix|>` and `<|tools_suffix|>`; the results, a list,
follow in the same assistant turn."""

from .base import Family
from .codecs.json_codecs import APERTUS

TEMPLATE = (
    "{#- calls: <|tools_prefix|>[{\"NAME\": {…}}]<|tools_suffix|> -#}"
    "{%- for m in messages -%}"
    "{%- if m.role == 'system' %}<|system_start|>{{ m.content }}<|system_end|>"
    "{%- if loop.first %}<|developer_start|>Deliberation: "
    "{{ 'enabled' if enable_thinking is defined and enable_thinking else 'disabled' }}\n"
    "Tool Capabilities: disabled<|developer_end|>{% endif -%}"
    "{%- elif m.role == 'assistant' %}<|assistant_start|>{{ m.content }}<|assistant_end|>"
    "{%- else %}<|user_start|>{{ m.content }}<|user_end|>{% endif -%}"
    "{%- endfor -%}"
    "{%- if add_generation_prompt %}<|assistant_start|>{% endif -%}"
)

FAMILY = Family(
    name="apertus",
    template=TEMPLATE,
    stop_tokens=("<|assistant_end|>",),
    control_tokens=("<|system_start|>", "<|system_end|>", "<|developer_start|>", "<|developer_end|>",
                    "<|user_start|>", "<|user_end|>", "<|assistant_start|>", "<|assistant_end|>",
                    "<|inner_prefix|>", "<|inner_suffix|>", "<|tools_prefix|>", "<|tools_suffix|>"),
    template_markers=("<|tools_prefix|>", ("<|assistant_start|>", "<|assistant_end|>")),
    architectures=("apertus",),
    eos_token="<|assistant_end|>",
    codec=APERTUS,
    reasoning=("<|inner_prefix|>", "<|inner_suffix|>"),
    models="Apertus 8B / 70B Instruct",
)
