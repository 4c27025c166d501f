"""Preparing one generation (blocking, off the event loop): the prompt rendered with the
model's family, the output's constraint, the tokens, the sampling parameters with the model's
defaults and the server's limits applied once, and a splitter per choice for the output."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, replace
from typing import Any

from ..engine import Generate, Tokenizer
from ..engine.params import Media, knob_params
from ..errors import InvalidRequest
from ..families import Prompt
from ..families.codecs.split import Splitter
from ..models import Settings
from ..models.host import LoadedModel
from ..neutral import Audio, GenerationRequest, Image, ChatMessage
from . import constraints, limits
from .adapters import resolve_adapters
from .conversation import render_conversation
from .fetch import load_url
from .fim import fim_tokens
from .media import check_audio_format, check_count, check_reads, decode_audio, decode_image, marker, place_media


@dataclass(frozen=True)
class PreparedGeneration:
    generate: Generate
    splitters: list[Splitter]
    # where a prompt token is, in words (the access log's reason for a cache miss); None: a raw prompt, or media
    explain: Callable[[int, tuple[int, ...]], str] | None = None


def prepare(request: GenerationRequest, loaded: LoadedModel, settings: Settings | None = None) -> PreparedGeneration:
    """Render the prompt (images and audio decoded and placed), build and check the grammar,
    tokenize; apply the model's sampling defaults and the server's max_tokens_cap (`settings`;
    the other limits: limits.check, before the model is leased; the prompt's length: the
    engine's check_fits, as it takes the request)."""
    settings = settings or Settings()
    rules = request.output
    tools = constraints.codec_tools(rules)  # made once: for the prompt, the grammar and the splitters
    family, tokenizer = loaded.family, loaded.engine.tokenizer
    media: tuple[Media, ...] = ()
    fresh_from, explain = None, None
    if request.prompt is not None:
        tokens, thinking = _raw_tokens(request, loaded), False
    else:
        conversation, media = _media(request.messages, settings, loaded)
        prompt = render_conversation(request, conversation, loaded, tools)
        thinking = family.opens_reasoning(prompt.text)
        if media and request.prompt_logprobs is not None:
            raise InvalidRequest("not computed for a prompt with images or audio", field="prompt_logprobs")
        if media:
            tokens, media = place_media(tokenizer, prompt.segments, media)
        else:
            # the segments are tokenized one by one, so the last message's first token is found exactly
            last = prompt.last_turn if prompt.last_turn is not None and prompt.last_turn < len(prompt.segments) else None
            tokens, start = tokenizer.tokenize_at(list(prompt.segments), len(prompt.segments) if last is None else last)
            fresh_from = start if last is not None else None
            explain = _explainer(prompt, tokenizer, family.reasoning)
    # the server's grammar limit, read here for every protocol (the raw grammar and those made from schemas)
    constraint = constraints.build(rules, tools, family, thinking, settings.max_grammar_bytes)
    defaults, speed = knob_params(loaded.spec.sampling.model_dump())
    params = request.sampling.over(defaults)
    params = replace(params, logit_bias=logit_bias(request.sampling.logit_bias, tokenizer.n_vocab),
                     stop=tuple(params.stop or ()), ignore_eos=bool(params.ignore_eos),
                     max_tokens=limits.max_tokens(params.max_tokens, settings))
    raw = request.prompt is not None  # a raw completion is text: no reasoning or tool calls split out
    strict = constraint is not None and rules.calls_tools  # the calls follow the codec's grammar
    splitters = [Splitter() if raw else family.splitter(tools, thinking, strict, calls=rules.calls_tools)
                 for _ in range(request.n)]
    generate = Generate(tokens, params, loaded.stop_ids, constraint, n=request.n, logprobs=request.logprobs,
                        adapters=resolve_adapters(loaded, request.lora), media=media,
                        cache_prompt=request.cache_prompt, prompt_logprobs=request.prompt_logprobs,
                        fresh_from=fresh_from,
                        prediction=_prediction(request.prediction, tokenizer), cache_key=request.cache_key,
                        speed=request.sampling.over(speed))
    return PreparedGeneration(generate, splitters, explain)


MEDIA_TEXT = "<__media__>"  # an image or audio clip in a prompt shown as text (llama-server's marker)


def rendered(request: GenerationRequest, loaded: LoadedModel) -> str:
    """The chat prompt as `prepare` renders it, as text (llama-server's /apply-template); each
    image or audio clip shows as <__media__>."""
    conversation = tuple(replace(m, content=tuple((MEDIA_TEXT, False) if isinstance(p, (Image, Audio)) else p
                                                  for p in m.content)) for m in request.messages)
    return render_conversation(request, conversation, loaded, constraints.codec_tools(request.output)).text


def _media(messages: tuple[ChatMessage, ...], settings: Settings,
           loaded: LoadedModel) -> tuple[tuple[ChatMessage, ...], tuple[Media, ...]]:
    """Images and audio loaded (URLs) and decoded (Pillow), each replaced in its message by a
    marker where it sits; first, the model must read them (a projector for their kind)."""
    found = [(i, j, part) for i, m in enumerate(messages) for j, part in enumerate(m.content)
             if isinstance(part, (Image, Audio))]
    if not found:
        return messages, ()
    check_count(len(found), settings)
    media: list[Media] = []
    out = list(messages)
    for i, m in enumerate(messages):
        if not any(isinstance(p, (Image, Audio)) for p in m.content):
            continue
        parts: list[Any] = []
        for j, part in enumerate(m.content):
            where = getattr(part, "where", "") or f"messages.{i}.content.{j}"
            if isinstance(part, Audio):
                check_audio_format(part.format, where)
            if isinstance(part, (Image, Audio)):
                check_reads("image" if isinstance(part, Image) else "audio", where, loaded.projector, loaded.spec.name)
            if isinstance(part, Image):
                data = part.data if part.url is None else load_url(part.url, part.url_where or where, settings)
                media.append(decode_image(data, where, settings))
            elif isinstance(part, Audio):
                media.append(decode_audio(part.data, part.format, where, settings))
            parts.append(marker(len(media) - 1) if isinstance(part, (Image, Audio)) else part)
        out[i] = replace(m, content=tuple(parts))
    return tuple(out), tuple(media)


def _explainer(prompt: Prompt, tokenizer: Tokenizer,
               reasoning: tuple[str, str] | None) -> Callable[[int, tuple[int, ...]], str]:
    """Where token `at` of the prompt is, in words (Prompt.where), and, when the cached prompt it parts
    from (`theirs`: its tokens from there) has the family's reasoning there and this one not, that an
    earlier answer's reasoning was dropped: the prompt's segments are tokenized one by one, as
    `prepare` tokenizes them (only when asked: on a cache miss)."""
    def explain(at: int, theirs: tuple[int, ...] = ()) -> str:
        n = len(tokenizer.tokenize([]))  # (a BOS token, if the model adds one)
        for i, (text, plain) in enumerate(prompt.segments):
            tokens = tokenizer.tokenize_bytes(text.encode("utf-8", "replace"), parse_special=not plain)
            if n + len(tokens) > at:
                chars = len(b"".join(tokenizer.piece(t) for t in tokens[:at - n]).decode("utf-8", "ignore"))
                where = prompt.where(i, chars)
                cached = b"".join(tokenizer.piece(t) for t in theirs).decode("utf-8", "ignore").lstrip()
                if reasoning and cached.startswith(reasoning[0]) and not text[chars:].lstrip().startswith(reasoning[0]):
                    return f"{where}: reasoning dropped (the cached prompt has {reasoning[0]}… there)"
                return where
            n += len(tokens)
        return "the end of the prompt"
    return explain


def _prediction(text: str | None, tokenizer: Tokenizer) -> tuple[int, ...] | None:
    """The prediction's tokens, as plain text (no BOS, no control tokens)."""
    return tuple(tokenizer.tokenize_bytes(text.encode("utf-8", "replace"), parse_special=False)) if text else None


def _raw_tokens(request: GenerationRequest, loaded: LoadedModel) -> list[int]:
    """A raw prompt, no template: as written (special tokens parsed), or fill-in-the-middle."""
    assert request.prompt is not None
    engine, vocab = loaded.engine, loaded.engine.tokenizer
    if request.suffix is None:
        return vocab.tokenize([(request.prompt, False)])
    room = engine.n_ctx - min(request.sampling.max_tokens or 256, engine.n_ctx // 2)

    def plain(text: str) -> list[int]:
        return vocab.tokenize_bytes(text.encode("utf-8", "replace"), parse_special=False)

    return fim_tokens(vocab.fim, plain, request.prompt, request.suffix, bos=vocab.bos, extra=request.extra, budget=room)


def logit_bias(bias: dict[Any, float], n_vocab: int) -> dict[int, float]:
    """The bias by token id: each key a token of the vocabulary, each value within -100..100 (a
    request's, as the client wrote it; a peer's, peer.py)."""
    out: dict[int, float] = {}
    for key, value in bias.items():
        try:
            token = int(key)
        except ValueError:
            raise InvalidRequest(f"keys are token ids; {key!r} is not an integer", field="logit_bias") from None
        if not 0 <= token < n_vocab:
            raise InvalidRequest(f"token {token} is outside the vocabulary (0..{n_vocab - 1})", field="logit_bias")
        if not -100 <= value <= 100:
            raise InvalidRequest(f"{value} for token {token} is outside -100..100", field="logit_bias")
        out[token] = float(value)
    return out
