"""Request text never reaches a log line raw: CR, LF, escape sequences and other invisible
characters in a logged argument, message or exception are escaped, so a request cannot forge
or split log lines. The server and every worker process install the same filter."""

from __future__ import annotations

import logging
import traceback


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
_LOGGERS = ("localchat.api", "localchat.generation", "localchat.engine", "localchat.models", "localchat.llama", "localchat.worker", "uvicorn.error")


def escape_request_text() -> None:
    """Put the filter on those loggers, in this process (the server, and each model's worker)."""
    for name in _LOGGERS:
        logging.getLogger(name).addFilter(_ESCAPE)  # idempotent
