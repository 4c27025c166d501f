"""The generation step, between the protocols (api/) and the engine: a neutral request in
(localchat/neutral.py), prepared (prepare.py: model, prompt, constraint, tokens), run, and its
output split into neutral events: content, reasoning, tool calls, finishes (service.py). `Chat`
(service.py) is all the protocols hold: generation, embeddings (embed.py), reranking (rerank.py),
tokens (tokens.py) and the models (models.py). The neutral vocabulary is named here too, for the
protocols."""

from ..engine import PromptLogprobs
from ..engine.params import KNOBS  # the sampling fields and their bounds, declared once (SamplingParams)
from ..models.host import LoadedModel, ModelHost
from ..neutral import (REASONING_OFF, REASONING_ON, Audio, ChatMessage, Delta, Finish, GenerationRequest, Image,
                       Logprobs, OutputRules, Part, PastCall, Reasoning, ReasoningDelta, Sampling, TextPart,
                       ToolCallArguments, ToolCallStart, ToolSpec, Usage)
from .embed import EmbedRequest, Embedding
from .models import Adapter, LoadedView, Models
from .rerank import Ranking, RerankRequest
from .service import Chat, Turn, total_usage

__all__ = ["REASONING_OFF", "REASONING_ON", "Adapter", "Audio", "Chat", "ChatMessage", "Delta", "EmbedRequest",
           "Embedding", "Finish", "GenerationRequest", "Image", "KNOBS", "LoadedModel", "LoadedView", "Logprobs", "ModelHost", "Models",
           "OutputRules", "Part", "PastCall", "PromptLogprobs", "Ranking", "Reasoning", "ReasoningDelta",
           "RerankRequest", "Sampling", "TextPart", "ToolCallArguments", "ToolCallStart", "ToolSpec", "Turn", "Usage",
           "total_usage"]
