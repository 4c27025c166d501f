"""MiniMax M3: MiniMax M2's turns (`]~b]ROLE\\n` … `[e~[`, the assistant's role `ai`), reasoning in
`<mm:think>` … `</mm:think>` (the template's `thinking_mode`: enabled opens it, disabled closes it
at once, adaptive, the default, leaves it to the model; a turn with no reasoning starts with
`</mm:think>`). Tool calls: every tag after the `]<]minimax[>[` token, `<invoke name="NAME">` with
one `<KEY>VALUE</KEY>` element an argument, in `<tool_call>`; results in `<response>`."""

from .base import Family
from .codecs.xml_codecs import MINIMAX_M3

TEMPLATE = (
    "{#- calls: ]<]minimax[>[<tool_call>\n]<]minimax[>[<invoke name=\"NAME\">]<]minimax[>[<KEY>VALUE"
    "]<]minimax[>[</KEY>]<]minimax[>[</invoke>\n]<]minimax[>[</tool_call> -#}"
    "]~!b[]~b]system{{ '\\n' }}"
    "{%- if messages and messages[0].role == 'system' %}{{ messages[0].content }}"
    "{%- else %}You are a helpful assistant.{% endif -%}"
    "[e~[{{ '\\n' }}"
    "{%- for m in (messages[1:] if messages and messages[0].role == 'system' else messages) -%}"
    "]~b]{{ 'ai' if m.role == 'assistant' else m.role }}{{ '\\n' }}"
    "{%- if m.role == 'assistant' %}</mm:think>{% endif %}{{ m.content }}[e~[{{ '\\n' }}"
    "{%- endfor -%}"
    "{%- if add_generation_prompt %}]~b]ai{{ '\\n' }}"
    "{%- if thinking_mode is defined and thinking_mode == 'disabled' %}</mm:think>"
    "{%- elif thinking_mode is defined and thinking_mode == 'enabled' %}<mm:think>{% endif %}{% endif -%}"
)

FAMILY = Family(
    name="minimax-m3",
    template=TEMPLATE,
    stop_tokens=("[e~[",),
    control_tokens=("]~!b[", "]~b]", "[e~[", "]<]minimax[>[", "]<]image[>[", "]<]video[>["),
    template_markers=("]<]minimax[>[",),
    eos_token="[e~[",
    codec=MINIMAX_M3,
    reasoning=("<mm:think>", "</mm:think>"),
    thinking_switch="thinking_mode",
    thinking_values=("disabled", "enabled"),
    models="MiniMax M3",
)
