"""Muse Glimmer: harmony-like `<|start|>ROLE<|message|>` … `<|eot|>` messages, each assistant
message with a recipient (`to=self`: reasoning, ended by `<|eom|>`; `to=user`: the answer;
`to=NAME`: a call); tool calls in Muse's ATEM protocol (codecs/atem.py); results as
`<|start|>tool NAME<|message|><tool_output name="NAME">` … `</tool_output><|eot|>`. The template's
`reasoning_strength` (low / medium / high) is its effort switch."""

from .base import Family
from .codecs.atem import MUSE_ATEM, THINK

TEMPLATE = (
    "{#- calls: <atem:function_calls> -#}"
    "{{ bos_token }}"
    "{%- for m in messages -%}"
    "{%- if m.role == 'system' -%}<|start|>system<|message|>{{ m.content }}{{ '\\n\\n' }}Reasoning strength: "
    "{{ reasoning_strength | default('high') }}.{{ '\\n\\n' }}# Valid recipients: \"self\", \"user\".<|eot|>"
    "{%- elif m.role == 'assistant' -%}<|start|>assistant to=user<|message|>{{ m.content }}<|eot|>"
    "{%- elif m.role == 'tool' -%}<|start|>tool<|message|>{{ m.content }}<|eot|>"
    "{%- else -%}<|start|>{{ m.role }}<|message|>{{ m.content }}<|eot|>{%- endif -%}"
    "{%- endfor -%}"
    "{%- if add_generation_prompt %}<|start|>assistant{% endif -%}"
)

FAMILY = Family(
    name="muse-glimmer",
    template=TEMPLATE,
    stop_tokens=("<|eot|>",),
    control_tokens=("<|start|>", "<|message|>", "<|eom|>", "<|eot|>", "<|patch|>", "<|video|>"),
    template_markers=("<atem:function_calls>",),
    eos_token="<|eot|>",
    codec=MUSE_ATEM,
    reasoning=THINK,
    effort_switch="reasoning_strength",
    models="Muse Glimmer",
)
