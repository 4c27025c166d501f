"""GLM 4.5 / 4.6 / 4.7 (Zhipu; also Laguna, Spark): `[gMASK]<sop>`, `<|user|>` / `<|assistant|>`
turns, `<think>` reasoning. Tool calls: `<tool_call>NAME` then `<arg_key>K</arg_key>` /
`<arg_value>V</arg_value>` pairs (4.5/4.6 a pair a line, 4.7 on one line)."""

from dataclasses import replace

from .base import Family
from .codecs.xml_codecs import GLM, GLM47

TEMPLATE = (
    "[gMASK]<sop>"
    "{%- for m in messages -%}"
    "<|{{ m.role if m.role != 'tool' else 'observation' }}|>\n{{ m.content }}"
    "{%- endfor -%}"
    "{%- if add_generation_prompt %}<|assistant|>\n{% endif -%}"
)

FAMILY = Family(
    name="glm",
    template="{#- calls: <tool_call>NAME\n<arg_key>K</arg_key>\n<arg_value>V</arg_value>\n</tool_call> -#}" + TEMPLATE,
    stop_tokens=("<|user|>", "<|observation|>", "<|endoftext|>"),
    control_tokens=("[gMASK]", "<sop>", "<|system|>", "<|user|>", "<|assistant|>", "<|observation|>",
                    "<|endoftext|>"),
    template_markers=("<arg_key>", ("[gMASK]", "<sop>")),
    architectures=("glm4", "glm4moe"),
    eos_token="<|endoftext|>",
    codec=GLM,
    reasoning=("<think>", "</think>"),
    models="GLM 4.5 / 4.6, GLM-4.5-Air, Laguna, Spark",
)

GLM_47 = replace(FAMILY, name="glm-4.7", codec=GLM47, architectures=(),
                 template="{#- calls: <tool_call>NAME<arg_key>K</arg_key><arg_value>V</arg_value></tool_call> -#}"
                 + TEMPLATE, template_markers=("</arg_key><arg_value>",),
                 models="GLM 4.7, GLM-4.7-Flash")
