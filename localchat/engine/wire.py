"""The engine's plain data as JSON, for a request that crosses the network (upstream.py, and a
peer's /internal/engine routes): a `Generate` in, its events out, errors by class name.

Decoding builds only the dataclasses named in TYPES and the errors of localchat.errors, each
field checked against its type hint (a tuple stays a tuple, an int stays an int, bytes come as
base64): nothing from the network is unpickled or looked up beyond those names."""

from __future__ import annotations

import base64
import types
import typing
from dataclasses import MISSING, fields, is_dataclass
from typing import Any

from .. import errors
from ..errors import EngineError, InvalidRequest, LocalchatError
from .params import (
    Check,
    Constraint,
    Done,
    Generate,
    Media,
    Prepared,
    PromptLogprobs,
    SamplingParams,
    SpeedParams,
    Started,
    Text,
    TokenLogprob,
    TopLogprob,
)

TYPES: dict[str, type] = {cls.__name__: cls for cls in (Generate, SamplingParams, SpeedParams, Constraint, Check, Media,
                                                        Text, Done, PromptLogprobs, TokenLogprob, TopLogprob, Prepared,
                                                        Started)}
ITEMS = ("Text", "Done", "PromptLogprobs", "Prepared", "Started")  # what a generate stream carries
_HINTS: dict[type, dict[str, Any]] = {}


class WireError(InvalidRequest):
    """Data that is not what the wire carries (the other side is another version, or not localchat)."""


def encode(value: Any) -> Any:
    """A dataclass of TYPES (and what it holds) as JSON-ready data; a dataclass is tagged `$`."""
    if is_dataclass(value) and not isinstance(value, type):
        return {"$": type(value).__name__, **{f.name: encode(getattr(value, f.name)) for f in fields(value)}}
    if isinstance(value, bytes):
        return base64.b64encode(value).decode("ascii")
    if isinstance(value, (frozenset, set)):
        return sorted(encode(v) for v in value)
    if isinstance(value, (list, tuple)):
        return [encode(v) for v in value]
    if isinstance(value, dict):
        return {str(k): encode(v) for k, v in value.items()}
    return value


def decode(data: Any, kind: type) -> Any:
    """`data` (from `encode`) as a `kind` of TYPES; WireError names the first field that does not fit."""
    return _decode(data, kind, kind.__name__)


def decode_item(data: Any) -> Any:
    """One item of a generate stream: an event, Prepared or Started."""
    name = data.get("$") if isinstance(data, dict) else None
    if name not in ITEMS:
        raise WireError(f"not an event of a generate stream: {str(data)[:80]}")
    return decode(data, TYPES[name])


def encode_error(exc: LocalchatError) -> dict[str, Any]:
    return {"class": type(exc).__name__, "message": exc.message, "param": exc.param, "code": exc.code,
            "field": exc.field, "status": exc.status, "type": exc.type}


def decode_error(data: Any) -> LocalchatError:
    """An error as the peer raised it: its class if localchat has it (by name), else a plain one with
    its status; never anything that is not a LocalchatError."""
    if not isinstance(data, dict) or not isinstance(data.get("message"), str):
        return EngineError(f"the upstream sent an error that is not localchat's: {str(data)[:200]}")
    cls = getattr(errors, str(data.get("class")), None)
    known = isinstance(cls, type) and issubclass(cls, LocalchatError)
    text = {k: data[k] if isinstance(data.get(k), str) else None for k in ("param", "code", "field")}
    exc = (cls if known else LocalchatError)(data["message"], **text)  # type: ignore[operator]
    if not known:
        status = data.get("status")
        exc.status = status if isinstance(status, int) and 400 <= status < 600 else 500
        exc.type = data["type"] if isinstance(data.get("type"), str) else "server_error"
    return exc


# -- decoding by the type hints ---------------------------------------------------------------

def _hints(cls: type) -> dict[str, Any]:
    if cls not in _HINTS:
        _HINTS[cls] = typing.get_type_hints(cls)
    return _HINTS[cls]


def _decode(data: Any, hint: Any, where: str) -> Any:
    origin, args = typing.get_origin(hint), typing.get_args(hint)
    if hint is Any:
        return data
    if origin in (typing.Union, types.UnionType):
        if data is None and type(None) in args:
            return None
        last: WireError | None = None
        for arg in (a for a in args if a is not type(None)):
            try:
                return _decode(data, arg, where)
            except WireError as exc:
                last = exc
        raise last or WireError(f"{where}: null is not allowed")
    if isinstance(hint, type) and hint in TYPES.values():
        return _dataclass(data, hint, where)
    if origin in (tuple, list, frozenset):
        _expect(data, list, where)
        if origin is tuple and not (len(args) == 2 and args[1] is Ellipsis):
            if len(data) != len(args):
                raise WireError(f"{where}: {len(data)} items, not {len(args)}")
            return tuple(_decode(v, a, f"{where}.{i}") for i, (v, a) in enumerate(zip(data, args)))
        if args[0] is int and all(type(v) is int for v in data):  # a prompt's tokens: the long list, at once
            return origin(data)
        items = [_decode(v, args[0], f"{where}.{i}") for i, v in enumerate(data)]
        return origin(items)
    if origin is dict:
        _expect(data, dict, where)
        key, value = args
        try:
            return {(int(k) if key is int else k): _decode(v, value, f"{where}.{k}") for k, v in data.items()}
        except ValueError:
            raise WireError(f"{where}: keys must be integers") from None
    if hint is bytes:
        _expect(data, str, where)
        try:
            return base64.b64decode(data, validate=True)
        except ValueError:
            raise WireError(f"{where}: not base64") from None
    if hint is float and isinstance(data, int) and not isinstance(data, bool):
        return float(data)
    if hint in (int, float, str, bool):
        if type(data) is not hint:
            raise WireError(f"{where}: expected {hint.__name__}, got {type(data).__name__}")
        return data
    raise WireError(f"{where}: no decoding for {hint}")


def _dataclass(data: Any, cls: type, where: str) -> Any:
    _expect(data, dict, where)
    if data.get("$", cls.__name__) != cls.__name__:
        raise WireError(f"{where}: expected {cls.__name__}, got {data.get('$')}")
    hints, values = _hints(cls), {}
    for f in fields(cls):
        if f.name in data:  # a field this side does not know is left out: the other side is newer
            values[f.name] = _decode(data[f.name], hints[f.name], f"{where}.{f.name}")
        elif f.default is MISSING and f.default_factory is MISSING:
            raise WireError(f"{where}: {f.name} is missing")
    return cls(**values)


def _expect(data: Any, kind: type, where: str) -> None:
    if not isinstance(data, kind):
        raise WireError(f"{where}: expected {'an object' if kind is dict else kind.__name__}, "
                        f"got {type(data).__name__}")
