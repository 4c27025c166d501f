"""The chat use-case, between the HTTP edge (or the REPL) and the engine."""

from .models import LoadedModel, ModelHost
from .service import Chat, ChatRequest, Delta, Finish, Turn, Usage

__all__ = ["Chat", "ChatRequest", "Delta", "Finish", "LoadedModel", "ModelHost", "Turn", "Usage"]
