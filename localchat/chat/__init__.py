"""The chat use-case, between the HTTP edge (or the REPL) and the engine."""

from .constraints import OutputRules, ToolSpec
from .models import LoadedModel, ModelHost
from .service import Chat, ChatRequest, Finish, Logprobs, Turn, Usage, total_usage
from .stream import Delta, ReasoningDelta, ToolCallArguments, ToolCallStart

__all__ = ["Chat", "ChatRequest", "Logprobs", "total_usage", "Delta", "Finish", "LoadedModel", "ModelHost", "OutputRules", "ReasoningDelta",
           "ToolCallArguments", "ToolCallStart", "ToolSpec", "Turn", "Usage"]
