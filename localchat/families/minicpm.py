"""MiniCPM 5 (OpenBMB): ChatML turns, reasoning in `<think>`; tool calls as
`<function name="NAME"><param name="KEY">VALUE</param></function>` (a value with <, & or a
newline in CDATA), values typed by the schema."""

from .base import Family
from .chatml import CONTROL, TEMPLATE
from .codecs.xml_codecs import MINICPM5

FAMILY = Family(
    name="minicpm5",
    template='{#- calls: <function name="NAME"><param name="KEY">VALUE</param></function> -#}' + TEMPLATE,
    stop_tokens=("<|im_end|>", "<|endoftext|>"),
    control_tokens=CONTROL,
    template_markers=(("<|im_start|>", '<function name="', '<param name="'),),
    eos_token="<|im_end|>",
    codec=MINICPM5,
    reasoning=("<think>", "</think>"),
    models="MiniCPM 5",
)
