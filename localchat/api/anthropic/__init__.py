"""Anthropic's Messages API: the request and its translation (request.py), the answer as
content blocks and named SSE events (stream.py). Errors in Anthropic's shape and words."""

from __future__ import annotations

from .request import routes
from .stream import ERROR_SHAPE

ERRORS = [ERROR_SHAPE]

__all__ = ["ERRORS", "routes"]
