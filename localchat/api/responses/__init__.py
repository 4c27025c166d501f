"""OpenAI's Responses API: the request's models (schemas.py), input items and tools in
(request.py), output items and named SSE events out (stream.py), stored responses. Errors in
OpenAI's shape, with its field names."""

from __future__ import annotations

from .. import errors
from .request import routes

_FIELDS = [(r"tools\.(\d+)\.parameters", r"tools.\1.parameters"), (r"json_schema", "text.format.schema"),
           (r"json_object", "text.format"), (r"messages", "input"), (r"logit_bias", "logit_bias")]
ERRORS = [errors.ErrorShape("/v1/responses", fields=_FIELDS), errors.ErrorShape("/responses", fields=_FIELDS)]

__all__ = ["ERRORS", "routes"]
