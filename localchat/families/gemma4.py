"""Gemma 4: `<|turn>user` / `<|turn>model` … `<turn|>`, a system role of its own; reasoning in a
`<|channel>thought` … `<channel|>` block (the template writes an empty one when thinking is off);
tool calls as `<|tool_call>call:NAME{key:<|"|>text<|"|>,n:2}<tool_call|>` (codecs/gemma4.py)."""

from .base import Family
from .codecs.gemma4 import GEMMA4

TEMPLATE = (
    "{#- calls: <|tool_call>call:NAME{key:VALUE}<tool_call|> -#}"
    "{{ bos_token }}"
    "{%- if enable_thinking is defined and enable_thinking %}<|turn>system\n<|think|><turn|>\n{% endif -%}"
    "{%- for m in messages -%}"
    "<|turn>{{ 'model' if m.role == 'assistant' else m.role }}\n{{ m.content | trim }}<turn|>{{ '\\n' }}"
    "{%- endfor -%}"
    "{%- if add_generation_prompt %}<|turn>model{{ '\\n' }}"
    "{%- if not (enable_thinking is defined and enable_thinking) %}<|channel>thought\n<channel|>{% endif -%}"
    "{% endif -%}"
)

FAMILY = Family(
    name="gemma4",
    template=TEMPLATE,
    stop_tokens=("<turn|>",),
    control_tokens=("<bos>", "<eos>", "<|turn>", "<turn|>", "<|tool_call>", "<tool_call|>", '<|"|>', "<|channel>",
                    "<channel|>", "<|tool_response>", "<tool_response|>", "<|tool>", "<tool|>", "<|think|>"),
    template_markers=("<|turn>",),
    architectures=("gemma4",),
    bos_token="<bos>",
    eos_token="<eos>",
    codec=GEMMA4,
    reasoning=("<|channel>thought\n", "<channel|>"),
    models="Gemma 4",
)
