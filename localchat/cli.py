"""The `localchat` command: serve, chat, ps, pull, rpc-worker; `localchat models …` is in cli_models.py,
`localchat launch` in cli_launch.py."""

from __future__ import annotations

from pathlib import Path
from typing import List, Optional

import typer
from rich.markup import escape
from rich.table import Table

from .cli_common import ConfigOpt, duration, fail, human_bytes, load_registry, out
from .cli_launch import launch
from .cli_models import models_app, pull_model
from .errors import LocalchatError
from .models import ModelSpec, Registry, inspect

app = typer.Typer(no_args_is_help=True, add_completion=False, help="A private, fast LLM server for your laptop.")
app.add_typer(models_app, name="models")
app.command("launch")(launch)

@app.command()
def serve(
    host: str = typer.Option("127.0.0.1", help="Address to bind; loopback by default."),
    port: int = typer.Option(8000, help="TCP port."),
    model: Optional[str] = typer.Option(None, "--model", "-m", help="Model to load and use by default: a name from "
                                        "the registry, or a GGUF file's path (served without a registry entry)."),
    alias: Optional[str] = typer.Option(None, "--alias", help="Another name for that model, this run only."),
    draft_model: Optional[str] = typer.Option(None, "--draft-model", "-md", help="A smaller model of the registry "
                                              "with the same vocabulary that drafts for that model (speculative "
                                              "decoding; its `draft` in models.toml), this run only."),
    ctx_size: Optional[int] = typer.Option(None, "--ctx-size", "-c", min=64,
                                           help="Tokens of context per slot for models without their own "
                                           "context_length (default: fitted to free memory)."),
    config: Optional[Path] = ConfigOpt,
    api_key: Optional[str] = typer.Option(None, envvar="LOCALCHAT_API_KEY",
                                          help="Require this key as `Authorization: Bearer KEY` or `x-api-key: KEY` "
                                          "(needed to bind a non-loopback --host)."),
    insecure_no_key: bool = typer.Option(False, "--insecure-no-key",
                                         help="Allow a non-loopback --host without an API key (anyone on the "
                                         "network can use the server)."),
    cors_origins: Optional[List[str]] = typer.Option(None, "--cors-origins", envvar="LOCALCHAT_CORS_ORIGINS",
                                                     help="Browser origins allowed besides localhost pages and VS Code "
                                                     "webviews (comma-separated or repeated); '*': any, without "
                                                     "credentials."),
    parallel: Optional[int] = typer.Option(None, "--parallel", "-np", min=1, max=64,
                                           help="Requests decoded together per model (slots; default: up to 4, "
                                           "fitted to free memory)."),
    queue_limit: Optional[int] = typer.Option(None, min=0, help="Requests that may wait for a slot (default 64)."),
    max_loaded_models: Optional[int] = typer.Option(None, min=1, help="Models kept loaded at once (default 2)."),
    keep_alive: Optional[str] = typer.Option(None, help="How long an idle model stays loaded: seconds or '10m' "
                                             "(default 10m; negative: forever)."),
    in_process: bool = typer.Option(False, "--in-process", help="Run llama.cpp inside the server process instead of "
                                    "a supervised worker process per model (a crash in it then stops the server)."),
    quiet: bool = typer.Option(False, "--quiet", "-q", help="No access log (one line per request otherwise)."),
    cache_type_k: Optional[str] = typer.Option(None, "--cache-type-k", "-ctk", help="The K cache's type for models "
                                               "without their own: f16 (default), q8_0 (half the memory) or q4_0."),
    cache_type_v: Optional[str] = typer.Option(None, "--cache-type-v", "-ctv", help="The V cache's type: f16 "
                                               "(default), q8_0 or q4_0 (quantized: with flash attention)."),
    metrics: bool = typer.Option(False, "--metrics", help="Serve Prometheus metrics at GET /metrics (tokens, "
                                 "requests, slots, K/V cells, times to first token, per model)."),
    hosted_tools: Optional[str] = typer.Option(None, "--hosted-tools", help="Tools only a hosted API can run "
                                               "(web search, code execution): 'drop' (default: left out and reported) "
                                               "or 'refuse' (a 400)."),
    no_webui: bool = typer.Option(False, "--no-webui", help="Do not serve the chat page at / (the APIs only)."),
    fetch_images: bool = typer.Option(False, "--fetch-images", help="Fetch images named by http(s) URLs in requests "
                                      "(within max_media_bytes and media_timeout; default: refused)."),
    media_folder: Optional[Path] = typer.Option(None, "--media-folder", help="Read images named by file:// URLs under "
                                                "this folder, and nowhere else (default: none are read)."),
    slot_save_path: Optional[Path] = typer.Option(None, "--slot-save-path", help="Folder where llama-server's "
                                                  "POST /slots/{id}?action=save|restore keeps slots' prompt caches "
                                                  "(default: none; the slot actions answer 501)."),
    peer: bool = typer.Option(False, "--peer", help="Serve this server's models to other localchats whose models.toml "
                              "names it as an `upstream` (routes under /internal/engine; same guard and key)."),
) -> None:
    """Serve the OpenAI chat completion routes on localhost."""
    from .server import PortInUse, ServeRefused, serve as run

    registry = load_registry(config)
    overrides = {k: v for k, v in (("parallel", parallel), ("context_length", ctx_size), ("queue_limit", queue_limit),
                                   ("max_loaded_models", max_loaded_models), ("keep_alive", keep_alive),
                                   ("worker", False if in_process else None), ("hosted_tools", hosted_tools),
                                   ("log_requests", False if quiet else None),
                                   ("metrics", True if metrics else None),
                                   ("cache_type_k", cache_type_k), ("cache_type_v", cache_type_v),
                                   ("fetch_images", True if fetch_images else None),
                                   ("media_folder", str(media_folder) if media_folder else None),
                                   ("slot_save_path", str(slot_save_path.expanduser().resolve()) if slot_save_path
                                    else None),
                                   ("peer", True if peer else None)) if v is not None}
    try:
        registry.settings = registry.settings.model_validate({**registry.settings.model_dump(), **overrides})
        model = _served_model(registry, model, alias)
        if draft_model:
            registry.set_draft(model, draft_model)
    except (ValueError, LocalchatError) as exc:
        raise fail(str(exc)) from None
    try:
        run(registry, host=host, port=port, model=model, api_key=api_key, insecure_no_key=insecure_no_key,
            cors_origins=cors_origins, webui=not no_webui)
    except (PortInUse, ServeRefused, LocalchatError) as exc:
        raise fail(str(exc)) from None


def _served_model(registry: Registry, model: Optional[str], alias: Optional[str]) -> Optional[str]:
    """`-m PATH` (a GGUF file, as llama-server takes it) joins the registry for this run, named by
    --alias or its file name; --alias alone names the served model once more."""
    from .models.user import absolute, name_from

    if model and (model.endswith(".gguf") or "/" in model or "\\" in model):
        path = absolute(Path(model))
        if not path.is_file():
            raise ValueError(f"no GGUF file at {path}")
        inspect(path)  # not a GGUF: a clear error now
        return registry.add(ModelSpec(name=alias or name_from(path), path=path)).name
    if alias:
        registry.add_alias(model or registry.default, alias)
    return model


@app.command()
def chat(
    model: Optional[str] = typer.Option(None, "--model", help="Model to chat with (default: the registry's default)."),
    url: Optional[str] = typer.Option(None, "--url", help="Chat with a running OpenAI-compatible server instead."),
    system: Optional[str] = typer.Option(None, "--system", help="A system prompt."),
    config: Optional[Path] = ConfigOpt,
    api_key: Optional[str] = typer.Option(None, envvar="LOCALCHAT_API_KEY", help="API key for --url servers."),
    mcp: Optional[List[str]] = typer.Option(None, "--mcp", help="An MCP server whose tools the model may call (each "
                                            "call approved): a URL (Streamable HTTP) or a command in quotes "
                                            "(stdio). Repeatable; /mcp add does the same in the chat."),
) -> None:
    """Chat in the terminal. Runs the model in-process unless --url points at a server."""
    from .repl import connect, run_repl

    try:
        backend = connect(url=url, registry=None if url else load_registry(config), model=model, api_key=api_key)
    except (LocalchatError, ValueError) as exc:
        raise fail(str(exc)) from None
    try:
        run_repl(backend, system=system, mcp=mcp or ())
    finally:
        backend.close()


@app.command("open")
def open_page(url: str = typer.Option("http://127.0.0.1:8000", "--url", help="The running localchat server.")) -> None:
    """Open the chat page of a running server in your default browser."""
    import webbrowser

    import httpx

    page = url.rstrip("/").removesuffix("/v1") + "/"
    try:
        r = httpx.get(page, timeout=5)
    except httpx.HTTPError as exc:
        raise fail(f"no localchat server answers at {page} ({exc}); start one with `localchat serve`") from None
    if r.status_code == 404:
        raise fail(f"the server at {page} has no chat page: it was started with --no-webui")
    if r.status_code != 200 or "text/html" not in r.headers.get("content-type", ""):
        raise fail(f"{page} answered {r.status_code}, not the chat page: is it a localchat server?")
    if not webbrowser.open(page):
        raise fail(f"no browser could be started here; open {page} yourself")
    out.print(f"opened {page}")


@app.command("pull")
def pull(
    source: str = typer.Argument(..., help="OWNER/REPO[:QUANT] (a Hugging Face repository; default quant Q4_K_M), "
                                 "hf.co/OWNER/REPO[:QUANT], a huggingface.co URL, or an https URL of a .gguf file."),
    name: Optional[str] = typer.Option(None, "--name", help="Name to record it under (default: from the repository)."),
    config: Optional[Path] = ConfigOpt,
) -> None:
    """Download a GGUF model (from Hugging Face, into its cache), check it, and add it to your registry."""
    pull_model(source, name, config)


@app.command()
def ps(
    url: str = typer.Option("http://127.0.0.1:8000", "--url", help="The running localchat server."),
    api_key: Optional[str] = typer.Option(None, envvar="LOCALCHAT_API_KEY", help="API key, if the server needs one."),
) -> None:
    """List the models a running server has loaded: memory, slots, requests, idle time."""
    import httpx

    headers = {"Authorization": f"Bearer {api_key}"} if api_key else {}
    try:
        r = httpx.get(url.rstrip("/").removesuffix("/v1") + "/health", headers=headers, timeout=5)
        r.raise_for_status()
    except httpx.HTTPError as exc:
        raise fail(f"no localchat server answers at {url} ({exc}); start one with `localchat serve`") from None
    loaded = r.json().get("loaded", [])
    table = Table(box=None, header_style="bold")
    for column in ("name", "family", "size", "memory", "context", "K/V cache", "busy", "queued", "requests", "idle",
                   "unloads in"):
        table.add_column(column, justify="left" if column in ("name", "family") else "right", no_wrap=column == "name")
    for m in loaded:
        keep = m["keep_alive_seconds"]
        until = "never" if keep is None else "now" if keep == 0 else duration(max(keep - m["idle_seconds"], 0))
        sizing = m.get("sizing") or {}
        memory = human_bytes(sizing["memory_needed_bytes"]) if sizing else "?"
        cache = f"{sizing.get('cache_type_k', 'f16')}/{sizing.get('cache_type_v', 'f16')}" if sizing else "?"
        table.add_row(m["name"], m["family"], human_bytes(m["size_bytes"]), memory, str(m["context_length"]), cache,
                      f"{m['busy_slots']}/{m['slots']}", str(m["queued"]), str(m["requests"]),
                      duration(m["idle_seconds"]) if not m["requests"] else "busy",
                      until if not m["requests"] else "-")
    out.print(table if loaded else "[dim]no model is loaded[/dim]")
    for m in loaded:  # why each got its context and slots (memory: the estimate of what it needs)
        if m.get("rpc"):  # its layers on llama.cpp RPC workers
            out.print(f"[dim]{escape(m['name'])}: {m.get('rpc_layers') or '?'} layers on RPC workers[/dim]")
        for link in m.get("rpc") or []:
            out.print(f"[dim]{escape(m['name'])}: RPC worker {escape(link['endpoint'])}: {link['state']}"
                      + (f" ({escape(link['error'])})" if link.get("error") else "") + "[/dim]")
        if m.get("upstream"):  # (its memory is the upstream's, as that one sized it)
            up = m["upstream"]
            mode = " (chat mode)" if up.get("mode") == "chat" else ""
            out.print(f"[dim]{escape(m['name'])}: runs at {escape(up['url'])} as {escape(up['model'])}{mode}: "
                      f"{up['state']}"
                      + (f" ({escape(up['error'])})" if up.get("error") else "") + "[/dim]")
        if m.get("sizing"):
            out.print(f"[dim]{escape(m['name'])}: {m['slots']} × {m['context_length']} tokens: "
                      f"{escape(m['sizing']['reason'])}[/dim]")


RPC_WARNING = """
!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!
WARNING: Host ('{host}') is != '127.0.0.1'
         Never expose the RPC server to an open network!
         This is an experimental feature and is not secure!
!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!
"""


@app.command("rpc-worker")
def rpc_worker(
    host: str = typer.Option("127.0.0.1", help="Address to bind; loopback by default (reach it through an SSH "
                             "tunnel or WireGuard). Anything else needs --insecure-network."),
    port: int = typer.Option(50052, min=1, max=65535, help="TCP port."),
    threads: Optional[int] = typer.Option(None, min=1, help="CPU threads (default: every core)."),
    cache: bool = typer.Option(False, "--cache", help="Keep the tensors sent to it on disk (under the cache "
                               "folder's rpc/), so a model loads faster the next time."),
    insecure_network: bool = typer.Option(False, "--insecure-network",
                                          help="Allow a non-loopback --host: anyone who reaches the port can run "
                                          "computations here and read or overwrite its memory buffers."),
) -> None:
    """Lend this machine's GPU (or CPU) to another localchat's model: llama.cpp's RPC server.
    That server's models.toml names it as `rpc = ["HOST:PORT"]`; one server uses it at a time."""
    import ipaddress
    import os
    import threading

    from .engine.remote import rpc
    from .models.paths import cache_dir

    try:
        loopback = ipaddress.IPv4Address(host).is_loopback
    except ValueError:
        raise fail(f"--host {host!r}: llama.cpp's RPC server binds an IPv4 address, such as 127.0.0.1") from None
    if not loopback and not insecure_network:
        raise fail(f"--host {host} is not a loopback address: llama.cpp's RPC server is not secure (no key, no "
                   "encryption, and a client can read and write its memory). Keep it on 127.0.0.1 and reach it "
                   "through an SSH tunnel or WireGuard, or pass --insecure-network on a network you trust.")
    if not rpc.supported():
        raise fail(rpc.BUILD_HINT)
    if not loopback:
        typer.echo(RPC_WARNING.format(host=host), err=True)
    folder = None
    if cache:
        folder = cache_dir() / "rpc"
        folder.mkdir(parents=True, exist_ok=True)
    # ggml's server loop runs in C and does not return: a thread, so that Ctrl-C still ends the process
    server = threading.Thread(target=rpc.serve, args=(f"{host}:{port}",),
                              kwargs={"threads": threads or os.cpu_count() or 1,
                                      "cache_dir": str(folder) if folder else None}, daemon=True)
    server.start()
    try:
        while server.is_alive():
            server.join(0.5)
    except KeyboardInterrupt:
        os._exit(0)  # the C loop cannot be stopped from here: the process ends with it
    # it returned: ggml could not bind or start (it printed why)
    raise fail(f"the RPC server on {host}:{port} stopped: see the lines above (is the port in use?)")
