"""Mistral: `[INST] … [/INST]`, `</s>` closes each answer. Three tool-call syntaxes, told apart
by the template: a JSON list after `[TOOL_CALLS]` (Mistral 7B v0.3, Mixtral, Nemo);
`[TOOL_CALLS]NAME[ARGS]{…}` per call (Mistral Small 3.1, Devstral, Ministral 3, Magistral, with
`[THINK]` reasoning); the same with `[CALL_ID]` (Mistral Small 3.2). Their templates want
9-character call ids."""

from dataclasses import replace
from typing import Any

from .base import Family
from .codecs.json_codecs import MISTRAL, MISTRAL3, MISTRAL32
from .codecs.shape import short_id

TEMPLATE = (
    "{{ bos_token }}"
    "{%- set ns = namespace(system='') -%}"
    "{%- for m in messages -%}"
    "{%- if m.role == 'system' -%}{%- set ns.system = ns.system + m.content + '\n\n' -%}"
    "{%- elif m.role == 'assistant' -%}{{ m.content | trim }}{{ eos_token }}"
    "{%- else -%}[INST] {{ ns.system }}{% set ns.system = '' %}{{ m.content | trim }}[/INST]"
    "{%- endif -%}"
    "{%- endfor -%}"
)


# Tokenizer v7+ (Mistral Small 3, Devstral, Ministral 3, Magistral): a system prompt of its own.
TEMPLATE_V7 = (
    "{{ bos_token }}"
    "{%- for m in messages -%}"
    "{%- if m.role == 'system' -%}[SYSTEM_PROMPT]{{ m.content }}[/SYSTEM_PROMPT]"
    "{%- elif m.role == 'assistant' -%}{{ m.content | trim }}{{ eos_token }}"
    "{%- elif m.role == 'tool' -%}[TOOL_RESULTS]{{ m.content }}[/TOOL_RESULTS]"
    "{%- else -%}[INST]{{ m.content | trim }}[/INST]"
    "{%- endif -%}"
    "{%- endfor -%}"
)


def nine_character_ids(messages: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """Call ids as Mistral's templates require them (the same id in a call and its result)."""
    out = []
    for m in messages:
        if m.get("tool_calls"):
            m = {**m, "tool_calls": [{**c, "id": short_id(str(c.get("id") or ""))} for c in m["tool_calls"]]}
        if m.get("role") == "tool" and m.get("tool_call_id") is not None:
            m = {**m, "tool_call_id": short_id(str(m["tool_call_id"]))}
        out.append(m)
    return out


FAMILY = Family(
    name="mistral",
    template=TEMPLATE,
    stop_tokens=("</s>",),
    control_tokens=("<s>", "</s>", "[INST]", "[/INST]", "[TOOL_CALLS]", "[AVAILABLE_TOOLS]",
                    "[/AVAILABLE_TOOLS]", "[TOOL_RESULTS]", "[/TOOL_RESULTS]"),
    template_markers=("[INST]",),
    bos_token="<s>",
    eos_token="</s>",
    codec=MISTRAL,
    history=nine_character_ids,
    models="Mistral 7B v0.3, Mixtral, Mistral Nemo",
)

MISTRAL_ARGS = replace(
    FAMILY, name="mistral3", codec=MISTRAL3, template="{#- calls: [TOOL_CALLS]NAME[ARGS]{…} -#}" + TEMPLATE_V7, reasoning=("[THINK]", "[/THINK]"),
    control_tokens=FAMILY.control_tokens + ("[ARGS]", "[SYSTEM_PROMPT]", "[/SYSTEM_PROMPT]", "[THINK]", "[/THINK]"),
    template_markers=(("[INST]", "[ARGS]"),),
    models="Mistral Small 3.1, Devstral, Ministral 3, Magistral")

MISTRAL_CALL_ID = replace(
    MISTRAL_ARGS, name="mistral-small-3.2", codec=MISTRAL32,
    template="{#- calls: [TOOL_CALLS]NAME[CALL_ID]ID[ARGS]{…} -#}" + TEMPLATE_V7,
    # ([CALL_ID] is in Devstral's and Magistral's vocabularies too: only the template tells 3.2 apart)
    template_markers=(("[INST]", "[CALL_ID]"),), models="Mistral Small 3.2")
