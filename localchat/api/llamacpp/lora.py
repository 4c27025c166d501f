"""LoRA adapters, llama-server's routes: `GET /lora-adapters` (each adapter's id, name, path and
default scale) and `POST /lora-adapters` (`[{id | name, scale}]`: the default scales, for requests
that name no adapters; an adapter not listed gets 0). `?model=NAME` picks the model (default: the
default model). Both through the service's `chat.models` (generation/models.py). A request's own
`lora` field (a name, or `[{name | id, scale}]`) is api/fields.py's."""

from __future__ import annotations

from pydantic import RootModel
from starlette.requests import Request
from starlette.responses import JSONResponse, Response
from starlette.routing import Route

from ...generation import Chat
from ..body import parse, read_json
from ..fields import LoraRef, lora_choice


class LoraList(RootModel[list[LoraRef]]):
    pass


def routes(chat: Chat) -> list[Route]:
    async def get_adapters(request: Request) -> Response:
        adapters = chat.models.adapters(request.query_params.get("model") or None)
        return JSONResponse([{"id": a.id, "name": a.name, "path": str(a.path), "scale": a.scale} for a in adapters])

    async def set_adapters(request: Request) -> Response:
        body = await read_json(request, chat.settings.max_body_bytes, array=True)
        refs = parse(LoraList, body.get("adapters", body) if isinstance(body, dict) else body).root
        await chat.models.set_adapters(request.query_params.get("model") or None, lora_choice(refs), param="body")
        return JSONResponse({"success": True})

    return [Route("/lora-adapters", get_adapters, methods=["GET"]),
            Route("/lora-adapters", set_adapters, methods=["POST"])]
