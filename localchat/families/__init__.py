"""Model families: an explicit registry, detection from GGUF metadata, prompt rendering."""

from __future__ import annotations

from . import chatml, deepseek, gemma, llama3, mistral, phi
from .base import Family
from .render import Prompt, render_prompt, system_first

# Order matters for detection: a more specific template marker comes before a general one
# (Phi-4's `<|im_sep|>` template also contains ChatML's `<|im_start|>`).
FAMILIES: dict[str, Family] = {
    f.name: f for f in (gemma.FAMILY, llama3.FAMILY, mistral.FAMILY, deepseek.FAMILY, phi.PHI4, phi.PHI3,
                        chatml.FAMILY)
}
DEFAULT_FAMILY = chatml.FAMILY


def get_family(name: str) -> Family:
    try:
        return FAMILIES[name]
    except KeyError:
        raise ValueError(f"unknown family {name!r}; known: {', '.join(FAMILIES)}") from None


def detect(architecture: str, chat_template: str | None, tokens: frozenset[str]) -> Family:
    """The family of a GGUF model: by its chat template, then its vocabulary, then its architecture."""
    if chat_template:
        for family in FAMILIES.values():
            if any(marker in chat_template for marker in family.template_markers):
                return family
    for family in FAMILIES.values():
        if family.stop_tokens[0] in tokens and all(t in tokens for t in family.template_markers):
            return family
    for family in FAMILIES.values():
        if architecture in family.architectures:
            return family
    return DEFAULT_FAMILY


__all__ = ["FAMILIES", "Family", "Prompt", "detect", "get_family", "render_prompt", "system_first"]
