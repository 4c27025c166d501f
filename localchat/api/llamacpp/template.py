"""llama-server's `POST /apply-template`: a chat completions request's messages rendered with
the model's chat template, as the server would prompt the model, without generating anything.
Every field that shapes the prompt counts (tools, documents, `chat_template_kwargs`,
`continue_final_message`, `add_generation_prompt`, `reasoning_effort`); images and audio show
as `<__media__>`. Answers `{"prompt": TEXT}`."""

from __future__ import annotations

import asyncio

from starlette.requests import Request
from starlette.responses import JSONResponse, Response
from starlette.routing import Route

from ...generation import Chat
from ..openai.schemas import read_chat_request


def routes(chat: Chat) -> list[Route]:
    async def apply_template(request: Request) -> Response:
        req = await read_chat_request(request, chat.settings)
        return JSONResponse({"prompt": await chat.render(await asyncio.to_thread(req.to_request))})

    return [Route("/apply-template", apply_template, methods=["POST"])]
