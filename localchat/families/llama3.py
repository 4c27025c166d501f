"""Llama 3 / 3.1 / 3.2 / 3.3: header tokens around each role, `<|eot_id|>` ends a turn."""

from .base import Family

TEMPLATE = (
    "{{ bos_token }}"
    "{%- for m in messages -%}"
    "<|start_header_id|>{{ 'ipython' if m.role == 'tool' else m.role }}<|end_header_id|>\n\n"
    "{{ m.content | trim }}<|eot_id|>"
    "{%- endfor -%}"
    "{%- if add_generation_prompt %}<|start_header_id|>assistant<|end_header_id|>\n\n{% endif -%}"
)

FAMILY = Family(
    name="llama3",
    template=TEMPLATE,
    stop_tokens=("<|eot_id|>", "<|eom_id|>", "<|end_of_text|>"),
    control_tokens=(
        "<|begin_of_text|>", "<|end_of_text|>", "<|start_header_id|>", "<|end_header_id|>",
        "<|eot_id|>", "<|eom_id|>", "<|python_tag|>",
    ),
    template_markers=("<|start_header_id|>",),
    bos_token="<|begin_of_text|>",
    eos_token="<|end_of_text|>",
)
