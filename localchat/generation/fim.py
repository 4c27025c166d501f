"""Fill-in-the-middle prompts, laid out as llama.cpp's /infill does (repo-level pattern):

    [BOS] [FIM_REP]project⏎ [FIM_SEP]file⏎text … [FIM_SEP]filename⏎ [FIM_PRE]prefix [FIM_SUF]suffix [FIM_MID]

The FIM tokens come from the GGUF's vocabulary. When the prompt is too long for the context,
the extra files go first, then the head of the prefix and the tail of the suffix."""

from __future__ import annotations

from collections.abc import Callable, Sequence

from ..errors import InvalidRequest

Tokenize = Callable[[str], list[int]]  # plain text → tokens, no special tokens parsed, no BOS


def fim_tokens(fim: dict[str, int], tokenize: Tokenize, prefix: str, suffix: str, *, bos: int | None,
               extra: Sequence[tuple[str, str]] = (), budget: int, param: str = "suffix") -> list[int]:
    """The whole prompt in at most `budget` tokens."""
    if not all(k in fim for k in ("pre", "suf", "mid")):
        raise InvalidRequest(f"{param}: this model has no fill-in-the-middle tokens in its vocabulary "
                             "(FIM_PRE, FIM_SUF, FIM_MID); use a code model such as Qwen2.5-Coder, "
                             "or send the prompt without a suffix", param=param)
    head = [bos] if bos is not None else []
    before = tokenize(prefix)
    after = tokenize(suffix)
    context: list[int] = []
    if extra:
        if "rep" in fim:
            context += [fim["rep"], *tokenize("myproject\n")]
        for filename, text in extra:
            context += [fim["sep"], *tokenize(f"{filename}\n")] if "sep" in fim else tokenize("\n\n--- snippet ---\n\n")
            context += tokenize(text)
        if "sep" in fim:
            context += [fim["sep"], *tokenize("filename\n")]
    fixed = len(head) + 3
    room = budget - fixed
    if room <= 0:
        raise InvalidRequest("the context is too small for a fill-in-the-middle prompt", param=param)
    keep_after = min(len(after), max(room // 4, room - len(before)))
    after = after[:keep_after]
    before = before[max(0, len(before) - (room - len(after))):]
    context = context[max(0, len(context) - (room - len(after) - len(before))):] if context else []
    return [*head, *context, fim["pre"], *before, fim["suf"], *after, fim["mid"]]
