"""The chat use-case, between the HTTP edge (or the REPL) and the engine."""

from .constraints import OutputRules, ToolSpec
from .models import LoadedModel, ModelHost
from .service import Chat, ChatRequest, Finish, Turn, Usage
from .stream import Delta, ReasoningDelta, ToolCallArguments, ToolCallStart

__all__ = ["Chat", "ChatRequest", "Delta", "Finish", "LoadedModel", "ModelHost", "OutputRules", "ReasoningDelta",
           "ToolCallArguments", "ToolCallStart", "ToolSpec", "Turn", "Usage"]
