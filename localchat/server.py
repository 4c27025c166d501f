"""Starting the HTTP server: check the port, run uvicorn; the app's lifespan loads the default
model before the first request and closes every model after the last."""

from __future__ import annotations

import asyncio
import ipaddress
import logging
import socket
import sys
from collections.abc import AsyncIterator, Callable
from contextlib import asynccontextmanager

import uvicorn

from . import logs, peer
from .api import create_app
from .api.guard import Origins
from .errors import UpstreamError
from .generation import Chat, ModelHost
from .models import Registry
from .models.host import LoadedModel


class PortInUse(RuntimeError):
    pass


class ServeRefused(RuntimeError):
    """An unsafe or malformed serve configuration, refused before anything is loaded or bound."""


def is_loopback(host: str) -> bool:
    if host == "localhost":
        return True
    try:
        return ipaddress.ip_address(host).is_loopback
    except ValueError:
        return False


def check_port(host: str, port: int) -> None:
    family = socket.AF_INET6 if ":" in host else socket.AF_INET
    with socket.socket(family, socket.SOCK_STREAM) as s:
        s.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        try:
            s.bind((host, port))
        except OSError as exc:
            raise PortInUse(f"port {port} on {host} is in use ({exc.strerror}); "
                            f"try another one: localchat serve --port {port + 1}") from None


def check_safety(host: str, api_key: str | None, insecure_no_key: bool, cors_origins: list[str] | None) -> Origins:
    """Refuse a server reachable from the network without a key; warn about what the user chose to open."""
    try:
        origins = Origins.parse(cors_origins)
    except ValueError as exc:
        raise ServeRefused(str(exc)) from None
    if not is_loopback(host) and not api_key:
        if not insecure_no_key:
            raise ServeRefused(
                f"--host {host} is not a loopback address: anyone on your network could use this server. "
                "Set an API key (--api-key KEY or LOCALCHAT_API_KEY=KEY), or pass --insecure-no-key "
                "to serve without one anyway.")
        print(f"localchat: WARNING: serving on {host} without an API key (--insecure-no-key): anyone who can "
              "reach this machine can use this server.", file=sys.stderr, flush=True)
    if origins.any:
        print("localchat: WARNING: --cors-origins '*': any web page you open may call this server (without "
              "cookies or credentials)" + ("." if api_key else ", and no API key is set."), file=sys.stderr, flush=True)
    return origins


def page_url(host: str, port: int) -> str:
    """The chat page's address: a wildcard bind (0.0.0.0, ::) is opened through loopback."""
    if host in ("0.0.0.0", "::", ""):
        host = "127.0.0.1"
    return f"http://{f'[{host}]' if ':' in host else host}:{port}/"


class Lifespan:
    """Start-up and shutdown, as the app's Starlette lifespan: the default model is loaded (its
    worker started, its prompt store opened) before the server takes a request, and every model
    is closed after the last. A default model served by an upstream that is down does not stop
    the start: the others are served, it answers 503 until its upstream does. Any other failure
    to start is kept in `failed` (serve() raises it; the CLI says it in one line), not logged by
    uvicorn as a traceback (`quiet`, a filter on its log)."""

    def __init__(self, chat: Chat, *, report: Callable[[str], None] = lambda line: None,
                 ready: Callable[[LoadedModel | None], None] = lambda loaded: None) -> None:
        self.chat, self.report, self.ready = chat, report, ready
        self.failed: Exception | None = None

    @asynccontextmanager
    async def __call__(self, app: object) -> AsyncIterator[None]:
        registry = self.chat.host.registry
        self.report(f"loading {registry.default} …")
        try:
            loaded = await asyncio.to_thread(self.chat.host.preload, registry.default)
        except UpstreamError as exc:
            if registry.resolve(registry.default).upstream is None:
                self.failed = exc
                raise
            # a peer that is off (the GPU box asleep) must not keep the other models from being served
            self.report(f"{exc.message}\nlocalchat: serving the other models; {registry.default} answers 503 "
                        "until its upstream does, and then loads")
            loaded = None
        except Exception as exc:
            self.failed = exc
            raise
        self.ready(loaded)
        try:
            yield
        finally:
            await self.chat.host.aclose()

    def quiet(self, record: logging.LogRecord) -> bool:
        """uvicorn's log, without the traceback of a start-up that failed here (serve() says it)."""
        return self.failed is None or record.levelno < logging.ERROR


def serve(registry: Registry, *, host: str, port: int, model: str | None, api_key: str | None,
          insecure_no_key: bool = False, cors_origins: list[str] | None = None, webui: bool = True) -> None:
    origins = check_safety(host, api_key, insecure_no_key, cors_origins)
    logs.configure()
    s = registry.settings
    if model:
        registry.default = registry.resolve(model).name
    check_port(host, port)

    def say(line: str) -> None:
        print(f"localchat: {line}", file=sys.stderr, flush=True)

    def ready(loaded: LoadedModel | None) -> None:
        shown = f"[{host}]" if ":" in host else host
        url = f"http://{shown}:{port}/v1"
        what = (f"{loaded.spec.name} ({loaded.family.name} family, {loaded.engine.parallel} slots of "
                f"{loaded.engine.n_ctx} tokens; " if loaded is not None
                else f"(default {registry.default}, not loaded yet; ")
        say(f"serving {what}up to {s.max_loaded_models} models loaded, {s.queue_limit} queued) at {url}")
        print(f"  try: curl {url}/chat/completions -H 'Content-Type: application/json' "
              f"-d '{{\"messages\":[{{\"role\":\"user\",\"content\":\"Hello!\"}}]}}'", file=sys.stderr, flush=True)
        if webui:
            page = page_url(host, port)
            opener = "localchat open" if page == "http://127.0.0.1:8000/" else f"localchat open --url {page}"
            print(f"  chat in your browser: {page}  (or: {opener})", file=sys.stderr, flush=True)

    chat = Chat(ModelHost(registry, report=say))
    life = Lifespan(chat, report=say, ready=ready)
    app = create_app(chat, api_key=api_key, loopback_only=is_loopback(host), origins=origins, webui=webui,
                     lifespan=life, more_routes=peer.routes(chat))  # the peer's: none unless serve --peer
    server = uvicorn.Server(uvicorn.Config(app, host=host, port=port, log_level="warning", access_log=False))
    logging.getLogger("uvicorn.error").addFilter(life.quiet)
    try:
        server.run()
    except SystemExit:  # uvicorn's answer to a failed start-up: the failure itself is raised below
        if life.failed is None:
            raise
    finally:
        if life.failed is None and chat.host.loaded:  # stopped before the lifespan's shutdown ran
            chat.host.close()
    if life.failed is not None:
        raise life.failed


class BackgroundServer:
    """The same app on an ephemeral loopback port, in a thread: `localchat chat` without a
    separate server, so the REPL talks to its model exactly as it would over --url."""

    def __init__(self, registry: Registry, model: str | None) -> None:
        import threading
        import time

        if model:
            registry.default = registry.resolve(model).name
        self.model = registry.default
        self.chat = Chat(ModelHost(registry))
        life = Lifespan(self.chat)  # loads the model before the server starts; closes it when it stops
        sock = socket.socket()
        sock.bind(("127.0.0.1", 0))
        self.url = f"http://127.0.0.1:{sock.getsockname()[1]}/v1"
        config = uvicorn.Config(create_app(self.chat, webui=False, lifespan=life), log_level="critical",
                                access_log=False, lifespan="on")
        self._server = uvicorn.Server(config)
        self._thread = threading.Thread(target=self._server.run, kwargs={"sockets": [sock]}, daemon=True)
        self._thread.start()
        while not self._server.started and self._thread.is_alive():  # the model loads first: no fixed wait
            time.sleep(0.01)
        if life.failed is not None:
            raise life.failed
        if not self._server.started:
            raise RuntimeError("the in-process server did not start")

    def stop(self) -> None:
        self._server.should_exit = True
        self._thread.join(30)
