"""gpt-oss: OpenAI's harmony format (see codecs/harmony.py). The answer, reasoning and calls each
go to their channel; the template's `reasoning_effort` (low / medium / high) is the switch."""

from .base import Family
from .codecs.harmony import HARMONY

# Harmony as gpt-oss's own template writes it, without its builtin tools; it lists the tools
# and writes calls and results itself.
TEMPLATE = (
    "<|start|>system<|message|>You are ChatGPT, a large language model trained by OpenAI.\n"
    "Reasoning: {{ reasoning_effort | default('medium') }}\n\n"
    "# Valid channels: analysis, commentary, final. Channel must be included for every message."
    "{%- if tools %}\nCalls to these tools must go to the commentary channel: 'functions'.{% endif %}<|end|>"
    "{%- set ns = namespace(last='') -%}"
    "{%- for m in messages -%}"
    "{%- if m.role in ('system', 'developer') -%}<|start|>developer<|message|># Instructions\n\n{{ m.content }}"
    "{%- if loop.first and tools %}\n\n# Tools\n\n## functions\n\nnamespace functions {\n"
    "{%- for t in tools %}\n// {{ t.function.description | default('') }}\n"
    "type {{ t.function.name }} = (_: {{ t.function.parameters | tojson }}) => any;\n{% endfor %}"
    "} // namespace functions{% endif %}<|end|>"
    "{%- elif m.role == 'user' -%}<|start|>user<|message|>{{ m.content }}<|end|>"
    "{%- elif m.role == 'assistant' and m.tool_calls -%}"
    "{%- for c in m.tool_calls -%}<|start|>assistant to=functions.{{ c.function.name }}<|channel|>commentary json"
    "<|message|>{{ c.function.arguments | tojson }}<|call|>{%- set ns.last = c.function.name -%}{%- endfor -%}"
    "{%- elif m.role == 'assistant' -%}<|start|>assistant<|channel|>final<|message|>{{ m.content }}<|end|>"
    "{%- elif m.role == 'tool' -%}<|start|>functions.{{ ns.last }} to=assistant<|channel|>commentary<|message|>"
    "{{ m.content }}<|end|>"
    "{%- endif -%}"
    "{%- endfor -%}"
    "{%- if add_generation_prompt %}<|start|>assistant{% endif -%}"
)

FAMILY = Family(
    name="gpt-oss",
    template=TEMPLATE,
    stop_tokens=("<|return|>", "<|call|>"),
    control_tokens=("<|startoftext|>", "<|endoftext|>", "<|start|>", "<|end|>", "<|message|>", "<|channel|>",
                    "<|constrain|>", "<|return|>", "<|call|>"),
    template_markers=("<|channel|>",),
    architectures=("gpt-oss",),
    eos_token="<|return|>",
    codec=HARMONY,
    effort_switch="reasoning_effort",
    models="gpt-oss 20B / 120B",
)
