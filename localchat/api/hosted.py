"""Tools that a hosted API runs on its own servers — web search, file search, code execution,
computer use, MCP connectors: this server cannot run them.

By default such a tool is left out of what the model sees, named in the response's
`x-localchat-dropped-tools` header and logged once per kind; with `hosted_tools = "refuse"` in
models.toml (or `localchat serve --hosted-tools refuse`) a request that has one is a 400."""

from __future__ import annotations

import logging

from ..errors import InvalidRequest
from ..models import Settings

HEADER = "x-localchat-dropped-tools"
log = logging.getLogger("localchat.api")
_logged: set[str] = set()


def drop(dropped: list[str], kind: str, where: str, settings: Settings) -> None:
    """Leave out a tool of type `kind` (found at `where` in the request), or refuse it."""
    if settings.hosted_tools == "refuse":
        raise InvalidRequest(f"{where}: {kind!r} tools run on a hosted API's own servers, and this server cannot run "
                             "them (hosted_tools = \"refuse\"); remove the tool from the request", param=where)
    dropped.append(kind)
    if kind not in _logged:
        _logged.add(kind)
        log.warning("requests carry %r tools, which run on a hosted API's own servers: left out of what the model "
                    "sees, and named in the %s response header (logged once)", kind, HEADER)


def headers(dropped: list[str]) -> dict[str, str]:
    return {HEADER: ", ".join(dict.fromkeys(dropped))} if dropped else {}
