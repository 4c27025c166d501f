"""LoRA adapters: a request's `lora` field (a name, or `[{name | id, scale}]`) and llama-server's
`GET /lora-adapters` (each adapter's id, name, path and default scale) and `POST /lora-adapters`
(`[{id | name, scale}]`: the default scales, for requests that name no adapters; an adapter not
listed gets 0). `?model=NAME` picks the model (default: the default model)."""

from __future__ import annotations

from pydantic import BaseModel, ConfigDict, Field, RootModel, model_validator
from starlette.requests import Request
from starlette.responses import JSONResponse, Response
from starlette.routing import Route

from ...generation import Chat
from ...generation.adapters import LoraChoice, resolve_adapters
from ..body import parse, read_json


class LoraRef(BaseModel):
    model_config = ConfigDict(extra="ignore")
    id: int | None = Field(None, ge=0)
    name: str | None = None
    scale: float = Field(1.0, ge=-100, le=100)  # NaN fails too

    @model_validator(mode="after")
    def _one(self) -> "LoraRef":
        if (self.id is None) == (self.name is None):
            raise ValueError("give an adapter's `name` or its `id`")
        return self


LoraField = list[LoraRef] | str | None  # a request's `lora` (the list first: its errors name the entry)


def lora_choice(value: LoraField) -> LoraChoice:
    """The request's field as the generation layer takes it."""
    if value is None or isinstance(value, str):
        return value
    return tuple((ref.name if ref.name is not None else ref.id, ref.scale) for ref in value)  # type: ignore[misc]


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
