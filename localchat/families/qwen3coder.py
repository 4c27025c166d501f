"""Qwen3-Coder and Qwen 3.5 (also Nemotron 3 Nano and StepFun 3.5, which write the same): ChatML
turns; tool calls as XML elements, `<tool_call>\\n<function=NAME>\\n<parameter=KEY>\\nVALUE\\n
</parameter>\\n</function>\\n</tool_call>`, each value raw text typed by the schema."""

from .base import Family
from .chatml import CONTROL, TEMPLATE
from .codecs.xml_codecs import QWEN_XML

FAMILY = Family(
    name="qwen3-coder",
    template="{#- calls: <tool_call>\n<function=NAME>\n<parameter=KEY>\nVALUE\n</parameter>\n</function>\n</tool_call> -#}"
             + TEMPLATE,
    stop_tokens=("<|im_end|>", "<|endoftext|>"),
    control_tokens=CONTROL,
    template_markers=(("<tool_call>", "<function=", "<parameter=", "!<seed:tool_call>"),),
    architectures=("qwen3next", "qwen35", "qwen35moe"),
    eos_token="<|im_end|>",
    codec=QWEN_XML,
    reasoning=("<think>", "</think>"),
    models="Qwen3-Coder, Qwen 3.5, Nemotron 3 Nano, StepFun 3.5",
)
