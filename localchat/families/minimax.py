"""MiniMax M2: `]~b]ROLE\\n` … `[e~[` turns (`]~!b[` starts the prompt; the assistant's role is
`ai`); the generation prompt opens `<think>`. Tool calls: `<invoke name="NAME">` with
`<parameter name="KEY">VALUE</parameter>` elements in `<minimax:tool_call>`; results in
`<response>`."""

from .base import Family
from .codecs.xml_codecs import MINIMAX

TEMPLATE = (
    "{#- calls: <minimax:tool_call>\n<invoke name=\"NAME\">\n<parameter name=\"KEY\">VALUE</parameter>\n</invoke>\n"
    "</minimax:tool_call> -#}"
    "]~!b[]~b]system{{ '\\n' }}"
    "{%- if messages and messages[0].role == 'system' %}{{ messages[0].content }}"
    "{%- else %}You are a helpful assistant.{% endif -%}"
    "[e~[{{ '\\n' }}"
    "{%- for m in (messages[1:] if messages and messages[0].role == 'system' else messages) -%}"
    "]~b]{{ 'ai' if m.role == 'assistant' else m.role }}\n{{ m.content }}[e~[{{ '\\n' }}"
    "{%- endfor -%}"
    "{%- if add_generation_prompt %}]~b]ai\n<think>\n{% endif -%}"
)

FAMILY = Family(
    name="minimax-m2",
    template=TEMPLATE,
    stop_tokens=("[e~[",),
    control_tokens=("]~!b[", "]~b]", "[e~["),
    template_markers=("<minimax:tool_call>",),
    architectures=("minimax-m2",),
    eos_token="[e~[",
    codec=MINIMAX,
    reasoning=("<think>", "</think>"),
    thinking_switch="",  # the template always opens a think block
    models="MiniMax M2, M2.1",
)
