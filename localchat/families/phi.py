"""Phi: Phi-3 / 3.5 (`<|user|>` … `<|end|>`), Phi-4-mini (the same turns; tools listed in
`<|tool|>`, calls as `functools[…]`) and Phi-4 (ChatML with `<|im_sep|>`)."""

from dataclasses import replace

from .base import Family
from .codecs.json_codecs import FIREFUNCTION

PHI3_TEMPLATE = (
    "{%- for m in messages -%}"
    "<|{{ m.role }}|>\n{{ m.content }}<|end|>{{ '\\n' }}"
    "{%- endfor -%}"
    "{%- if add_generation_prompt %}<|assistant|>\n{% endif -%}"
)

PHI4_TEMPLATE = (
    "{%- for m in messages -%}"
    "<|im_start|>{{ m.role }}<|im_sep|>{{ m.content }}<|im_end|>"
    "{%- endfor -%}"
    "{%- if add_generation_prompt %}<|im_start|>assistant<|im_sep|>{% endif -%}"
)

PHI3 = Family(
    name="phi3",
    template=PHI3_TEMPLATE,
    stop_tokens=("<|end|>", "<|endoftext|>"),
    control_tokens=("<s>", "</s>", "<|endoftext|>", "<|system|>", "<|user|>", "<|assistant|>", "<|end|>"),
    template_markers=("<|assistant|>", "<|end|>"),
    architectures=("phi3",),
    eos_token="<|endoftext|>",
    models="Phi-3, Phi-3.5",
)

PHI4_MINI = replace(PHI3, name="phi4-mini", codec=FIREFUNCTION, architectures=(),
                    template="{#- tools in <|tool|>…<|/tool|>; calls: functools[{…}] -#}" + PHI3_TEMPLATE, template_markers=(("<|assistant|>", "<|tool|>"),),
                    control_tokens=PHI3.control_tokens + ("<|tool|>", "<|/tool|>", "<|tool_call|>", "<|/tool_call|>"),
                    models="Phi-4-mini (function calling)")

PHI4 = Family(
    name="phi4",
    template=PHI4_TEMPLATE,
    stop_tokens=("<|im_end|>", "<|endoftext|>"),
    control_tokens=("<|endoftext|>", "<|im_start|>", "<|im_sep|>", "<|im_end|>"),
    template_markers=("<|im_sep|>",),
    eos_token="<|endoftext|>",
    models="Phi-4",
)
