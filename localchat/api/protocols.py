"""The protocols served besides OpenAI chat completions: each module has `routes(chat)` (a list
of Starlette routes onto the one generation step) and registers its error shape with
`errors.register(prefix, render)` at import. One line each below."""

from __future__ import annotations

from types import ModuleType

PROTOCOLS: list[ModuleType] = []
from . import openai_completions  # noqa: E402
PROTOCOLS.append(openai_completions)
from . import openai_embeddings  # noqa: E402
PROTOCOLS.append(openai_embeddings)
from . import llamacpp  # noqa: E402
PROTOCOLS.append(llamacpp)
from . import anthropic  # noqa: E402
PROTOCOLS.append(anthropic)
from . import responses  # noqa: E402
PROTOCOLS.append(responses)
from . import ollama  # noqa: E402
PROTOCOLS.append(ollama)
from . import rerank  # noqa: E402
PROTOCOLS.append(rerank)
from . import lora  # noqa: E402
PROTOCOLS.append(lora)
