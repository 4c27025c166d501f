"""Reading a request body, for every protocol: JSON within the size limit, then a pydantic model
whose first error becomes a 400 naming the field as a dotted path."""

from __future__ import annotations

import json
import math
import re
from typing import Annotated, Any, TypeVar

from pydantic import AfterValidator, BaseModel, ValidationError
from starlette.requests import Request

from ..errors import InvalidRequest, PayloadTooLarge
from ..models import parse_duration

M = TypeVar("M", bound=BaseModel)


def _seconds(value: float | str | None) -> float | None:
    if value is None:
        return None
    seconds = parse_duration(value)
    if not math.isfinite(seconds):
        raise ValueError("keep_alive must be a finite number of seconds (negative: forever)")
    return seconds


# Ollama's keep_alive, accepted by every protocol: seconds or a duration ("10m"); seconds once parsed.
KeepAlive = Annotated[float | str | None, AfterValidator(_seconds)]


async def read_json(request: Request, max_bytes: int, *, array: bool = False) -> Any:
    """The body as JSON: an object (or, with `array`, an array too), within `max_bytes`."""
    size = f"{max_bytes // 2**20} MiB" if max_bytes % 2**20 == 0 else f"{max_bytes} bytes"
    too_large = PayloadTooLarge(f"the request body is larger than {size} (max_body_bytes)")
    declared = request.headers.get("content-length", "")
    if declared.isdigit() and int(declared) > max_bytes:
        raise too_large
    chunks, received = [], 0
    async for chunk in request.stream():  # a chunked body is cut off at the limit, not read whole first
        received += len(chunk)
        if received > max_bytes:
            raise too_large
        chunks.append(chunk)
    try:
        body = json.loads(b"".join(chunks))
    except RecursionError:
        raise InvalidRequest("the request body is nested too deeply") from None
    except ValueError as exc:
        raise InvalidRequest(f"the request body is not valid JSON: {exc}") from None
    if not isinstance(body, dict) and not (array and isinstance(body, list)):
        raise InvalidRequest("the request body must be a JSON object" + (" or array" if array else ""))
    return body


def parse(model: type[M], body: dict[str, Any], **context: Any) -> M:
    try:
        return model.model_validate(body, context=context or None)
    except ValidationError as exc:
        raise invalid(exc) from None


def invalid(exc: ValidationError) -> InvalidRequest:
    err = exc.errors()[0]
    param = ".".join(str(p) for p in err["loc"] if not _union_tag(p))
    return InvalidRequest(f"{param}: {err['msg']}" if param else err["msg"], param=param or None)


def _union_tag(part: str | int) -> bool:
    """pydantic's name for one member of a union in an error's location ('str', 'list[str]',
    'NamedToolChoice'): not a field of the request, so not part of `param`."""
    return isinstance(part, str) and (part in ("str", "int", "float", "bool", "none")
                                      or re.match(r"(list|dict|literal|tuple|set|function-[a-z]+)\[", part) is not None
                                      or part[:1].isupper())
