"""Llama 3 / 3.1 / 3.2 / 3.3: header tokens around each role, `<|eot_id|>` ends a turn. Tool
calls: a JSON object {"name": …, "parameters": …}, also read after `<|python_tag|>`."""

from dataclasses import replace

from .base import Family
from .codecs.json_codecs import FIREFUNCTION, FUNCTIONARY, LLAMA3

TEMPLATE = (
    "{{ bos_token }}"
    "{%- for m in messages -%}"
    "<|start_header_id|>{{ 'ipython' if m.role == 'tool' else m.role }}<|end_header_id|>\n\n"
    "{{ m.content | trim }}<|eot_id|>"
    "{%- endfor -%}"
    "{%- if add_generation_prompt %}<|start_header_id|>assistant<|end_header_id|>\n\n{% endif -%}"
)

FAMILY = Family(
    name="llama3",
    template=TEMPLATE,
    stop_tokens=("<|eot_id|>", "<|eom_id|>", "<|end_of_text|>"),
    control_tokens=(
        "<|begin_of_text|>", "<|end_of_text|>", "<|start_header_id|>", "<|end_header_id|>",
        "<|eot_id|>", "<|eom_id|>", "<|python_tag|>",
    ),
    template_markers=("<|start_header_id|>",),
    bos_token="<|begin_of_text|>",
    eos_token="<|end_of_text|>",
    codec=LLAMA3,
    models="Llama 3.1 / 3.2 / 3.3 (and Llama 3 fine-tunes)",
)

# Llama 3.1 fine-tunes with their own syntax.
FUNCTIONARY_31 = replace(FAMILY, name="functionary-v3.1", codec=FUNCTIONARY,
                         template="{#- calls: <function=NAME>{…}</function> -#}" + TEMPLATE,
                         template_markers=(("<|start_header_id|>", "<function="),), models="Functionary v3.1")
FIREFUNCTION_2 = replace(FAMILY, name="firefunction-v2", codec=FIREFUNCTION,
                         template="{#- calls: functools[{…}] -#}" + TEMPLATE,
                         template_markers=(("<|start_header_id|>", "functools"),), models="Firefunction v2")
