"""The HTTP edge: OpenAI-compatible routes over the chat layer."""

from .app import create_app

__all__ = ["create_app"]
