"""LFM2.5 (Liquid AI) with Pythonic calls: ChatML turns, `<|startoftext|>` first, reasoning in
`<think>`; tool calls as a Python list, `<|tool_call_start|>[name(k='v', n=2)]<|tool_call_end|>`
(codecs/pythonic.py). (LFM2 and LFM2.5-Instruct's templates write no calls: ChatML serves them.)"""

from .base import Family
from .chatml import CONTROL, TEMPLATE
from .codecs.pythonic import LFM2

FAMILY = Family(
    name="lfm2",
    template="{#- calls: <|tool_call_start|>[name(k='v')]<|tool_call_end|> -#}{{ bos_token }}" + TEMPLATE,
    stop_tokens=("<|im_end|>",),
    control_tokens=("<|startoftext|>", *CONTROL, "<|tool_call_start|>", "<|tool_call_end|>"),
    template_markers=(("<|im_start|>", "<|tool_call_start|>"),),
    architectures=("lfm2", "lfm2moe"),
    bos_token="<|startoftext|>",
    eos_token="<|im_end|>",
    codec=LFM2,
    reasoning=("<think>", "</think>"),
    models="LFM2.5-8B-A1B",
)
