"""Gemma (1, 2, 3): `<start_of_turn>user` / `<start_of_turn>model`; no system role, so the
system prompt opens the first user turn, as Google's own template does. No tool syntax of its
own: calls are asked for as JSON in a ```tool_call fence (a ```json fence or bare JSON is read too)."""

from .base import Family
from .codecs.json_codecs import GEMMA3

TEMPLATE = (
    "{{ bos_token }}"
    "{%- set ns = namespace(system='') -%}"
    "{%- for m in messages -%}"
    "{%- if m.role == 'system' -%}{%- set ns.system = ns.system + m.content + '\n\n' -%}"
    "{%- else -%}"
    "<start_of_turn>{{ 'model' if m.role == 'assistant' else 'user' }}{{ '\\n' }}"
    "{%- if m.role != 'assistant' %}{{ ns.system }}{% set ns.system = '' %}{% endif -%}"
    "{{ m.content | trim }}<end_of_turn>{{ '\\n' }}"
    "{%- endif -%}"
    "{%- endfor -%}"
    "{%- if add_generation_prompt %}<start_of_turn>model\n{% endif -%}"
)

FAMILY = Family(
    name="gemma",
    template=TEMPLATE,
    stop_tokens=("<end_of_turn>",),
    control_tokens=("<bos>", "<eos>", "<start_of_turn>", "<end_of_turn>"),
    template_markers=("<start_of_turn>",),
    architectures=("gemma", "gemma2", "gemma3", "gemma3n"),
    bos_token="<bos>",
    eos_token="<eos>",
    codec=GEMMA3,
    models="Gemma 2, Gemma 3, Gemma 3n",
)
