"""The generation step, between the protocols (api/) and the engine: prepare a request (model,
prompt, constraint, tokens), run it, split its output into content, reasoning and tool calls."""

from .constraints import OutputRules, ToolSpec
from ..models.host import LoadedModel, ModelHost
from .service import Chat, ChatRequest, Finish, Logprobs, Turn, Usage, total_usage
from .stream import Delta, ReasoningDelta, ToolCallArguments, ToolCallStart

__all__ = ["Chat", "ChatRequest", "Logprobs", "total_usage", "Delta", "Finish", "LoadedModel", "ModelHost", "OutputRules", "ReasoningDelta",
           "ToolCallArguments", "ToolCallStart", "ToolSpec", "Turn", "Usage"]
