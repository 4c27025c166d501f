"""Generation for a model whose engine renders and parses itself (an upstream in chat mode,
engine/remote/upstream_chat.py): instead of rendering, constraining and tokenizing (prepare.py), the
neutral request becomes OpenAI chat's fields (`converse`), and the engine's events become the
neutral pieces the protocols already read (`CallChecker`, in place of a family's splitter).

Tool calls coming back are checked before they are passed on: each names a tool the request
declared (and the one `tool_choice` names, if it names one), its arguments parse as a JSON object
and validate against that tool's `parameters` (jsonschema). A call that does not is *reported*:
the request fails with a 502 `upstream_error` naming the tool, where in the arguments and what
the schema asked — never passed on as a valid call, nor as text a client could take for the
answer. Calls are therefore held until their choice ends, then given whole."""

from __future__ import annotations

import base64
import json
from typing import Any

import jsonschema
from jsonschema.exceptions import best_match

from ..engine.params import CallDelta, Converse, Thought, knob_params
from ..errors import InvalidRequest, UpstreamError
from ..families.codecs.base import ToolSet
from ..models import Settings
from ..models.host import LoadedModel
from ..neutral import (Audio, ChatMessage, Delta, GenerationRequest, Image, OutputRules, Piece, ReasoningDelta,
                       TextPart, ToolCallArguments, ToolCallStart, new_call_id)
from . import limits
from .fetch import load_url
from .media import check_count

# localchat's sampling fields and what an OpenAI-compatible engine calls them (vLLM's extra
# parameters beyond OpenAI's own); the others (penalty_last_n, repetition_stop, ngram_draft, the
# editor limits) are this server's engine's and are not sent.
SENT = {"temperature": "temperature", "top_p": "top_p", "top_k": "top_k", "min_p": "min_p",
        "presence_penalty": "presence_penalty", "frequency_penalty": "frequency_penalty",
        "repeat_penalty": "repetition_penalty", "seed": "seed", "ignore_eos": "ignore_eos"}


def converse(request: GenerationRequest, loaded: LoadedModel, settings: Settings) -> Converse:
    """The neutral request as OpenAI chat's fields; what only token mode can do is a 400."""
    name = loaded.spec.name
    refuse = {"prompt": request.prompt is not None, "grammar": request.output.grammar is not None,
              "logprobs": request.logprobs is not None, "prompt_logprobs": request.prompt_logprobs is not None,
              "lora": bool(request.lora)}
    for field, given in refuse.items():
        if given:
            what = "raw prompts" if field == "prompt" else field
            raise InvalidRequest(f"the model {name} runs upstream in chat mode, where {what} cannot be asked for "
                                 "(token mode can)", field=field)
    check_count(sum(isinstance(p, (Image, Audio)) for m in request.messages for p in m.content), settings)
    body: dict[str, Any] = {"messages": [_message(m, i, settings) for i, m in enumerate(request.messages)]}
    body.update(_output(request.output))
    body.update(_sampling(request, loaded, settings))
    kwargs = dict(request.template_kwargs)
    if request.reasoning is not None:
        kwargs.setdefault("enable_thinking", request.reasoning.enabled)
        if request.reasoning.effort:
            body["reasoning_effort"] = request.reasoning.effort
    if request.documents:
        body["documents"] = [dict(d) for d in request.documents]
    if kwargs:
        body["chat_template_kwargs"] = kwargs
    if request.continue_final:
        body.update(continue_final_message=True, add_generation_prompt=False)
    return Converse(body, request.n)


def _message(m: ChatMessage, i: int, settings: Settings) -> dict[str, Any]:
    out: dict[str, Any] = {"role": m.role}
    if all(isinstance(p, TextPart) for p in m.content):
        out["content"] = m.text
    else:
        out["content"] = [_part(p, settings) for p in m.content]
    if m.tool_calls:
        out["tool_calls"] = [{"id": c.id or f"call_{i}_{k}", "type": "function",
                              "function": {"name": c.name, "arguments": c.arguments if isinstance(c.arguments, str)
                                           else json.dumps(c.arguments, ensure_ascii=False)}}
                             for k, c in enumerate(m.tool_calls)]
        if not m.content:
            out["content"] = None
    if m.tool_call_id is not None:
        out["tool_call_id"] = m.tool_call_id
    if m.name is not None and m.role == "tool":
        out["name"] = m.name
    return out


def _part(p: Any, settings: Settings) -> dict[str, Any]:
    """A part as OpenAI's: an image by URL is read here, by this server's rules (fetch.py: which
    URLs, how large), and sent as a data URI — the upstream is never handed a URL to read."""
    if isinstance(p, TextPart):
        return {"type": "text", "text": p.text}
    if isinstance(p, Image):
        data = p.data if p.url is None else load_url(p.url, p.url_where or p.where or "messages", settings)
        kind = p.media_type or _image_type(data)
        return {"type": "image_url", "image_url": {"url": f"data:{kind};base64,{_b64(data)}"}}
    assert isinstance(p, Audio)
    return {"type": "input_audio", "input_audio": {"data": _b64(p.data), "format": p.format}}


def _b64(data: bytes) -> str:
    return base64.b64encode(data).decode("ascii")


def _image_type(data: bytes) -> str:
    for magic, kind in ((b"\x89PNG", "image/png"), (b"\xff\xd8", "image/jpeg"), (b"GIF8", "image/gif"),
                        (b"BM", "image/bmp")):
        if data.startswith(magic):
            return kind
    return "image/webp" if data[8:12] == b"WEBP" else "application/octet-stream"


def _output(rules: OutputRules) -> dict[str, Any]:
    out: dict[str, Any] = {}
    if rules.tools:
        out["tools"] = [{"type": "function", "function": {"name": t.name, **({"description": t.description}
                                                                               if t.description else {}),
                                                            "parameters": t.parameters or {"type": "object"},
                                                            **({"strict": True} if t.strict else {})}}
                        for t in rules.tools]
        choice = rules.tool_choice
        out["tool_choice"] = choice if choice in ("auto", "none", "required") else \
            {"type": "function", "function": {"name": choice}}
        if not rules.parallel_tool_calls:
            out["parallel_tool_calls"] = False
    if rules.json_schema is not None:
        schema = rules.json_schema if isinstance(rules.json_schema, dict) else {}
        out["response_format"] = {"type": "json_schema", "json_schema": {"name": "output", "schema": schema,
                                                                          "strict": rules.strict}}
    elif rules.json_object:
        out["response_format"] = {"type": "json_object"}
    return out


def _sampling(request: GenerationRequest, loaded: LoadedModel, settings: Settings) -> dict[str, Any]:
    """The fields the client or the entry set (the upstream's own defaults apply to the others);
    max_tokens when asked, lowered to the server's max_tokens_cap (not asked: not sent — vLLM
    refuses a max_tokens that does not fit its context beside the prompt, which only it counts)."""
    spec = loaded.spec.sampling
    entry = spec.model_dump(exclude_unset=True)
    params = request.sampling.over(knob_params(spec.model_dump())[0])
    given = {k for k, v in vars(request.sampling).items() if v is not None and v != {}} | set(entry)
    out: dict[str, Any] = {theirs: getattr(params, ours) for ours, theirs in SENT.items() if ours in given}
    if params.max_tokens is not None:
        out["max_tokens"] = limits.max_tokens(params.max_tokens, settings)
    if params.stop:
        out["stop"] = list(params.stop)
    if request.sampling.logit_bias:  # token ids of the upstream's vocabulary, as the client wrote them
        out["logit_bias"] = {str(k): v for k, v in request.sampling.logit_bias.items()}
    return out


class CallChecker:
    """One choice's events → neutral pieces (the place a family's splitter has in token mode):
    content and reasoning pass through; tool calls are gathered, then checked and given whole
    when the choice ends (`finish`), or reported (UpstreamError)."""

    def __init__(self, rules: OutputRules, where: str) -> None:
        self.rules, self.where = rules, where
        self.calls = 0
        self._calls: dict[int, list[Any]] = {}  # the upstream's call index → [id, name, arguments]

    def push(self, text: str) -> list[Piece]:
        return [Delta(text)] if text else []

    def take(self, event: Thought | CallDelta) -> list[Piece]:
        if isinstance(event, Thought):
            return [ReasoningDelta(event.text)] if event.text else []
        call = self._calls.setdefault(event.call, [None, None, ""])
        call[0] = call[0] or event.id
        call[1] = call[1] or event.name
        call[2] += event.arguments
        return []

    def finish(self) -> list[Piece]:
        if len(self._calls) > 1 and not self.rules.parallel_tool_calls:
            raise UpstreamError(f"{self.where} returned {len(self._calls)} tool calls where the request allowed one "
                                "(parallel_tool_calls: false); they are not passed on", param="parallel_tool_calls")
        pieces: list[Piece] = []
        declared = ToolSet(self.rules.tools)
        for k in sorted(self._calls):
            _, name, arguments = self._calls[k]
            name = declared.resolve(name or "") or name  # `bash` for a declared `Bash`
            checked = check_call(self.rules, name, arguments, self.where)
            pieces += [ToolCallStart(self.calls, new_call_id(), name), ToolCallArguments(self.calls, checked)]
            self.calls += 1
        required(self.rules, self.calls, self.where)
        return pieces


def check_call(rules: OutputRules, name: str | None, arguments: str, where: str) -> str:
    """A call's arguments, checked against the declared tool's schema (as compact JSON); else
    UpstreamError (502) saying what is wrong."""
    tools = {t.name: t for t in rules.tools}
    said = f"{where} returned a tool call"
    if not name or name not in tools or rules.tool_choice == "none":
        declared = ", ".join(tools) if rules.tool_choice != "none" else "none (tool_choice is none)"
        raise UpstreamError(f"{said} of {name!r}, a tool the request did not declare (declared: {declared}); "
                            "the call is not passed on", param="tools")
    if rules.tool_choice not in ("auto", "required") and name != rules.tool_choice:
        raise UpstreamError(f"{said} of {name!r}, but tool_choice asked for {rules.tool_choice!r}; "
                            "the call is not passed on", param="tool_choice")
    try:
        args = json.loads(arguments) if arguments.strip() else {}
    except ValueError as exc:
        raise UpstreamError(f"{said} of {name!r} whose arguments are not JSON ({exc}): {arguments[:200]!r}; "
                            "the call is not passed on", param="tools") from None
    if not isinstance(args, dict):
        raise UpstreamError(f"{said} of {name!r} whose arguments are not a JSON object: {arguments[:200]!r}; "
                            "the call is not passed on", param="tools")
    schema = tools[name].parameters
    if schema:
        try:
            error = best_match(jsonschema.validators.validator_for(schema)(schema).iter_errors(args))
        except Exception as exc:  # noqa: BLE001 - a schema jsonschema cannot apply (an unresolvable $ref)
            raise UpstreamError(f"{said} of {name!r} whose arguments cannot be checked against its schema "
                                f"({type(exc).__name__}: {exc}); the call is not passed on", param="tools") from None
        if error is not None:
            at = "/".join(str(p) for p in error.absolute_path) or "(the arguments)"
            rule = "/".join(str(p) for p in error.absolute_schema_path)
            raise UpstreamError(f"{said} of {name!r} whose arguments do not follow its schema: at {at}: "
                                f"{error.message} (schema #/{rule}); the call is not passed on", param="tools")
    return json.dumps(args, ensure_ascii=False, separators=(",", ":"))


def required(rules: OutputRules, calls: int, where: str) -> None:
    """A choice that ended without the call the request forced is reported too."""
    if rules.tools and rules.tool_choice not in ("auto", "none") and not calls:
        raise UpstreamError(f"{where} answered without the tool call the request required "
                            f"(tool_choice: {rules.tool_choice})", param="tool_choice")
