"""llama-server's slot routes: `GET /slots` (each slot of the model: `id`, `id_task`, `n_ctx`,
`is_processing`, `n_prompt_tokens`: the tokens its prompt cache holds) and
`POST /slots/{id}?action=save|restore|erase` (a slot's prompt cache to a file of the slot save
folder, `{"filename": "x.bin"}`, and back; erase empties it), answered as llama-server answers.

Ours: `?model=NAME` picks the model (default: the default model); GET lists nothing for a model
that is not loaded; `id_task` is the number of the last request the slot took (-1: none yet) and
is always there, as `n_prompt_tokens` is; llama-server's `speculative`, `params`, `next_token`
are not given. A slot that is processing a request is a 409 (llama-server waits for it); the
files are localchat's prompt-store files (engine/cache/prompt_store.py), not llama.cpp's. Through the
service's `chat.models` (generation/models.py)."""

from __future__ import annotations

from starlette.requests import Request
from starlette.responses import JSONResponse, Response
from starlette.routing import Route

from ...errors import InvalidRequest
from ...generation import Chat
from ..body import read_json

ACTIONS = ("save", "restore", "erase")


def routes(chat: Chat) -> list[Route]:
    async def list_slots(request: Request) -> Response:
        n_ctx, slots = await chat.models.slots(request.query_params.get("model") or None)
        return JSONResponse([{"id": s.id, "id_task": s.task, "n_ctx": n_ctx, "is_processing": s.processing,
                              "n_prompt_tokens": s.n_cells} for s in slots])

    async def slot_action(request: Request) -> Response:
        raw = request.path_params["id_slot"]
        try:
            slot_id = int(raw)
        except ValueError:
            raise InvalidRequest(f"id_slot: invalid slot ID {raw!r} (a slot's number, from 0)", param="id_slot") from None
        action = request.query_params.get("action", "")
        if action not in ACTIONS:
            raise InvalidRequest(f"action: invalid action {action!r}; one of save, restore, erase", param="action")
        filename = None
        if action != "erase":
            body = await read_json(request, chat.settings.max_body_bytes)
            filename = body.get("filename")
            if not isinstance(filename, str):
                raise InvalidRequest("filename: required, a string: the file's name in the slot save folder",
                                     param="filename")
        done = await chat.models.slot_action(request.query_params.get("model") or None, action, slot_id, filename)
        if action == "erase":
            return JSONResponse({"id_slot": slot_id, "n_erased": done.tokens})
        if action == "save":
            return JSONResponse({"id_slot": slot_id, "filename": filename, "n_saved": done.tokens,
                                 "n_written": done.n_bytes, "timings": {"save_ms": round(done.ms, 3)}})
        return JSONResponse({"id_slot": slot_id, "filename": filename, "n_restored": done.tokens,
                             "n_read": done.n_bytes, "timings": {"restore_ms": round(done.ms, 3)}})

    return [Route("/slots", list_slots, methods=["GET"]),
            Route("/slots/{id_slot}", slot_action, methods=["POST"])]
