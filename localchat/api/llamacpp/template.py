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
from ..body import parse, read_json
from ..openai.schemas import ChatCompletionRequest


def routes(chat: Chat) -> list[Route]:
    async def apply_template(request: Request) -> Response:
        limits = chat.host.settings
        body = await read_json(request, limits.max_body_bytes)
        req = await asyncio.to_thread(lambda: parse(ChatCompletionRequest, body))
        return JSONResponse({"prompt": await chat.render(req.to_request(limits))})

    return [Route("/apply-template", apply_template, methods=["POST"])]
