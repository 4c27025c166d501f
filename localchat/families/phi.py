"""Phi: Phi-3 / 3.5 (`<|user|>` … `<|end|>`) and Phi-4 (ChatML with `<|im_sep|>`)."""

from .base import Family

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
)

PHI4 = Family(
    name="phi4",
    template=PHI4_TEMPLATE,
    stop_tokens=("<|im_end|>", "<|endoftext|>"),
    control_tokens=("<|endoftext|>", "<|im_start|>", "<|im_sep|>", "<|im_end|>"),
    template_markers=("<|im_sep|>",),
    eos_token="<|endoftext|>",
)
