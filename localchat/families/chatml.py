"""ChatML: Qwen 2.5 / 3, QwQ, Hermes, SmolLM3 and many fine-tunes. `<|im_start|>role` … `<|im_end|>`.
Tool calls: JSON in `<tool_call>` tags (Hermes / Qwen). Qwen 3's templates take `enable_thinking`."""

from .base import Family
from .codecs.json_codecs import HERMES

TEMPLATE = (
    "{%- for m in messages -%}"
    "<|im_start|>{{ m.role }}\n{{ m.content }}<|im_end|>{{ '\\n' }}"
    "{%- endfor -%}"
    "{%- if add_generation_prompt %}<|im_start|>assistant\n{% endif -%}"
)

CONTROL = ("<|endoftext|>", "<|im_start|>", "<|im_end|>")

FAMILY = Family(
    name="chatml",
    template=TEMPLATE,
    stop_tokens=("<|im_end|>", "<|endoftext|>"),
    control_tokens=CONTROL,
    template_markers=("<|im_start|>",),
    architectures=("qwen2", "qwen2moe", "qwen3", "qwen3moe"),
    eos_token="<|im_end|>",
    codec=HERMES,
    reasoning=("<think>", "</think>"),  # Qwen 3, QwQ, SmolLM3, DeepSeek-R1 distills on Qwen
    models="Qwen 2.5 / 3, QwQ, Hermes 2 Pro / 3, SmolLM3, MiMo, other ChatML fine-tunes",
)
