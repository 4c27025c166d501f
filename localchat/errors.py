"""One small exception tree, with no wire shape. Each error knows its HTTP status and a type;
the API edge (api/errors.py) renders it in the protocol's own shape, in one place.

An error about a field of a request names it one of two ways: `param`, a path in the protocol's
own request (set where the protocol parses it), or `field`, a path in the neutral generation
request (`tools.2.parameters`, `json_schema`, set in generation), which each protocol turns
into its own parameter name with one table."""

from __future__ import annotations


class LocalchatError(Exception):
    status = 500
    type = "server_error"
    code: str | None = None
    retry_after: int | None = None  # seconds, sent as a Retry-After header

    def __init__(self, message: str, *, param: str | None = None, code: str | None = None,
                 field: str | None = None):
        super().__init__(message)
        self.message = message
        self.param = param
        self.field = field  # a path in the neutral request; the message does not repeat it
        if code is not None:
            self.code = code


class InvalidRequest(LocalchatError):
    status = 400
    type = "invalid_request_error"


class PayloadTooLarge(InvalidRequest):
    status = 413


class ContextOverflow(InvalidRequest):
    code = "context_length_exceeded"


class GrammarError(InvalidRequest):
    code = "invalid_grammar"


class GrammarDeadEnd(GrammarError):
    """The grammar (a raw one, or one made from a schema) allows no token of the model's
    vocabulary at some point of the output: the request asks for what cannot be written."""

    code = "grammar_dead_end"


class SlotBusy(InvalidRequest):
    """A slot action (save, restore, erase) on a slot that is processing a request."""

    status = 409
    code = "slot_busy"


class NotSupported(LocalchatError):
    """What this server, or this model's engine, does not do (llama-server's `not_supported_error`):
    the slot actions without a `slot_save_path`, or on a model that runs upstream."""

    status = 501
    type = "not_supported_error"
    code = "not_supported"


class ModelNotFound(LocalchatError):
    status = 404
    type = "invalid_request_error"
    code = "model_not_found"


class ModelUnavailable(LocalchatError):
    """The model is known but its file cannot be loaded (missing, unreadable, not GGUF)."""

    status = 503
    type = "server_error"
    code = "model_unavailable"


class ModelTooLarge(ModelUnavailable):
    """The model does not fit in the free memory even with the smallest context and one slot
    (models/fit.py): refused before llama.cpp tries."""

    code = "model_too_large"


class EngineError(LocalchatError):
    status = 500
    type = "server_error"
    code = "engine_error"


class EngineCrashed(EngineError):
    """The model's worker process died while generating this request."""

    code = "engine_crashed"


class QueueFull(LocalchatError):
    """Every slot is busy and the queue of waiting requests is at its limit."""

    status = 429
    type = "rate_limit_error"
    code = "queue_full"
    retry_after = 1


class PullFailed(LocalchatError):
    """`localchat pull` (or POST /api/pull) could not get the model: the network or the hub
    failed, or the file is not a usable GGUF. Nothing was registered."""

    status = 502
    type = "server_error"
    code = "pull_failed"


class PullNotFound(PullFailed):
    """No such repository, file or quantization."""

    status = 404
    type = "invalid_request_error"
    code = "not_found"


class PullDenied(PullFailed):
    """The repository is gated or private and the token (HF_TOKEN) does not open it."""

    status = 403
    type = "permission_error"
    code = "gated_repo"


class PullCancelled(LocalchatError):
    """The client of POST /api/pull left: the download stops (and resumes at the next pull)."""

    status = 499
    code = "cancelled"


class UpstreamError(LocalchatError):
    """A model served by another engine (an `upstream` entry of models.toml) failed there: it
    answered with an error of its own, broke off mid-answer, or is not a localchat peer.
    Each failure of the link is mapped once (engine/remote/upstream.py) to this class or below."""

    status = 502
    type = "server_error"
    code = "upstream_error"


class UpstreamUnavailable(UpstreamError):
    """The upstream cannot be reached: the connection is refused, or its host is unknown."""

    status = 503
    code = "upstream_unavailable"
    retry_after = 5


class UpstreamTimeout(UpstreamError):
    """The upstream did not answer in time (its entry's `upstream_timeout`)."""

    status = 504
    code = "upstream_timeout"


class ToolServerError(LocalchatError):
    """An MCP server (the chat page's or the REPL's tools: mcp_tools.py) could not be used: it is
    down, not an MCP server, a program that will not start, or it refused."""

    status = 502
    type = "server_error"
    code = "mcp_server_error"


class ToolServerTimeout(ToolServerError):
    """An MCP server did not connect, list its tools or answer a call in time."""

    status = 504
    code = "mcp_server_timeout"
