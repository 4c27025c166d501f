"""Anthropic's Messages API: the request and its translation (request.py), the answer as
content blocks and named SSE events (stream.py). Errors in Anthropic's shape and words."""

from __future__ import annotations

from .. import errors
from .request import routes
from .stream import error_body

_FIELDS = [(r"tools\.(\d+)\.parameters", r"tools.\1.input_schema"), (r"json_schema", "output_config.format.schema"),
           (r"json_object", "output_config.format"), (r"stop", "stop_sequences")]
ERRORS = [errors.ErrorShape("/v1/messages", lambda status, kind, message, param, code: error_body(status, message),
                           _FIELDS)]

__all__ = ["ERRORS", "routes"]
