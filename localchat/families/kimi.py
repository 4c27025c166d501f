"""Kimi K2 (Moonshot): `<|im_user|>` / `<|im_assistant|>` … `<|im_middle|>` … `<|im_end|>`;
K2 Thinking reasons in `<think>`. Tool calls: `functions.NAME:IDX` in a section of calls."""

from .base import Family
from .codecs.json_codecs import KIMI_K2

TEMPLATE = (
    "{%- for m in messages -%}"
    "{%- if m.role == 'user' %}<|im_user|>user<|im_middle|>"
    "{%- elif m.role == 'assistant' %}<|im_assistant|>assistant<|im_middle|>"
    "{%- else %}<|im_system|>{{ m.role }}<|im_middle|>{% endif -%}"
    "{{ m.content }}<|im_end|>"
    "{%- endfor -%}"
    "{%- if add_generation_prompt %}<|im_assistant|>assistant<|im_middle|>{% endif -%}"
)

FAMILY = Family(
    name="kimi-k2",
    template=TEMPLATE,
    stop_tokens=("<|im_end|>",),
    control_tokens=("<|im_user|>", "<|im_assistant|>", "<|im_system|>", "<|im_middle|>", "<|im_end|>",
                    "<|tool_calls_section_begin|>", "<|tool_calls_section_end|>", "<|tool_call_begin|>",
                    "<|tool_call_argument_begin|>", "<|tool_call_end|>"),
    template_markers=("<|im_middle|>", "<|tool_calls_section_begin|>"),
    eos_token="<|im_end|>",
    codec=KIMI_K2,
    reasoning=("<think>", "</think>"),
    models="Kimi K2 Instruct, K2 Thinking",
)
