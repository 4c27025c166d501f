"""Plain data crossing the engine boundary."""

from __future__ import annotations

import json
from dataclasses import asdict, dataclass, field, fields
from typing import Any

N_BATCH = 512  # tokens one llama.cpp batch holds: the prompt chunk of one step (and the compute buffer's size)
EMBED_BATCH = 2048  # tokens of an embedding context: its batch, so the longest input one embedding takes
SWA_FULL = True  # sliding-window layers keep the whole context, so a cached prefix stays reusable


def _knob(default: Any, **bounds: float) -> Any:
    """A sampling field a request, models.toml and the REPL may set, with its bounds."""
    return field(default=default, metadata={"bounds": bounds})


@dataclass(frozen=True)
class SamplingParams:
    """What the answer is sampled with. Declared once: the request models (api/), models.toml's
    defaults (models/) and the REPL's /set derive their fields and bounds from the fields made with
    _knob, here and in SpeedParams (KNOBS)."""

    max_tokens: int | None = _knob(None, ge=1)  # None: until the context is full
    temperature: float = _knob(0.8, ge=0, le=2)
    top_k: int = _knob(40, ge=0)
    top_p: float = _knob(0.95, ge=0, le=1)
    min_p: float = _knob(0.05, ge=0, le=1)
    repeat_penalty: float = _knob(1.0, gt=0, le=10)
    presence_penalty: float = _knob(0.0, ge=-2, le=2)
    frequency_penalty: float = _knob(0.0, ge=-2, le=2)
    penalty_last_n: int = _knob(64, ge=-1, le=1 << 20)  # llama.cpp allocates this many per sequence
    # End a generation that loops: its last this-many tokens (and 3 periods) repeat a unit of 1 to 256
    # tokens (engine/sampling/repetition.py); it ends as at max_tokens ("length"). 0: never.
    repetition_stop: int = _knob(256, ge=0, le=1 << 20)
    seed: int | None = _knob(None)
    logit_bias: dict[int, float] = field(default_factory=dict)
    stop: tuple[str, ...] = ()
    ignore_eos: bool = False
    # llama-server's editor limits (/infill; text.LineLimits): after the first line break, a line indented
    # less than n_indent ends the answer; a line break written t_max_predict_ms after the first token too. 0: off.
    n_indent: int = 0
    t_max_predict_ms: int = 0


@dataclass(frozen=True)
class SpeedParams:
    """How the engine reads a prompt and drafts an answer: what a request costs, not what it writes
    (drafts are verified; moved cells are an approximation by design, below). Settable as
    SamplingParams' fields are: a request, models.toml and the REPL's /set (KNOBS)."""

    # Draft at most this many tokens a step from the text read and written so far (drafting/drafts.py), verified
    # in the same batch: the same text, faster where the output copies earlier text (an edit, a patch). How
    # many, up to this, is the cost model's choice (drafting/draft_cost.py: what a step costs here). 0: off.
    ngram_draft: int = _knob(64, ge=0, le=64)
    # A prompt of at least this many tokens that matches a slot's cache but for a span (a folder's path, a
    # date, a session id) reuses the cached cells after the span, moved to their new positions (matching.py's
    # shifted_match); only the span and what is new are read. The moved cells saw the old span. 0: off.
    cache_reuse: int = _knob(1024, ge=0, le=1 << 20)


KNOBS: dict[str, dict[str, float]] = {f.name: f.metadata["bounds"] for cls in (SamplingParams, SpeedParams)
                                      for f in fields(cls) if "bounds" in f.metadata}


def knob_params(values: dict[str, Any]) -> tuple[SamplingParams, SpeedParams]:
    """Every knob's value (models.toml's sampling defaults) as the two sets that carry them."""
    return (SamplingParams(**{f.name: values[f.name] for f in fields(SamplingParams) if f.name in values}),
            SpeedParams(**{f.name: values[f.name] for f in fields(SpeedParams) if f.name in values}))


@dataclass(frozen=True)
class Check:
    """A value of the output checked against a schema as it is written (checking.py)."""

    anchor: str  # a regular expression for the text just before the value; "" for where the grammar starts
    schema: str  # the schema, as JSON
    fails: tuple[str, ...] = ()  # JSON pointers of the sub-schemas whose values can break it once complete
    entries: tuple[str, ...] = ()  # what it holds ("[tool]#/path:keyword"), for the answer's report


@dataclass(frozen=True)
class Constraint:
    """A GBNF grammar (start rule `root`) the output must follow; checked by the caller
    before it gets here. With triggers it is lazy: the text is free until it contains one of
    the trigger strings, and from the end of that string on the grammar holds."""

    grammar: str
    triggers: tuple[str, ...] = ()
    # Lazy too: (a regular expression, the grammar that holds from the end of its match): a call begun in
    # another form than the syntax's own ({"name": "TOOL" in a code fence) is forced valid from there.
    loose: tuple[tuple[str, str], ...] = ()
    after: str = ""  # the triggers count only once this text has been written (a think block's end)
    loosened: tuple[str, ...] = ()  # schema keywords neither the grammar nor a check holds ("path:keyword"; not used here)
    checks: tuple[Check, ...] = ()  # what the grammar holds only in part, checked as it is written (checking.py)


@dataclass(frozen=True)
class Media:
    """An image or an audio clip in a prompt, before the token `tokens[at]` of its request."""

    at: int
    kind: str  # "image" | "audio"
    data: bytes  # image: width × height RGB pixels, row by row; audio: a WAV, MP3 or FLAC file
    id: str  # a hash of the content: the same image again is a prompt-cache hit
    width: int = 0
    height: int = 0
    param: str = "messages"  # the request field it came from, for errors


@dataclass(frozen=True)
class Generate:
    """One request to the engine: a prompt, and how to continue it n times."""

    tokens: list[int]
    params: SamplingParams
    stop_tokens: frozenset[int] = frozenset()
    constraint: Constraint | None = None
    n: int = 1  # completions of the same prompt; completion i samples with seed + i
    logprobs: int | None = None  # None: no log-probabilities; k: the chosen token's and the k most likely
    # LoRA adapters for this request, (index in the model's `loras`, scale), sorted, no zero scales:
    # requests with the same set share a decode; a slot's cached prompt serves only its own set.
    adapters: tuple[tuple[int, float], ...] = ()
    media: tuple[Media, ...] = ()  # images and audio (the model needs a projector, `mmproj`)
    cache_prompt: bool = True  # False: the prompt is decoded whole, in an empty or the least used slot, and not kept
    prompt_logprobs: int | None = None  # k: each prompt token's log-probability and the k most likely (no cache read)
    # where the turn being answered (the last message) begins in `tokens`: a shifted reuse's stretches start before
    # it and end at the message's first difference, so the request is read from there (None: the whole prompt may move)
    fresh_from: int | None = None
    # the tokens the answer is expected to be (OpenAI's Predicted Outputs): the first source of drafts (drafts.py)
    prediction: tuple[int, ...] | None = None
    # the client's name for the conversation (OpenAI's prompt_cache_key): where no slot's cache serves the prompt
    # more than another's, it goes to the slot this key last used, not to another conversation's
    cache_key: str | None = None
    speed: SpeedParams = SpeedParams()  # how it is read and drafted


@dataclass(frozen=True)
class Draft:
    """A draft model for an engine (draft_model.py): its GGUF file and llama-server's --draft-* settings."""

    path: str
    gpu_layers: int = 0
    max: int = 16  # tokens drafted a step at most (--draft-max)
    min: int = 0  # a shorter draft is not used (--draft-min)
    p_min: float = 0.75  # drafting stops at a token the draft model is less sure of (--draft-p-min)


@dataclass(frozen=True)
class EngineConfig:
    """What a model's llama.cpp engine is made with, chosen once (models/host.py): built from in
    this process (engine.py's LocalEngine.from_config) or sent, as JSON, to a worker (worker.py)."""

    path: str
    n_ctx: int  # tokens per slot
    parallel: int = 4  # slots
    max_queue: int | None = 64  # requests waiting beyond the free slots (None: no limit; base.check_queue)
    n_threads: int | None = None
    n_gpu_layers: int = 0
    n_batch: int = N_BATCH
    visible: tuple[str, ...] = ()  # special tokens shown as text (a family's tool-call markers)
    pooling: int | None = None  # an embedding model's (1: mean)
    rope: tuple[str, float] | None = None  # ("linear" | "yarn", scale)
    loras: tuple[str, ...] = ()
    mmproj: str | None = None
    prompt_cache: str | None = None  # the prompt store's folder (prompt_store.py), with its size limit
    prompt_cache_bytes: int = 0
    rpc: tuple[str, ...] = ()  # llama.cpp RPC endpoints (rpc.py): a worker process always
    tensor_split: tuple[float, ...] | None = None
    draft: Draft | None = None
    step_costs: str | None = None  # the file of measured step costs (draft_cost.py)
    cache_types: tuple[str, str] = ("f16", "f16")  # the K cache's type, the V cache's

    def to_json(self) -> str:
        return json.dumps(asdict(self))

    @classmethod
    def from_json(cls, text: str) -> "EngineConfig":
        data = json.loads(text)
        for name in ("visible", "loras", "rpc", "cache_types", "rope", "tensor_split"):
            if data.get(name) is not None:
                data[name] = tuple(data[name])
        if data.get("draft") is not None:
            data["draft"] = Draft(**data["draft"])
        return cls(**data)


@dataclass(frozen=True)
class TopLogprob:
    token: str
    logprob: float
    bytes: list[int]
    id: int = -1  # the token's id in the vocabulary


@dataclass(frozen=True)
class TokenLogprob:
    """The log-probability of a generated token under the model's raw distribution (before
    penalties, temperature, truncation and grammar), and the most likely alternatives."""

    token: str
    logprob: float
    bytes: list[int]
    top: list[TopLogprob]
    id: int = -1  # the token's id in the vocabulary
    rank: int = 0  # 1: the most likely token; 0: not computed


@dataclass(frozen=True)
class Text:
    """Decoded text, never splitting a UTF-8 character or a possible stop string; with the
    log-probabilities of the tokens generated since the previous event, when asked for."""

    text: str
    index: int = 0
    logprobs: tuple[TokenLogprob, ...] = ()
    generated: int = 0  # tokens generated in this choice so far (a cancelled request's usage counts them)


@dataclass(frozen=True)
class Done:
    finish_reason: str  # "stop" | "length" | "cancelled"
    prompt_tokens: int
    completion_tokens: int
    cached_tokens: int
    index: int = 0
    matched_stop: str | None = None  # the stop string that ended the text, if one did
    why: str | None = None  # "repetition": a "length" end before the budget, the output having looped
    drafted: int = 0  # tokens drafted (from the text, drafts.py, or by a draft model, draft_model.py) and verified
    kept: int = 0  # of those, the ones the model wrote
    resampled: int = 0  # tokens written, then taken back because a value broke the schema (checking.py)
    unchecked: tuple[str, ...] = ()  # what the checking gave up holding ("[tool]#/path:keyword")
    # with a prediction: its tokens the answer wrote, in order (a diff), and the rest (None: no prediction)
    prediction: tuple[int, int] | None = None


@dataclass(frozen=True)
class PromptLogprobs:
    """The prompt's tokens after the first, each with its log-probability given the ones before
    (and its rank), when the request asked for them: sent once, before the first Text."""

    tokens: tuple[TokenLogprob, ...]


@dataclass(frozen=True)
class Converse:
    """One request to an engine that renders and parses itself (an upstream in chat mode): the
    conversation, the output's rules and the sampling fields set, as OpenAI chat's request fields
    (plain JSON: `messages`, `tools`, `tool_choice`, `response_format`, `max_tokens`, …); the
    engine adds the model's name and streams. `n` choices."""

    body: dict[str, Any]
    n: int = 1


@dataclass(frozen=True)
class Thought:
    """Reasoning text, already split out by an engine that parses its own output (chat mode)."""

    text: str
    index: int = 0


@dataclass(frozen=True)
class CallDelta:
    """A piece of a tool call as an engine that parses its own output streams it (chat mode):
    call `call` of choice `index`; its id and name when first seen, fragments of its arguments."""

    call: int
    id: str | None = None
    name: str | None = None
    arguments: str = ""
    index: int = 0


Event = Text | Done | PromptLogprobs | Thought | CallDelta


@dataclass(frozen=True)
class Prepared:
    """Not an event of the request's output: a request with media has its prompt expanded (media
    tokenized by the projector) and checked; its length in tokens, the media's included."""

    prompt_tokens: int


@dataclass(frozen=True)
class Started:
    """Not an event of the request's output: the engine took the request from its queue (a
    request that has started cannot be re-run elsewhere; one still queued can)."""

    cached: int = 0  # prompt tokens the slot already held (the access log's figure for a request cancelled before its end)
    # why the cache served MISS_MIN or more tokens less than a cached sequence held (prefix_cache.py's `_missed`):
    # (kind, a token count n, the sequence's length): "busy" / "unused": a slot busy with another request, or an
    # idle slot or a saved prompt not used, holds n tokens of the prompt; "evicted" / "dropped" / "stale": one that
    # did is gone (a slot given to another prompt, the store's eviction, another version of the model file's);
    # "differs": the closest cached sequence and the prompt part at token n (then: its next tokens from there)
    miss: tuple[str, int, int, tuple[int, ...]] | None = None


@dataclass(frozen=True)
class WorkerState:
    """The process a model runs in (engine/worker/worker.py): its pid, state and crashes so far."""

    pid: int
    state: str  # "starting", "ready", "restarting", "rpc_down", "failed", "stopped"
    crashes: int


@dataclass(frozen=True)
class RpcEndpoint:
    """One RPC worker a model's layers run on, as last seen."""

    endpoint: str
    state: str  # "up" or "down"
    error: str | None = None  # why it is down


@dataclass(frozen=True)
class UpstreamState:
    """The server a model stands for (engine/remote/upstream.py, upstream_chat.py), as last probed."""

    url: str
    model: str | None
    state: str
    error: str | None
    requests: int  # this server's requests to it now
    mode: str | None = None  # "chat": the upstream renders and parses (else token mode)


@dataclass(frozen=True)
class EngineStats:
    """What an engine says of itself now (Engine.stats): its slots, busy and queued, the context
    per slot and the weights' bytes; and, by kind, the worker process it runs in, the upstream
    it stands for, the RPC workers its layers run on. `card()` is /health's account of it;
    `as_dict()` the JSON a peer sends (peer.py's stats route)."""

    slots: int
    busy: int
    queued: int
    n_ctx: int
    bytes: int
    worker: WorkerState | None = None
    upstream: UpstreamState | None = None
    rpc: tuple[RpcEndpoint, ...] = ()
    rpc_layers: str | None = None  # "N/M" layers on devices, at the last load

    def card(self) -> dict[str, Any]:
        """/health's fields for a loaded model's engine (the model's own are health.py's)."""
        return {"context_length": self.n_ctx, "slots": self.slots, "busy_slots": self.busy, "queued": self.queued,
                **self._where()}

    def as_dict(self) -> dict[str, Any]:
        return {"slots": self.slots, "busy": self.busy, "queued": self.queued, "n_ctx": self.n_ctx, "bytes": self.bytes,
                **self._where()}

    def _where(self) -> dict[str, Any]:
        """Its worker; the upstream it stands for, and how that fares; its RPC workers, each endpoint up or
        down, and the layers on them ("N/M", at the last load)."""
        return {"worker": asdict(self.worker) if self.worker else None,
                **({"upstream": self._upstream()} if self.upstream else {}),
                **({"rpc": [_rpc(e) for e in self.rpc], "rpc_layers": self.rpc_layers} if self.rpc else {})}

    def _upstream(self) -> dict[str, Any]:
        u = self.upstream
        assert u is not None
        return {"url": u.url, "model": u.model, **({"mode": u.mode} if u.mode else {}), "state": u.state,
                "error": u.error, "requests": u.requests}


def _rpc(e: RpcEndpoint) -> dict[str, Any]:
    return {"endpoint": e.endpoint, "state": e.state, **({"error": e.error} if e.error else {})}


@dataclass(frozen=True)
class SlotInfo:
    """One slot of a model, as llama-server's GET /slots shows it."""

    id: int
    processing: bool  # a request runs in it
    n_cells: int  # tokens whose K/V cells it holds: its prompt cache
    task: int = -1  # the number of the last request it took (the engine's own count); -1: none yet


@dataclass(frozen=True)
class SlotDone:
    """What a slot action did (llama-server's /slots/{id}?action=…): tokens saved, restored or
    erased, the file's bytes written or read, and how long it took."""

    tokens: int
    n_bytes: int = 0
    ms: float = 0.0
