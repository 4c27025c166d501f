"""Request text never reaches a log line raw: CR, LF, escape sequences and other invisible
characters in a logged argument, message or exception are escaped, so a request cannot forge
or split log lines. The server and every worker process install the same filter."""

from __future__ import annotations

import logging
import time
import traceback
from contextvars import ContextVar
from dataclasses import dataclass, field
from typing import Any


def printable(text: object, limit: int = 2000) -> str:
    """`text` for one log line: CR, LF and other control or invisible characters escaped as
    repr() writes them (a request cannot forge or split log lines), cut after `limit` characters."""
    s = str(text)
    if len(s) > limit:
        s = s[:limit] + f"… ({len(s) - limit} more characters)"
    return s if s.isprintable() else "".join(c if c.isprintable() else repr(c)[1:-1] for c in s)


def _exception_text(exc: BaseException) -> str:
    """A traceback whose frames come from the source files and whose messages, which may quote
    a request, are escaped."""
    chain: list[BaseException] = []
    while exc is not None and exc not in chain and len(chain) < 8:
        chain.append(exc)
        exc = exc.__cause__ or (None if exc.__suppress_context__ else exc.__context__)  # type: ignore[assignment]
    parts = []
    for e in reversed(chain):
        frames = "".join(traceback.format_list(traceback.extract_tb(e.__traceback__))) if e.__traceback__ else ""
        parts.append("Traceback (most recent call last):\n" + frames + printable(f"{type(e).__qualname__}: {e}"))
    return "\n\nThe above exception led to the following exception:\n\n".join(parts)


class _EscapeRequestText(logging.Filter):
    """On the loggers that may carry request text: escape string arguments, a message logged
    without arguments (llama.cpp's own lines), and exception messages (record.exc_text, which
    formatters use as it is)."""

    def filter(self, record: logging.LogRecord) -> bool:
        if isinstance(record.args, tuple) and record.args:
            record.args = tuple(printable(a) if isinstance(a, str) else a for a in record.args)
        elif not record.args:
            record.msg = printable(str(record.msg).rstrip("\n"))
        if record.exc_info and record.exc_info[1] is not None and not record.exc_text:
            record.exc_text = _exception_text(record.exc_info[1])
        return True


_ESCAPE = _EscapeRequestText()
# every logger that may carry request text ("uvicorn.error": its "Exception in ASGI application" traceback)
_LOGGERS = ("localchat.api", "localchat.access", "localchat.generation", "localchat.engine", "localchat.models",
            "localchat.llama", "localchat.worker", "uvicorn.error")


def escape_request_text() -> None:
    """Put the filter on those loggers, in this process (the server, and each model's worker)."""
    for name in _LOGGERS:
        logging.getLogger(name).addFilter(_ESCAPE)  # idempotent


@dataclass
class RequestRecord:
    """What one request's access-log line says; generation fills in the model and the tokens."""

    method: str
    path: str
    started: float = field(default_factory=time.monotonic)
    wall: float = field(default_factory=time.time)  # when it started, unix time
    status: int = 0
    model: str | None = None
    prompt_tokens: int | None = None
    cached_tokens: int | None = None
    generated: int = 0
    first_token: float | None = None  # monotonic time of the first generated text
    error: str | None = None  # why a request failed: its error message, or an error inside a stream
    finish: str | None = None  # the first choice's end: end | stop | length
    why: str | None = None  # why a choice ended early with "length": repetition
    drafted: int = 0  # tokens drafted from the text and verified, and of those the ones kept
    kept: int = 0
    miss: str | None = None  # why the prompt cache served less than it held (generation/service.py)

    def text(self) -> None:
        if self.first_token is None:
            self.first_token = time.monotonic()

    def done(self, prompt_tokens: int, cached_tokens: int, generated: int, reason: str, why: str | None = None,
             drafted: int = 0, kept: int = 0) -> None:
        """One choice has ended."""
        self.prompt_tokens, self.cached_tokens = prompt_tokens, cached_tokens
        self.generated += generated
        self.drafted += drafted
        self.kept += kept
        self.finish = self.finish or reason
        self.why = self.why or why

    def answered(self) -> dict[str, Any]:
        """The request as GET /health's `recent` list shows it (the web page's status panel)."""
        done = self.finish is not None
        return {"model": self.model, "started": self.wall, "seconds": round(time.monotonic() - self.started, 3),
                "prompt_tokens": self.prompt_tokens, "cached_tokens": self.cached_tokens if done else None,
                "completion_tokens": self.generated if done else None,
                "finish": "error" if self.error else self.finish or "cancelled"}

    def line(self) -> str:
        parts = [self.method, self.path, str(self.status)]
        if self.model:
            parts.append(f"model={self.model}")
        if self.prompt_tokens is not None:
            parts.append(f"prompt={self.prompt_tokens} cached={self.cached_tokens or 0} generated={self.generated}")
            finish = "error" if self.error else self.finish or "cancelled"
            parts.append(f"finish={finish}" + (f" reason={self.why}" if self.why else ""))
            if self.drafted:  # drafts (from the text or a draft model): kept of drafted
                parts.append(f"drafts={self.kept}/{self.drafted}")
        if self.first_token is not None:
            parts.append(f"ttft={self.first_token - self.started:.2f}s")
        parts.append(f"total={time.monotonic() - self.started:.2f}s")
        if self.miss:
            parts.append(f'cache_miss="{self.miss}"')
        if self.error:
            parts.append(f'"{self.error}"')
        return " ".join(parts)


_RECORD: ContextVar[RequestRecord | None] = ContextVar("localchat_request", default=None)


def current_request() -> RequestRecord | None:
    """The record of the request being served in this context (None outside a request)."""
    return _RECORD.get()


def start_request(method: str, path: str) -> RequestRecord:
    record = RequestRecord(method, path)
    _RECORD.set(record)
    return record


def configure(level: int = logging.INFO) -> None:
    """Log lines of the server to stderr, one per line, with the time (`localchat serve`)."""
    logger = logging.getLogger("localchat")
    if not any(getattr(h, "_localchat", False) for h in logger.handlers):
        handler = logging.StreamHandler()
        handler.setFormatter(logging.Formatter("%(asctime)s %(message)s", "%H:%M:%S"))
        handler._localchat = True  # type: ignore[attr-defined]
        logger.addHandler(handler)
    logger.setLevel(level)
