"""The generation step, between the protocols (api/) and the engine: a neutral request in
(request.py), prepared (prepare.py: model, prompt, constraint, tokens), run, and its output split
into neutral events: content, reasoning, tool calls, finishes (service.py, stream.py)."""

from ..engine import PromptLogprobs
from .constraints import OutputRules, ToolSpec
from ..models.host import LoadedModel, ModelHost
from .request import Audio, GenerationRequest, Image, Message, Part, Sampling, Text, ToolCall
from .service import Chat, Finish, Logprobs, Turn, Usage, total_usage
from .stream import Delta, ReasoningDelta, ToolCallArguments, ToolCallStart

__all__ = ["Audio", "Chat", "Delta", "Finish", "GenerationRequest", "Image", "LoadedModel", "Logprobs", "Message", "ModelHost",
           "OutputRules", "Part", "PromptLogprobs", "ReasoningDelta", "Sampling", "Text", "ToolCall", "ToolCallArguments", "ToolCallStart",
           "ToolSpec", "Turn", "Usage", "total_usage"]
