"""MiniMax M1: `<beginning_of_sentence>ROLE HEADER\\n` … `<end_of_sentence>` turns (the
assistant's header is `ai name=assistant`), reasoning in `<think>`. Tool calls: `<tool_calls>`,
then one JSON object {"name", "arguments"} a line, then `</tool_calls>`."""

from .base import Family
from .codecs.json_codecs import MINIMAX_M1

TEMPLATE = (
    "{#- calls: <tool_calls>\n{\"name\": NAME, \"arguments\": {…}}\n</tool_calls> -#}"
    "{%- set heads = {'system': 'system ai_setting=assistant', 'user': 'user name=user',"
    " 'assistant': 'ai name=assistant', 'tool': 'tool name=tools'} -%}"
    "<begin_of_document>"
    "{%- for m in messages -%}"
    "<beginning_of_sentence>{{ heads[m.role] }}\n{{ m.content }}<end_of_sentence>{{ '\\n' }}"
    "{%- endfor -%}"
    "{%- if add_generation_prompt %}<beginning_of_sentence>ai name=assistant\n{% endif -%}"
)

FAMILY = Family(
    name="minimax-m1",
    template=TEMPLATE,
    stop_tokens=("<end_of_sentence>",),
    control_tokens=("<begin_of_document>", "<beginning_of_sentence>", "<end_of_sentence>"),
    template_markers=("<beginning_of_sentence>ai name=assistant",
                      ("<begin_of_document>", "<beginning_of_sentence>", "<end_of_sentence>")),
    eos_token="<end_of_sentence>",
    codec=MINIMAX_M1,
    reasoning=("<think>", "</think>"),
    thinking_switch="",
    models="MiniMax M1, MiniMax-Text-01",
)
