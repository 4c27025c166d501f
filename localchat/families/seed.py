"""ByteDance Seed-OSS: `<seed:bos>ROLE\\n` … `<seed:eos>` turns, reasoning in `<seed:think>`
(switched off by a thinking budget of 0). Tool calls: Qwen3-Coder's XML elements with values
inline, in `<seed:tool_call>`."""

from .base import Family
from .codecs.xml_codecs import SEED

TEMPLATE = (
    "{#- calls: <seed:tool_call>\n<function=NAME>\n<parameter=KEY>VALUE</parameter>\n</function>\n</seed:tool_call> -#}"
    "{%- for m in messages -%}"
    "<seed:bos>{{ m.role }}\n{{ m.content }}<seed:eos>"
    "{%- endfor -%}"
    "{%- if add_generation_prompt %}<seed:bos>assistant\n{% endif -%}"
)

FAMILY = Family(
    name="seed-oss",
    template=TEMPLATE,
    stop_tokens=("<seed:eos>",),
    control_tokens=("<seed:bos>", "<seed:eos>", "<seed:pad>"),
    template_markers=("<seed:tool_call>", ("<seed:bos>", "<seed:eos>")),
    architectures=("seed_oss",),
    eos_token="<seed:eos>",
    codec=SEED,
    reasoning=("<seed:think>", "</seed:think>"),
    thinking_switch="thinking_budget",  # tokens; 0: no reasoning, -1: unlimited (the template's default)
    thinking_values=(0, -1),
    models="Seed-OSS 36B",
)
