"""Cohere Command R7B (and Command A): `<|START_OF_TURN_TOKEN|><|USER_TOKEN|>` … turns, reasoning
between `<|START_THINKING|>` and `<|END_THINKING|>`, the answer between `<|START_RESPONSE|>` and
`<|END_RESPONSE|>` (control tokens: not shown), calls as a JSON list in `<|START_ACTION|>`."""

from .base import Family
from .codecs.json_codecs import COMMAND_R

TEMPLATE = (
    "{{ bos_token }}"
    "{%- for m in messages -%}"
    "<|START_OF_TURN_TOKEN|>"
    "{%- if m.role == 'user' %}<|USER_TOKEN|>{{ m.content }}"
    "{%- elif m.role == 'assistant' %}<|CHATBOT_TOKEN|><|START_RESPONSE|>{{ m.content }}<|END_RESPONSE|>"
    "{%- else %}<|SYSTEM_TOKEN|>{{ m.content }}{% endif -%}"
    "<|END_OF_TURN_TOKEN|>"
    "{%- endfor -%}"
    "{%- if add_generation_prompt %}<|START_OF_TURN_TOKEN|><|CHATBOT_TOKEN|>{% endif -%}"
)

FAMILY = Family(
    name="command-r7b",
    template=TEMPLATE,
    stop_tokens=("<|END_OF_TURN_TOKEN|>",),
    control_tokens=("<BOS_TOKEN>", "<|END_OF_TURN_TOKEN|>", "<|START_OF_TURN_TOKEN|>", "<|USER_TOKEN|>",
                    "<|CHATBOT_TOKEN|>", "<|SYSTEM_TOKEN|>", "<|START_RESPONSE|>", "<|END_RESPONSE|>",
                    "<|START_ACTION|>", "<|END_ACTION|>", "<|START_THINKING|>", "<|END_THINKING|>",
                    "<|START_TOOL_RESULT|>", "<|END_TOOL_RESULT|>"),
    template_markers=(("<|START_OF_TURN_TOKEN|>", "<|START_ACTION|>"),),
    architectures=("cohere2",),
    bos_token="<BOS_TOKEN>",
    eos_token="<|END_OF_TURN_TOKEN|>",
    codec=COMMAND_R,
    reasoning=("<|START_THINKING|>", "<|END_THINKING|>"),
    models="Command R7B, Command A",
)
