"""The chat page's way to MCP servers (its Settings name them by URL, kept in the browser):
`POST /mcp/tools {"url"}` lists a server's tools as OpenAI function tools (with those left out
and why), `POST /mcp/call {"url", "name", "arguments"}` runs one and answers its text. The page
cannot speak MCP itself: its CSP lets it reach only this server, and MCP servers send no CORS
headers. URLs only: nothing here starts a program (a stdio server is the REPL's). Each call opens
its own connection (localchat/mcp_tools.py). Behind the guard like every route (loopback, the
API key); a server that is down or slow is a 502/504 in OpenAI's error shape, naming it."""

from __future__ import annotations

from typing import Any

from pydantic import BaseModel, ConfigDict, Field
from starlette.requests import Request
from starlette.responses import JSONResponse, Response
from starlette.routing import Route

from .. import mcp_tools
from ..errors import InvalidRequest
from ..generation import Chat
from .body import parse, read_json

URL = r"^https?://\S+$"


class ToolsBody(BaseModel):
    model_config = ConfigDict(extra="forbid")
    url: str = Field(pattern=URL, max_length=2048)


class CallBody(ToolsBody):
    name: str = Field(min_length=1, max_length=256)
    arguments: dict[str, Any] | str = Field(default_factory=dict)


def routes(chat: Chat) -> list[Route]:
    limit = chat.settings.max_body_bytes

    async def tools(request: Request) -> Response:
        body = parse(ToolsBody, await read_json(request, limit))
        found = await mcp_tools.tools_at(mcp_tools.Target(url=body.url))
        return JSONResponse({"server": found.server, "tools": [t.openai() for t in found.tools],
                             "skipped": [{"name": name, "reason": why} for name, why in found.skipped]})

    async def call(request: Request) -> Response:
        body = parse(CallBody, await read_json(request, limit))
        try:
            arguments = mcp_tools.arguments_of(body.arguments)
        except ValueError as exc:
            raise InvalidRequest(f"arguments: {exc}", param="arguments") from None
        result = await mcp_tools.call_at(mcp_tools.Target(url=body.url), body.name, arguments)
        return JSONResponse({"content": result.text, "is_error": result.is_error, "cut": result.cut})

    return [Route("/mcp/tools", tools, methods=["POST"]), Route("/mcp/call", call, methods=["POST"])]
