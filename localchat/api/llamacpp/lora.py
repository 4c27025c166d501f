"""LoRA adapters, llama-server's routes: `GET /lora-adapters` (each adapter's id, name, path and
default scale) and `POST /lora-adapters` (`[{id | name, scale}]`: the default scales, for requests
that name no adapters; an adapter not listed gets 0). `?model=NAME` picks the model (default: the
default model). A request's own `lora` field (a name, or `[{name | id, scale}]`) is api/fields.py's."""

from __future__ import annotations

from pydantic import RootModel
from starlette.requests import Request
from starlette.responses import JSONResponse, Response
from starlette.routing import Route

from ...generation import Chat
from ...generation.adapters import resolve_adapters
from ..body import parse, read_json
from ..fields import LoraRef, lora_choice


class LoraList(RootModel[list[LoraRef]]):
    pass


def routes(chat: Chat) -> list[Route]:
    async def get_adapters(request: Request) -> Response:
        spec = chat.host.registry.resolve(request.query_params.get("model") or None)
        loaded = chat.host.loaded.get(spec.name)
        scales = loaded.lora_scales if loaded else [lora.scale for lora in spec.loras]
        return JSONResponse([{"id": i, "name": lora.name, "path": str(lora.path), "scale": scale}
                             for i, (lora, scale) in enumerate(zip(spec.loras, scales))])

    async def set_adapters(request: Request) -> Response:
        body = await read_json(request, chat.host.settings.max_body_bytes, array=True)
        refs = parse(LoraList, body.get("adapters", body) if isinstance(body, dict) else body).root
        lease = await chat.host.lease(request.query_params.get("model") or None)
        try:
            loaded = lease.model
            chosen = dict(resolve_adapters(loaded, lora_choice(refs), param="body"))
            loaded.lora_scales = [chosen.get(i, 0.0) for i in range(len(loaded.spec.loras))]
        finally:
            lease.release()
        return JSONResponse({"success": True})

    return [Route("/lora-adapters", get_adapters, methods=["GET"]),
            Route("/lora-adapters", set_adapters, methods=["POST"])]
