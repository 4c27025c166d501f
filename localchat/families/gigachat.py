"""GigaChat 3 / 3.1 (Sber): `ROLE<|role_sep|>\\n` … `<|message_sep|>\\n\\n` turns (a long
`developer system` turn first; tool results are `function result` turns). GigaChat 3 writes a
call as a `function call` turn of its own, `function call<|role_sep|>\\n{"name": N, "arguments": A}`;
3.1 writes it in the assistant's turn after `<|function_call|>`. One call a turn."""

from .base import Family
from .codecs.json_codecs import GIGACHAT3, GIGACHAT31

_TURNS = (
    "{{ bos_token }}"
    "{%- for m in messages -%}"
    "{{ 'function result' if m.role == 'tool' else m.role }}<|role_sep|>{{ '\\n' }}{{ m.content }}"
    "<|message_sep|>{{ '\\n\\n' }}"
    "{%- endfor -%}"
    "{%- if add_generation_prompt %}assistant<|role_sep|>{{ '\\n' }}{% endif -%}"
)
TEMPLATE_3 = "{#- calls: function call<|role_sep|>\n{\"name\": N, \"arguments\": A} -#}" + _TURNS
TEMPLATE_31 = "{#- calls: <|function_call|>{\"name\": N, \"arguments\": A} -#}" + _TURNS

GIGACHAT_31 = Family(
    name="gigachat3.1",
    template=TEMPLATE_31,
    stop_tokens=("<|message_sep|>",),
    control_tokens=("<s>", "</s>", "<|role_sep|>", "<|message_sep|>", "<|function_call|>"),
    template_markers=(("<|role_sep|>", "<|function_call|>"),),
    bos_token="<s>",
    eos_token="</s>",
    codec=GIGACHAT31,
    models="GigaChat 3.1 (10B-A1.8B, 702B-A36B)",
)

GIGACHAT_3 = Family(
    name="gigachat3",
    template=TEMPLATE_3,
    stop_tokens=("<|message_sep|>",),
    control_tokens=("<s>", "</s>", "<|role_sep|>", "<|message_sep|>"),
    template_markers=(("<|role_sep|>", "<|message_sep|>", "!<|function_call|>"),),
    bos_token="<s>",
    eos_token="</s>",
    codec=GIGACHAT3,
    models="GigaChat 3 (10B-A1.8B, 702B-A36B)",
)
