"""A model that runs in an OpenAI-compatible engine that renders and parses itself (vLLM, SGLang,
llama-server, another vendor's API): an `upstream` entry of models.toml in *chat mode*.

There is no tokenizer or template here: the generation layer hands this engine a `Converse` (the
conversation and the output's rules as OpenAI chat fields, generation/upstream_chat.py), which
goes out as `POST …/v1/chat/completions` with `stream: true`; the upstream's SSE comes back as
plain events — `Text` (content), `Thought` (reasoning), `CallDelta` (tool calls as streamed),
and each choice's `Done` with the usage. The link's failures are mapped once, by token mode's
`mapped` (refused → 503, a timeout → 504, anything else → 502); the upstream's own refusals in
`refused` (its 4xx: the request's fault, said as the upstream said it; its 5xx → 502)."""

from __future__ import annotations

import json
from typing import Any

import httpx

from ...errors import InvalidRequest, LocalchatError, QueueFull, UpstreamError
from ..base import Emit, Stream
from ..params import CallDelta, Converse, Done, EngineStats, Generate, Prepared, Text, Thought, UpstreamState
from .upstream import DESCRIBE_TIMEOUT, Link, Peer, mapped

# The requests this server sends an upstream at once are not limited here (the upstream queues
# them); `n` choices per request go up to this many.
PARALLEL = 16
DEFAULT_CAPABILITIES = ("completion", "tools")
CAPABILITIES = ("completion", "tools", "reasoning", "fim", "embedding", "rerank", "vision", "audio")
FINISH = {"length": "length"}  # OpenAI's finish_reason → Done's; stop, tool_calls, … → "stop"


def base_url(peer: Peer) -> str:
    """The entry's URL with /v1 (given with or without it)."""
    url = peer.url.rstrip("/")
    return url if url.endswith("/v1") else url + "/v1"


def refused(peer: Peer, status: int, body: bytes) -> LocalchatError:
    """An answer other than 200, in the upstream's words: a 4xx is the request's (400, or 429 for
    a busy upstream); a 401/403 names the key; 404 the model or URL; a 5xx is a 502."""
    try:
        data = json.loads(body)
    except ValueError:
        data = None
    error = data.get("error") if isinstance(data, dict) else None
    if isinstance(error, dict):
        text = str(error.get("message") or error)
    elif isinstance(error, str):
        text = error
    elif isinstance(data, dict) and "detail" in data:  # FastAPI's shape
        text = str(data["detail"])
    else:
        text = body[:300].decode("utf-8", "replace").strip() or f"HTTP {status}"
    where = f"the upstream {peer.url} (model {peer.model})"
    if status in (401, 403):
        return UpstreamError(f"{where} refused this server ({status}: {text}); check the entry's api_key",
                             param="model")
    if status == 404:
        return UpstreamError(f"{where} answered 404 ({text}): check the entry's upstream URL and upstream_model",
                             param="model")
    if status == 429:
        return QueueFull(f"{where} is busy (429: {text})")
    if 400 <= status < 500:
        return InvalidRequest(f"{where} refused the request ({status}): {text}")
    return UpstreamError(f"{where} answered {status}: {text}", param="model")


def listed(peer: Peer, data: Any) -> dict[str, Any]:
    """The model's entry in the upstream's GET /v1/models; UpstreamError if it is not there."""
    models = data.get("data") if isinstance(data, dict) else None
    if not isinstance(models, list):
        raise UpstreamError(f"the upstream {peer.url} answered GET /v1/models with no `data` list: is it "
                            "OpenAI-compatible?", param="model")
    for entry in models:
        if isinstance(entry, dict) and entry.get("id") == peer.model:
            return entry
    names = ", ".join(str(m.get("id")) for m in models[:20] if isinstance(m, dict))
    raise UpstreamError(f"the upstream {peer.url} does not serve {peer.model!r} (it lists: {names or 'nothing'}); "
                        "check the entry's upstream_model", param="model")


def facts(entry: dict[str, Any]) -> dict[str, Any]:
    """What the upstream's model list says of the model: capabilities where it lists them (else
    completion and tools), its context where it says (vLLM's max_model_len, llama-server's n_ctx)."""
    caps = entry.get("capabilities")
    known = tuple(c for c in CAPABILITIES if isinstance(caps, list) and c in caps)
    meta = entry.get("meta") if isinstance(entry.get("meta"), dict) else {}
    n_ctx = entry.get("max_model_len") or entry.get("context_length") or meta.get("n_ctx_train") or 0
    return {"capabilities": list(known or DEFAULT_CAPABILITIES), "n_ctx": int(n_ctx) if isinstance(n_ctx, int) else 0,
            "owned_by": entry.get("owned_by")}


def models_list(peer: Peer, client: httpx.Client | None = None) -> dict[str, Any]:
    """GET /v1/models (the health probe and the description): the model's facts. Blocking."""
    try:
        r = (client or httpx).get(base_url(peer) + "/models", headers=peer.headers(),
                                  timeout=peer.timeouts(min(peer.timeout, DESCRIBE_TIMEOUT)))
        if r.status_code != 200:
            raise refused(peer, r.status_code, r.content)
        return facts(listed(peer, r.json()))
    except Exception as exc:
        raise mapped(peer, exc) from None


def describe(peer: Peer) -> dict[str, Any]:
    """What the model can do, as the upstream's model list says, without generating. Blocking."""
    return {"family": "upstream", **models_list(peer)}


def token_mode_only(name: str) -> InvalidRequest:
    """The refusal of what needs tokens (raw prompts, infill, embeddings, counting tokens, a
    rendered prompt) for a model in chat mode: it has no template or vocabulary here."""
    return InvalidRequest(f"the model {name} runs upstream in chat mode (the upstream renders and "
                          "tokenizes): raw prompts, infill, embeddings and token counts need token mode",
                          param="model")


class NoTokenizer:
    """A model in chat mode has no vocabulary here: what needs tokens is refused with a 400 that
    says so (token_mode_only)."""

    n_vocab = 0
    bos = None
    fim: dict[str, int] = {}

    def __init__(self, name: str) -> None:
        self.name = name

    def tokenize(self, segments: Any) -> list[int]:
        raise token_mode_only(self.name)

    def tokenize_at(self, segments: Any, at: int) -> tuple[list[int], int]:
        raise token_mode_only(self.name)

    def tokenize_bytes(self, data: bytes, parse_special: bool) -> list[int]:
        raise token_mode_only(self.name)

    def token_id(self, text: str) -> int | None:
        return None

    def piece(self, token: int) -> bytes:
        raise token_mode_only(self.name)


class ChatEngine(Link):
    """The Engine interface over an OpenAI-compatible upstream (chat mode). Building it asks the
    upstream's model list for the model (blocking), which is also the health probe."""

    confirms = True  # each stream starts with Prepared once the upstream answered 200, or with its refusal

    def __init__(self, peer: Peer, name: str = "") -> None:
        super().__init__(peer, name, httpx.Client())
        try:
            self.facts = self._models()
        except BaseException:
            self._http.close()
            raise
        self.capabilities: tuple[str, ...] = tuple(self.facts["capabilities"])
        self.n_ctx: int = self.facts["n_ctx"]
        self.parallel = PARALLEL
        self.n_adapters = 0
        self.tokenizer = NoTokenizer(self.name)

    # -- the Engine interface --------------------------------------------------------------

    def check_fits(self, tokens: list[int]) -> None:
        pass  # the upstream checks its context (an over-long prompt: its 400)

    def submit(self, request: Generate) -> Stream:
        raise token_mode_only(self.name)  # (tokens are for token mode: a chat-mode request is `converse`d)

    # -- the ChatEngine contract: a chat request in, the upstream's answer as events -------------

    def submit_chat(self, request: Converse) -> Stream:
        return Stream(self._start, self._cancel, request)

    async def embed(self, inputs: list[list[int]]) -> list[list[float]]:
        raise token_mode_only(self.name)

    async def rerank(self, prompts: list[list[int]], judge: tuple[int, int] | None = None) -> list[float]:
        raise token_mode_only(self.name)

    def stats(self) -> EngineStats:
        mine = sum(n for _, n in self._jobs.values())
        return EngineStats(self.parallel, mine, 0, self.n_ctx, 0, upstream=UpstreamState(
            self.peer.url, self.peer.model, self.state, self.error, mine, mode="chat"))

    def probe(self) -> None:
        """The health probe: GET /v1/models; a failure is the state. Blocking, short timeouts."""
        try:
            self._models()
        except LocalchatError:
            pass

    # -- the link ----------------------------------------------------------------------------

    def _models(self) -> dict[str, Any]:
        try:
            found = models_list(self.peer, self._http)
        except LocalchatError as exc:
            raise self._failed(exc) from None
        self._ok()
        return found

    def body(self, request: Converse) -> dict[str, Any]:
        """What goes to the upstream: the request's fields, the model's name there, streamed with usage."""
        body = {**request.body, "model": self.peer.model, "stream": True, "stream_options": {"include_usage": True}}
        if request.n != 1:
            body["n"] = request.n
        return body

    async def _run(self, job: int, request: Converse, emit: Emit) -> None:
        assert self._async is not None
        reader = _Reader(self.peer, request.n, emit)
        try:
            async with self._async.stream("POST", base_url(self.peer) + "/chat/completions",
                                          json=self.body(request)) as r:
                if r.status_code != 200:
                    raise refused(self.peer, r.status_code, await r.aread())
                emit(Prepared(0))  # (the prompt's tokens are known at the end, with the usage)
                async for line in r.aiter_lines():
                    if line.startswith("data:") and reader.read(line[5:].strip()):
                        break
                reader.end()
            self._ok()
        except Exception as exc:  # noqa: BLE001 - mapped, and that request's error
            emit(self._failed(exc))
        finally:
            self._jobs.pop(job, None)
            emit(None)  # cancelled too: leaving `async with` closed the request


class _Reader:
    """OpenAI chat chunks → events; each choice's Done once the usage is known (the last chunk,
    with stream_options.include_usage) or the stream ends."""

    def __init__(self, peer: Peer, n: int, emit: Emit) -> None:
        self.peer, self.n, self.emit = peer, n, emit
        self.finished: dict[int, tuple[str, str | None]] = {}  # choice → (finish_reason, stop_reason)
        self.usage: dict[str, Any] | None = None
        self.done = False

    def read(self, data: str) -> bool:
        """One SSE data line; True at the end ([DONE])."""
        if data == "[DONE]":
            return True
        chunk = json.loads(data)
        if not isinstance(chunk, dict):
            raise ValueError(f"a chunk that is not an object: {data[:100]}")
        if "error" in chunk:
            error = chunk["error"]
            message = error.get("message") if isinstance(error, dict) else error
            raise UpstreamError(f"the upstream {self.peer.url} (model {self.peer.model}) failed mid-answer: {message}",
                                param="model")
        for choice in chunk.get("choices") or ():
            self._choice(choice)
        if isinstance(chunk.get("usage"), dict):
            self.usage = chunk["usage"]
        return False

    def _choice(self, choice: dict[str, Any]) -> None:
        index = int(choice.get("index") or 0)
        if not 0 <= index < self.n:
            raise ValueError(f"a choice {index} of {self.n}")
        delta = choice.get("delta") or {}
        thought = delta.get("reasoning_content") or delta.get("reasoning")
        if isinstance(thought, str) and thought:
            self.emit(Thought(thought, index))
        if isinstance(delta.get("content"), str) and delta["content"]:
            self.emit(Text(delta["content"], index))
        for call in delta.get("tool_calls") or ():
            function = call.get("function") or {}
            arguments = function.get("arguments")
            self.emit(CallDelta(int(call.get("index") or 0), call.get("id"), function.get("name"),
                                arguments if isinstance(arguments, str) else
                                json.dumps(arguments) if arguments is not None else "", index))
        if choice.get("finish_reason"):
            stop = choice.get("stop_reason")
            self.finished[index] = (str(choice["finish_reason"]), stop if isinstance(stop, str) else None)

    def end(self) -> None:
        """The stream ended: every choice's Done, with the usage (the prompt's and the cached
        tokens are the request's, the completion's all counted on choice 0: OpenAI sums them)."""
        missing = [i for i in range(self.n) if i not in self.finished]
        if missing:
            raise UpstreamError(f"the upstream {self.peer.url} (model {self.peer.model}) ended its answer before "
                                f"choice {missing[0]} finished", param="model")
        usage = self.usage or {}
        prompt, completion = int(usage.get("prompt_tokens") or 0), int(usage.get("completion_tokens") or 0)
        details = usage.get("prompt_tokens_details") or {}
        cached = int(details.get("cached_tokens") or 0) if isinstance(details, dict) else 0
        for i in range(self.n):
            reason, stop = self.finished[i]
            self.emit(Done(FINISH.get(reason, "stop"), prompt, completion if i == 0 else 0, cached, i, matched_stop=stop))
