"""Model families: an explicit registry, detection in one place (`choose`), prompt rendering."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Protocol

from . import (apertus, apriel, chatml, command_r, deepseek, deepseek_dsml, gemma, gemma4, gigachat, glm, gptoss,
               granite, hunyuan, kimi, kimi_k3, lfm2, llama3, minicpm, minimax, minimax_m1, minimax_m3, mistral, muse,
               nemotron, phi, qwen3coder, seed, solar)
from .base import Family
from .codecs.base import Codec
from .render import Prompt, TemplateCaps, render_prompt, system_first, template_caps

# Order matters for detection: a more specific template marker comes before a general one
# (Qwen3-Coder's template is ChatML with XML tool calls; Phi-4's `<|im_sep|>` template also
# contains ChatML's `<|im_start|>`).
FAMILIES: dict[str, Family] = {
    f.name: f for f in (
        # syntaxes with markers of their own (before DeepSeek's, Phi-3's and ChatML's)
        deepseek_dsml.V32, deepseek_dsml.V4, gemma4.FAMILY, lfm2.FAMILY, minicpm.FAMILY, hunyuan.FAMILY,
        seed.FAMILY, minimax.FAMILY, apriel.APRIEL_15, apriel.APRIEL_16, nemotron.FAMILY,
        minimax_m1.FAMILY, apertus.FAMILY, solar.FAMILY, gigachat.GIGACHAT_31, gigachat.GIGACHAT_3, minimax_m3.FAMILY,
        muse.FAMILY, kimi_k3.FAMILY,
        gptoss.FAMILY, command_r.FAMILY, kimi.FAMILY, deepseek.V31, deepseek.FAMILY, glm.GLM_47, glm.FAMILY,
        qwen3coder.FAMILY, gemma.FAMILY, llama3.FUNCTIONARY_31, llama3.FIREFUNCTION_2, llama3.FAMILY,
        mistral.MISTRAL_CALL_ID, mistral.MISTRAL_ARGS, mistral.FAMILY, phi.PHI4, phi.PHI4_MINI, phi.PHI3,
        granite.FAMILY, granite.GRANITE4, chatml.FAMILY)
}
DEFAULT_FAMILY = chatml.FAMILY


class GgufFacts(Protocol):
    """What detection reads from a GGUF header (models.gguf.ModelInfo has it)."""

    architecture: str
    chat_template: str | None
    tokens: frozenset[str]


@dataclass(frozen=True)
class Choice:
    family: Family
    template: str  # the chat template the model renders with
    detected: bool  # the family was told by the GGUF (not named in models.toml)


def get_family(name: str) -> Family:
    try:
        return FAMILIES[name]
    except KeyError:
        raise ValueError(f"unknown family {name!r}; known: {', '.join(FAMILIES)}") from None


def detect(architecture: str, chat_template: str | None, tokens: frozenset[str]) -> Family:
    """The family of a GGUF model: by its chat template, then its vocabulary, then its architecture."""
    if chat_template:
        for family in FAMILIES.values():
            if family.matches(chat_template):
                return family
    for family in FAMILIES.values():
        markers = family.vocabulary_markers
        if markers and family.stop_tokens[0] in tokens and all(t in tokens for t in markers):
            return family
    for family in FAMILIES.values():
        if architecture in family.architectures:
            return family
    return DEFAULT_FAMILY


def choose(family: str | None, gguf: GgufFacts | None, template: str | None = None) -> Choice:
    """The family and chat template a model gets: models.toml's `family` if it names one, else
    the family the template (models.toml's, else the GGUF's), vocabulary or architecture tells;
    models.toml's `template`, else the GGUF's own (unless models.toml names the family: then the
    family's)."""
    if family:
        chosen = get_family(family)
    elif gguf is not None:
        chosen = detect(gguf.architecture, template or gguf.chat_template, gguf.tokens)
    else:
        chosen = DEFAULT_FAMILY
    own = gguf.chat_template if gguf is not None and not family else None
    return Choice(chosen, template or own or chosen.template, not family)


__all__ = ["FAMILIES", "Choice", "Codec", "Family", "Prompt", "TemplateCaps", "choose", "detect",
           "get_family", "render_prompt", "system_first", "template_caps"]
