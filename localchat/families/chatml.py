"""ChatML: Qwen 2.5 / 3, Hermes, SmolLM and many fine-tunes. `<|im_start|>role` … `<|im_end|>`."""

from .base import Family

TEMPLATE = (
    "{%- for m in messages -%}"
    "<|im_start|>{{ m.role }}\n{{ m.content }}<|im_end|>{{ '\\n' }}"
    "{%- endfor -%}"
    "{%- if add_generation_prompt %}<|im_start|>assistant\n{% endif -%}"
)

FAMILY = Family(
    name="chatml",
    template=TEMPLATE,
    stop_tokens=("<|im_end|>", "<|endoftext|>"),
    control_tokens=("<|endoftext|>", "<|im_start|>", "<|im_end|>"),
    template_markers=("<|im_start|>",),
    architectures=("qwen2", "qwen2moe", "qwen3", "qwen3moe"),
    eos_token="<|im_end|>",
)
