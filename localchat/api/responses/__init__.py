"""OpenAI's Responses API: the request's models (schemas.py), input items and tools in
(request.py), output items and named SSE events out (stream.py), stored responses. Errors in
OpenAI's shape, with its field names."""

from __future__ import annotations

from dataclasses import replace

from .request import routes
from .stream import ERROR_SHAPE

ERRORS = [ERROR_SHAPE, replace(ERROR_SHAPE, prefix="/responses")]

__all__ = ["ERRORS", "routes"]
