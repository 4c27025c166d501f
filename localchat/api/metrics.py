"""`GET /metrics`: Prometheus metrics (off unless `metrics = true` in models.toml or `localchat
serve --metrics`, as llama-server's `--metrics`), written by `prometheus_client`.

Per model: prompt tokens read and taken from the cache (also per client, by its User-Agent: claude,
codex, opencode, …), tokens generated, drafted tokens and the
ones kept, requests by protocol and status, time to first token and time per generated token
(histograms) — each observed from a request's access-log record when it ends (access.py); and at
each scrape, what the model is doing now (generation/models.py `load_now`): requests running and
queued, slots busy, K/V cells used of all, the worker's restarts. A request that named no model
(a 404, a body that did not parse) is counted under model "" ."""

from __future__ import annotations

import time

from prometheus_client import CONTENT_TYPE_LATEST, CollectorRegistry, Counter, Gauge, Histogram, generate_latest
from starlette.requests import Request
from starlette.responses import Response
from starlette.routing import Route
from starlette.types import Scope

from ..generation import Chat
from ..logs import RequestRecord

PROTOCOLS = ("openai", "anthropic", "responses", "ollama", "llamacpp")
# A User-Agent's product (its first word, before "/"), lowercased, as the client it names; others keep their
# product's name, up to MAX_CLIENTS different ones ("other" after that, and for a User-Agent without one).
CLIENT_NAMES = {"claude-cli": "claude", "claude-code": "claude", "codex_exec": "codex", "codex_cli_rs": "codex",
                "codex-tui": "codex", "codex_vscode": "codex", "qwencode": "qwen", "qwen-code": "qwen",
                "continue": "cn", "cn": "cn", "aider": "aider", "litellm": "aider", "cline": "cline",
                "pi-coding-agent": "pi", "opencode": "opencode", "ollama": "ollama", "openai": "openai-sdk",
                "anthropic": "anthropic-sdk", "python-httpx": "httpx", "curl": "curl"}
MAX_CLIENTS = 32
TTFT_BUCKETS = (0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10, 30, 60, 120, 300, 600)
TPOT_BUCKETS = (0.005, 0.01, 0.02, 0.05, 0.1, 0.2, 0.5, 1, 2, 5)


def client_of(scope: Scope) -> str:
    """The client a request came from, by its User-Agent's first product."""
    agent = next((v for k, v in scope.get("headers") or () if k == b"user-agent"), b"").decode("latin-1")
    product = agent.split("/", 1)[0].split(" ", 1)[0].strip().lower() if agent.strip() else ""
    if not product or not all(c.isalnum() or c in "-_." for c in product) or len(product) > 40:
        return "other"
    return CLIENT_NAMES.get(product, product)


def protocol(scope: Scope) -> str:
    """The protocol whose route answered (the package of its endpoint: api/openai, api/ollama…);
    "other" for the health route, the page, this one and requests no route took."""
    module = getattr(scope.get("endpoint"), "__module__", "") or ""
    parts = module.split(".")
    return parts[2] if len(parts) > 2 and parts[:2] == ["localchat", "api"] and parts[2] in PROTOCOLS else "other"


class Metrics:
    """The server's metrics, in a registry of their own (several apps in one process each count
    their own requests)."""

    def __init__(self) -> None:
        self.registry = r = CollectorRegistry()
        self.requests = Counter("localchat_requests", "Requests answered, by model, protocol and HTTP status "
                                "(499: the client left first).", ["model", "protocol", "status"], registry=r)
        self.prompt = Counter("localchat_prompt_tokens", "Prompt tokens read (decoded).", ["model"], registry=r)
        self.cached = Counter("localchat_prompt_tokens_cached", "Prompt tokens taken from the prompt cache "
                              "instead of read.", ["model"], registry=r)
        self.client_prompt = Counter("localchat_client_prompt_tokens", "Prompt tokens read (decoded), by client "
                                     "(its User-Agent).", ["model", "client"], registry=r)
        self.client_cached = Counter("localchat_client_prompt_tokens_cached", "Prompt tokens taken from the prompt "
                                     "cache instead of read, by client (its User-Agent).", ["model", "client"],
                                     registry=r)
        self._clients: set[str] = set()
        self.generated = Counter("localchat_generated_tokens", "Tokens generated.", ["model"], registry=r)
        self.drafted = Counter("localchat_draft_tokens", "Tokens drafted (from the text or by a draft model) and "
                               "verified.", ["model"], registry=r)
        self.kept = Counter("localchat_draft_tokens_accepted", "Drafted tokens the model kept.", ["model"],
                            registry=r)
        self.ttft = Histogram("localchat_time_to_first_token_seconds", "From the request's arrival to its first "
                              "generated text.", ["model"], buckets=TTFT_BUCKETS, registry=r)
        self.tpot = Histogram("localchat_time_per_output_token_seconds", "Mean time per generated token after "
                              "the first, one observation per request.", ["model"], buckets=TPOT_BUCKETS, registry=r)
        self.running = Gauge("localchat_requests_running", "Requests holding the model now (decoding, or "
                             "waiting in its engine).", ["model"], registry=r)
        self.queued = Gauge("localchat_requests_queued", "Requests waiting for a slot in the model's engine.",
                            ["model"], registry=r)
        self.slots = Gauge("localchat_slots", "The model's slots (requests decoded together).", ["model"],
                           registry=r)
        self.busy = Gauge("localchat_slots_busy", "Slots decoding a request now.", ["model"], registry=r)
        self.cells = Gauge("localchat_kv_cells", "K/V cache cells, every slot's.", ["model"], registry=r)
        self.cells_used = Gauge("localchat_kv_cells_used", "K/V cache cells holding tokens (a slot's cached "
                                "prompt stays until another request needs the room).", ["model"], registry=r)
        self.restarts = Gauge("localchat_worker_restarts", "Times the model's worker process died and was "
                              "started again since the model loaded.", ["model"], registry=r)

    def observe(self, record: RequestRecord, scope: Scope) -> None:
        """One request has ended (the access log's record)."""
        model = record.model or ""
        self.requests.labels(model, protocol(scope), str(record.status)).inc()
        if record.prompt_tokens is None:
            return
        cached = record.cached_tokens or 0
        self.prompt.labels(model).inc(max(record.prompt_tokens - cached, 0))
        self.cached.labels(model).inc(cached)
        client = client_of(scope)
        if client not in self._clients and len(self._clients) >= MAX_CLIENTS:
            client = "other"
        self._clients.add(client)
        self.client_prompt.labels(model, client).inc(max(record.prompt_tokens - cached, 0))
        self.client_cached.labels(model, client).inc(cached)
        self.generated.labels(model).inc(record.generated)
        if record.drafted:
            self.drafted.labels(model).inc(record.drafted)
            self.kept.labels(model).inc(record.kept)
        if record.first_token is not None:
            self.ttft.labels(model).observe(record.first_token - record.started)
            if record.generated > 1:
                self.tpot.labels(model).observe((time.monotonic() - record.first_token) / (record.generated - 1))

    async def scrape(self, chat: Chat) -> bytes:
        loads = await chat.models.load_now()
        gauges = (self.running, self.queued, self.slots, self.busy, self.cells, self.cells_used, self.restarts)
        for gauge in gauges:
            gauge.clear()  # an unloaded model's lines go
        for load in loads:
            for gauge, value in zip(gauges, (load.requests, load.queued, load.slots, load.busy, load.cells,
                                             load.cells_used, load.restarts)):
                if value is not None:
                    gauge.labels(load.name).set(value)
        return generate_latest(self.registry)


def routes(chat: Chat, metrics: Metrics) -> list[Route]:
    async def scrape(request: Request) -> Response:
        return Response(await metrics.scrape(chat), media_type=CONTENT_TYPE_LATEST)

    return [Route("/metrics", scrape, methods=["GET"])]
