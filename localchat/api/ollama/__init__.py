"""Ollama's API on the same port: models (models.py, pull.py), chat and generate (chat.py,
stream.py), embeddings and the version (routes.py). Errors are Ollama's `{"error": "message"}`."""

from __future__ import annotations

from .routes import ERRORS, routes

__all__ = ["ERRORS", "routes"]
