"""Kimi K3 (Moonshot): XTML messages, `<|open|>message role="ROLE"<|sep|>` … `<|close|>message<|sep|>`
then `<|end_of_msg|>`; the assistant's reasoning in `think`, its answer in `response`, its calls in
`tools` (codecs/xtml.py); results are `tool` messages. The template's `thinking` (on by default)
is the switch."""

from .base import Family
from .codecs.xtml import KIMI_K3, THINK

TEMPLATE = (
    "{#- calls: <|open|>tools<|sep|><|open|>call tool=\"NAME\" index=\"1\"<|sep|> -#}"
    "{%- for m in messages -%}"
    "<|open|>message role=\"{{ m.role }}\"<|sep|>"
    "{%- if m.role == 'assistant' -%}"
    "{%- if thinking is not defined or thinking %}<|open|>think<|sep|><|close|>think<|sep|>{% endif -%}"
    "<|open|>response<|sep|>{{ m.content }}<|close|>response<|sep|>"
    "{%- else %}{{ m.content }}{% endif -%}"
    "<|close|>message<|sep|><|end_of_msg|>"
    "{%- endfor -%}"
    "{%- if add_generation_prompt %}<|open|>message role=\"assistant\"<|sep|>"
    "{%- if thinking is not defined or thinking %}<|open|>think<|sep|>{% else %}<|open|>response<|sep|>{% endif %}"
    "{%- endif -%}"
)

FAMILY = Family(
    name="kimi-k3",
    template=TEMPLATE,
    stop_tokens=("<|end_of_msg|>",),
    control_tokens=("<|open|>", "<|close|>", "<|sep|>", "<|end_of_msg|>", "<|kimi_image_placeholder|>"),
    template_markers=(("<|open|>", "<|sep|>", "<|end_of_msg|>"),),
    eos_token="<|end_of_msg|>",
    codec=KIMI_K3,
    reasoning=THINK,
    thinking_switch="thinking",
    models="Kimi K3",
)
