"""DeepSeek-R1 and its distills (on Qwen and Llama): `<｜User｜>` … `<｜Assistant｜>`, and the
answer starts inside a think block. Tool calls use the generic JSON form (R1's own tool-call
tokens are not modelled here)."""

from .base import Family

TEMPLATE = (
    "{{ bos_token }}"
    "{%- for m in messages if m.role == 'system' %}{{ m.content }}{% endfor -%}"
    "{%- for m in messages -%}"
    "{%- if m.role == 'assistant' %}<｜Assistant｜>{{ m.content }}<｜end▁of▁sentence｜>"
    "{%- elif m.role != 'system' %}<｜User｜>{{ m.content }}{% endif -%}"
    "{%- endfor -%}"
    "{%- if add_generation_prompt %}<｜Assistant｜><think>{{ '\\n' }}{% endif -%}"
)

FAMILY = Family(
    name="deepseek-r1",
    template=TEMPLATE,
    stop_tokens=("<｜end▁of▁sentence｜>",),
    control_tokens=("<｜begin▁of▁sentence｜>", "<｜end▁of▁sentence｜>", "<｜User｜>", "<｜Assistant｜>"),
    template_markers=("<｜Assistant｜>",),
    bos_token="<｜begin▁of▁sentence｜>",
    eos_token="<｜end▁of▁sentence｜>",
    reasoning=("<think>", "</think>"),
)
