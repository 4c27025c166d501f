"""DeepSeek R1 and its distills (on Qwen and Llama), and DeepSeek V3.1: `<｜User｜>` …
`<｜Assistant｜>`. R1 answers inside a think block and writes calls as `function<｜tool▁sep｜>NAME`
with the arguments in a json code fence; V3.1 writes `NAME<｜tool▁sep｜>{…}` and thinks when the
template's `thinking` is on."""

from dataclasses import replace

from .base import Family
from .codecs.json_codecs import DEEPSEEK_R1, DEEPSEEK_V31

TEMPLATE = (
    "{{ bos_token }}"
    "{%- for m in messages if m.role == 'system' %}{{ m.content }}{% endfor -%}"
    "{%- for m in messages -%}"
    "{%- if m.role == 'assistant' %}<｜Assistant｜>{{ m.content }}<｜end▁of▁sentence｜>"
    "{%- elif m.role != 'system' %}<｜User｜>{{ m.content }}{% endif -%}"
    "{%- endfor -%}"
    "{%- if add_generation_prompt %}<｜Assistant｜><think>{{ '\\n' }}{% endif -%}"
)

FAMILY = Family(
    name="deepseek-r1",
    template=TEMPLATE,
    stop_tokens=("<｜end▁of▁sentence｜>",),
    control_tokens=("<｜begin▁of▁sentence｜>", "<｜end▁of▁sentence｜>", "<｜User｜>", "<｜Assistant｜>"),
    template_markers=("<｜Assistant｜>",),
    bos_token="<｜begin▁of▁sentence｜>",
    eos_token="<｜end▁of▁sentence｜>",
    codec=DEEPSEEK_R1,
    reasoning=("<think>", "</think>"),
    models="DeepSeek R1 and its distills",
)

V31 = replace(FAMILY, name="deepseek-v3.1", codec=DEEPSEEK_V31,
              template="{#- calls: NAME<｜tool▁sep｜>{…} -#}" + TEMPLATE.replace("<think>{{ '\\n' }}", "<think></think>"),
              template_markers=(("<｜Assistant｜>", "<｜tool▁sep｜>", "!```json"),),
              models="DeepSeek V3.1 / V3.1-Terminus")
