"""Upstream models, chat mode: a front localchat whose models.toml names a model `upstream =` an
OpenAI-compatible engine with `upstream_mode = "chat"` sends it OpenAI chat requests and serves
the answers through every protocol. The engine here is a recording fake (http.server on loopback,
scripted by the last user message): the tests check what the front SENDS (model, messages, tools,
tool_choice, response_format, stream, max_tokens, Authorization) and what the official clients get
back — text, streamed text, a valid tool call, an invalid one reported (502, never passed on),
the upstream's 500 → 502, a refused connection → 503, silence → 504, and a client that leaves
closing the upstream request."""

from __future__ import annotations

import base64
import json
import subprocess
import sys
import threading
import time
from collections.abc import Iterator
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any

import anthropic
import httpx
import openai
import pytest

from conftest import Server, free_port
from localchat.engine.params import CallDelta, Thought
from localchat.errors import UpstreamError
from localchat.generation.upstream_chat import CallChecker, check_call
from localchat.neutral import OutputRules, ReasoningDelta, ToolCallArguments, ToolCallStart, ToolSpec
from localchat.devtools.tool_schemas import WEATHER

pytestmark = pytest.mark.fast  # no model is loaded: the engine is the fake

KEY = "upstream-secret"
UPSTREAM_MODEL = "big-model"
TOOLS = [{"type": "function", "function": {"name": "get_weather", "description": "The weather in a city",
                                           "parameters": WEATHER}}]
RULES = OutputRules(tools=(ToolSpec("get_weather", None, WEATHER),))


# -- the recording fake OpenAI server -------------------------------------------------------------

def _chunk(delta: dict[str, Any] | None = None, finish: str | None = None, usage: dict[str, int] | None = None,
           index: int = 0) -> dict[str, Any]:
    choices = [] if delta is None else [{"index": index, "delta": delta, "finish_reason": finish}]
    return {"id": "chatcmpl-1", "object": "chat.completion.chunk", "model": UPSTREAM_MODEL, "choices": choices,
            **({"usage": usage} if usage else {})}


def _call(name: str, fragments: list[str]) -> list[dict[str, Any]]:
    first = {"role": "assistant", "content": None, "tool_calls": [
        {"index": 0, "id": "call_up", "type": "function", "function": {"name": name, "arguments": ""}}]}
    rest = [{"tool_calls": [{"index": 0, "function": {"arguments": f}}]} for f in fragments]
    return [_chunk(first)] + [_chunk(d) for d in rest] + [_chunk({}, "tool_calls")]


USAGE = {"prompt_tokens": 11, "completion_tokens": 7, "total_tokens": 18}
SCRIPTS: dict[str, list[dict[str, Any]]] = {
    "text": [_chunk({"role": "assistant", "content": ""}), _chunk({"content": "Hello"}), _chunk({"content": " world"}),
             _chunk({}, "stop")],
    "think": [_chunk({"role": "assistant", "reasoning_content": "Let me see."}), _chunk({"content": "42"}),
              _chunk({}, "stop")],
    "call": _call("get_weather", ['{"city": ', '"Paris", "days": 2}']),
    "bad": _call("get_weather", ['{"city": "Paris", "days": 9}']),  # maximum 7
    "broken": _call("get_weather", ['{"city": "Par']),  # not JSON
    "ghost": _call("launch_missiles", ['{}']),  # a tool the request did not declare
}


class Fake:
    """Records every request (method, path, headers, JSON body); answers chat requests by the
    script its last user message names."""

    def __init__(self) -> None:
        self.requests: list[dict[str, Any]] = []
        self.closed = threading.Event()  # the slow answer's client went away
        fake = self

        class Handler(BaseHTTPRequestHandler):
            def log_message(self, *args: Any) -> None:
                pass

            def _json(self, status: int, data: Any) -> None:
                body = json.dumps(data).encode()
                self.send_response(status)
                self.send_header("Content-Type", "application/json")
                self.send_header("Content-Length", str(len(body)))
                self.end_headers()
                self.wfile.write(body)

            def do_GET(self) -> None:
                fake.requests.append({"method": "GET", "path": self.path, "headers": dict(self.headers)})
                if self.path == "/v1/models":
                    self._json(200, {"object": "list", "data": [{"id": UPSTREAM_MODEL, "object": "model",
                                                                 "owned_by": "vllm", "max_model_len": 32768}]})
                else:
                    self._json(404, {"error": {"message": "not found"}})

            def do_POST(self) -> None:
                body = json.loads(self.rfile.read(int(self.headers.get("Content-Length") or 0)) or b"{}")
                fake.requests.append({"method": "POST", "path": self.path, "headers": dict(self.headers), "body": body})
                if self.path != "/v1/chat/completions":
                    return self._json(404, {"error": {"message": "not found"}})
                last = next((m for m in reversed(body.get("messages", [])) if m["role"] == "user"), {})
                content = last.get("content")
                script = (content if isinstance(content, str) else content[0]["text"]).split()[0]
                if script == "500":
                    return self._json(500, {"error": {"message": "CUDA error: out of memory", "code": 500}})
                if script == "silent":
                    time.sleep(3)
                    return self._json(500, {"error": {"message": "too late"}})
                self.send_response(200)
                self.send_header("Content-Type", "text/event-stream")
                self.end_headers()
                try:
                    if script == "slow":
                        for _ in range(400):
                            self._send(_chunk({"content": "tick "}))
                            time.sleep(0.05)
                        return
                    if script == "cut":  # broken off mid-answer: no finish, no [DONE]
                        return self._send(_chunk({"content": "Hel"}))
                    for chunk in SCRIPTS[script]:
                        self._send(chunk)
                    self._send(_chunk(usage=USAGE))
                    self.wfile.write(b"data: [DONE]\n\n")
                except (BrokenPipeError, ConnectionResetError):
                    fake.closed.set()

            def _send(self, chunk: dict[str, Any]) -> None:
                self.wfile.write(b"data: " + json.dumps(chunk).encode() + b"\n\n")
                self.wfile.flush()

        self.server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.server.daemon_threads = True
        self.url = f"http://127.0.0.1:{self.server.server_address[1]}"
        self.thread = threading.Thread(target=self.server.serve_forever, daemon=True)
        self.thread.start()

    def last(self) -> dict[str, Any]:
        return next(r for r in reversed(self.requests) if r["method"] == "POST")

    def stop(self) -> None:
        self.server.shutdown()
        self.server.server_close()


@pytest.fixture(scope="module")
def fake() -> Iterator[Fake]:
    f = Fake()
    yield f
    f.stop()


@pytest.fixture(scope="module")
def front(fake: Fake, tmp_path_factory: pytest.TempPathFactory) -> Iterator[Server]:
    folder = tmp_path_factory.mktemp("chatmode")
    (folder / "front.toml").write_text(
        f'default = "chatty"\n'
        f'[models.chatty]\nupstream = "{fake.url}/v1"\nupstream_mode = "chat"\nupstream_model = "{UPSTREAM_MODEL}"\n'
        f'api_key = "{KEY}"\nsampling = {{ temperature = 0.3 }}\n'
        f'[models.sleepy]\nupstream = "{fake.url}"\nupstream_mode = "chat"\nupstream_model = "{UPSTREAM_MODEL}"\n'
        f'upstream_timeout = 1\n'
        f'[models.gone]\nupstream = "http://127.0.0.1:{free_port()}/v1"\nupstream_mode = "chat"\n')
    s = Server(folder / "front.toml")
    yield s
    alive = s.proc.poll() is None
    s.stop()
    assert alive, "the front died during the tests"


def sdk(front: Server) -> openai.OpenAI:
    return openai.OpenAI(base_url=front.url + "/v1", api_key="anything", max_retries=0, timeout=60)


def ask(text: str) -> list[dict[str, Any]]:
    return [{"role": "system", "content": "Be brief."}, {"role": "user", "content": text}]


# -- what is sent, what comes back ----------------------------------------------------------------

def test_text_and_what_is_sent(front, fake):
    schema = {"type": "object", "properties": {"a": {"type": "integer"}}}
    r = sdk(front).chat.completions.create(model="chatty", messages=ask("text please"), max_tokens=20, stop=["zz"],
                                           seed=3, response_format={"type": "json_schema", "json_schema": {
                                               "name": "x", "schema": schema}})
    assert r.model == "chatty"
    assert r.choices[0].message.content == "Hello world"
    assert r.choices[0].finish_reason == "stop"
    assert (r.usage.prompt_tokens, r.usage.completion_tokens) == (11, 7)
    sent = fake.last()
    assert sent["path"] == "/v1/chat/completions"
    assert sent["headers"]["Authorization"] == f"Bearer {KEY}"
    body = sent["body"]
    assert body["model"] == UPSTREAM_MODEL
    assert body["messages"] == ask("text please")
    assert body["stream"] is True and body["stream_options"] == {"include_usage": True}
    assert body["max_tokens"] == 20 and body["stop"] == ["zz"] and body["seed"] == 3
    assert body["temperature"] == 0.3  # the entry's sampling; localchat's own defaults are not sent
    assert "top_k" not in body and "min_p" not in body and "repetition_stop" not in body
    assert body["response_format"] == {"type": "json_schema", "json_schema": {"name": "output", "schema": schema,
                                                                              "strict": False}}
    assert "tools" not in body and "n" not in body


def test_images_and_unasked_fields(front, fake):
    """An image goes as a data URI (one given by URL is read here, by this server's rules);
    max_tokens and sampling fields nobody set are not sent; parallel_tool_calls false is."""
    png = base64.b64encode(b"\x89PNG\r\n\x1a\n" + b"\0" * 16).decode()
    content = [{"type": "text", "text": "text with pictures"},
               {"type": "image_url", "image_url": {"url": f"data:image/png;base64,{png}"}}]
    r = sdk(front).chat.completions.create(model="sleepy", messages=[{"role": "user", "content": content}],
                                           tools=TOOLS, parallel_tool_calls=False)
    assert r.choices[0].message.content == "Hello world"
    body = fake.last()["body"]
    assert body["messages"] == [{"role": "user", "content": content}]
    assert "max_tokens" not in body and "temperature" not in body and body["parallel_tool_calls"] is False
    assert "Authorization" not in fake.last()["headers"]  # (no api_key on this entry)
    sent = len(fake.requests)
    with pytest.raises(openai.BadRequestError, match="fetch_images"):  # this server's rule, not the upstream's
        sdk(front).chat.completions.create(model="sleepy", messages=[{"role": "user", "content": [
            {"type": "text", "text": "text"},
            {"type": "image_url", "image_url": {"url": "http://example.com/a.png"}}]}])
    assert len(fake.requests) == sent


def test_streamed_text_and_reasoning(front):
    chunks = list(sdk(front).chat.completions.create(model="chatty", messages=ask("text"), stream=True,
                                                     stream_options={"include_usage": True}))
    text = "".join(c.choices[0].delta.content or "" for c in chunks if c.choices)
    assert text == "Hello world"
    assert [c.choices[0].finish_reason for c in chunks if c.choices and c.choices[0].finish_reason] == ["stop"]
    assert chunks[-1].usage.completion_tokens == 7
    r = sdk(front).chat.completions.create(model="chatty", messages=ask("think"))
    assert r.choices[0].message.content == "42"
    assert r.choices[0].message.model_extra.get("reasoning_content") == "Let me see."


def test_valid_tool_call(front, fake):
    r = sdk(front).chat.completions.create(model="chatty", messages=ask("call"), tools=TOOLS,
                                           tool_choice={"type": "function", "function": {"name": "get_weather"}})
    body = fake.last()["body"]
    assert body["tools"] == [{"type": "function", "function": {"name": "get_weather",
                                                               "description": "The weather in a city",
                                                               "parameters": WEATHER}}]
    assert body["tool_choice"] == {"type": "function", "function": {"name": "get_weather"}}
    call = r.choices[0].message.tool_calls[0]
    assert call.function.name == "get_weather"
    assert json.loads(call.function.arguments) == {"city": "Paris", "days": 2}
    assert r.choices[0].finish_reason == "tool_calls"
    # streamed: the call comes whole, once checked
    chunks = list(sdk(front).chat.completions.create(model="chatty", messages=ask("call"), tools=TOOLS, stream=True))
    calls = [t for c in chunks if c.choices for t in c.choices[0].delta.tool_calls or ()]
    assert calls[0].function.name == "get_weather"
    assert json.loads("".join(t.function.arguments or "" for t in calls)) == {"city": "Paris", "days": 2}
    # the call goes back to the upstream in the next turn, with its result
    history = ask("text") + [{"role": "assistant", "content": None, "tool_calls": [
        {"id": call.id, "type": "function",
         "function": {"name": "get_weather", "arguments": call.function.arguments}}]},
        {"role": "tool", "tool_call_id": call.id, "content": "sunny"}]
    sdk(front).chat.completions.create(model="chatty", messages=history, tools=TOOLS)
    sent = fake.last()["body"]["messages"]
    assert sent[2]["tool_calls"][0]["id"] == call.id and sent[2]["tool_calls"][0]["function"]["name"] == "get_weather"
    assert json.loads(sent[2]["tool_calls"][0]["function"]["arguments"]) == {"city": "Paris", "days": 2}
    assert sent[3] == {"role": "tool", "tool_call_id": call.id, "content": "sunny"}


@pytest.mark.parametrize("script, words", [("bad", ["get_weather", "days", "maximum"]),
                                           ("broken", ["get_weather", "not JSON"]),
                                           ("ghost", ["launch_missiles", "did not declare"])])
def test_invalid_tool_call_is_reported(front, script, words):
    with pytest.raises(openai.APIStatusError) as caught:
        sdk(front).chat.completions.create(model="chatty", messages=ask(script), tools=TOOLS)
    assert caught.value.status_code == 502
    error = caught.value.body
    assert error["code"] == "upstream_error"
    assert all(w in error["message"] for w in words), error["message"]
    # streamed: an error event, never the call
    with pytest.raises(openai.APIError) as caught:
        for chunk in sdk(front).chat.completions.create(model="chatty", messages=ask(script), tools=TOOLS, stream=True):
            assert not (chunk.choices and chunk.choices[0].delta.tool_calls)
    assert "not passed on" in str(caught.value) or "declare" in str(caught.value)


def test_anthropic_messages_untouched(front, fake):
    client = anthropic.Anthropic(base_url=front.url, api_key="anything", max_retries=0, timeout=60)
    m = client.messages.create(model="chatty", max_tokens=64, system="Be brief.",
                               messages=[{"role": "user", "content": "text"}])
    assert [b.type for b in m.content] == ["text"] and m.content[0].text == "Hello world"
    assert m.usage.output_tokens == 7
    assert fake.last()["body"]["messages"] == ask("text")
    m = client.messages.create(model="chatty", max_tokens=64, messages=[{"role": "user", "content": "call"}],
                               tools=[{"name": "get_weather", "input_schema": WEATHER}])
    use = next(b for b in m.content if b.type == "tool_use")
    assert (use.name, use.input) == ("get_weather", {"city": "Paris", "days": 2})
    assert m.stop_reason == "tool_use"
    with pytest.raises(anthropic.APIStatusError) as caught:
        client.messages.create(model="chatty", max_tokens=64, messages=[{"role": "user", "content": "bad"}],
                               tools=[{"name": "get_weather", "input_schema": WEATHER}])
    assert caught.value.status_code == 502


# -- failures, mapped once --------------------------------------------------------------------------

def test_upstream_500_is_502(front):
    with pytest.raises(openai.APIStatusError) as caught:
        sdk(front).chat.completions.create(model="chatty", messages=ask("500"), stream=True)
    assert caught.value.status_code == 502
    assert "out of memory" in caught.value.body["message"]
    with pytest.raises(anthropic.APIStatusError) as caught:
        anthropic.Anthropic(base_url=front.url, api_key="x", max_retries=0).messages.create(
            model="chatty", max_tokens=8, messages=[{"role": "user", "content": "500"}])
    assert caught.value.status_code == 502
    assert caught.value.body["error"]["type"] == "api_error"


def test_broken_off_is_an_error(front):
    with pytest.raises(openai.APIStatusError) as caught:
        sdk(front).chat.completions.create(model="chatty", messages=ask("cut"))
    assert caught.value.status_code == 502 and "before choice 0 finished" in caught.value.body["message"]
    with pytest.raises(openai.APIError, match="before choice 0 finished"):
        for _ in sdk(front).chat.completions.create(model="chatty", messages=ask("cut"), stream=True):
            pass


def test_refused_is_503_and_silence_504(front):
    with pytest.raises(openai.APIStatusError) as caught:
        sdk(front).chat.completions.create(model="gone", messages=ask("text"))
    assert caught.value.status_code == 503 and caught.value.body["code"] == "upstream_unavailable"
    with pytest.raises(openai.APIStatusError) as caught:
        sdk(front).chat.completions.create(model="sleepy", messages=ask("silent"))
    assert caught.value.status_code == 504 and caught.value.body["code"] == "upstream_timeout"


def test_cancel_closes_the_upstream_request(front, fake):
    fake.closed.clear()
    body = {"model": "chatty", "messages": ask("slow"), "stream": True}
    with httpx.stream("POST", front.url + "/v1/chat/completions", json=body, timeout=30) as r:
        assert r.status_code == 200
        for line in r.iter_lines():
            if "tick" in line:
                break
    assert fake.closed.wait(10), "the upstream request stayed open after the client left"


def test_what_needs_tokens_is_refused(front):
    with pytest.raises(openai.BadRequestError) as caught:
        sdk(front).completions.create(model="chatty", prompt="once upon")
    assert "chat mode" in caught.value.body["message"]
    with pytest.raises(openai.BadRequestError) as caught:
        sdk(front).chat.completions.create(model="chatty", messages=ask("text"), logprobs=True)
    assert "chat mode" in caught.value.body["message"]
    with pytest.raises(openai.BadRequestError):
        sdk(front).embeddings.create(model="chatty", input="hello")
    for route, body in (("/tokenize", {"model": "chatty", "content": "hello"}),
                        ("/apply-template", {"model": "chatty", "messages": ask("text")}),
                        ("/v1/messages/count_tokens", {"model": "chatty",
                                                       "messages": [{"role": "user", "content": "x"}]})):
        r = httpx.post(front.url + route, json=body, timeout=30)
        assert r.status_code == 400, (route, r.text)
        assert "chat mode" in r.text, (route, r.text)


def test_responses_and_ollama(front):
    r = sdk(front).responses.create(model="chatty", input="text")
    assert r.output_text == "Hello world"
    r = sdk(front).responses.create(model="chatty", input="call", tools=[
        {"type": "function", "name": "get_weather", "parameters": WEATHER}])
    call = next(o for o in r.output if o.type == "function_call")
    assert (call.name, json.loads(call.arguments)) == ("get_weather", {"city": "Paris", "days": 2})
    r = httpx.post(front.url + "/api/chat", json={"model": "chatty", "stream": False,
                                                  "messages": [{"role": "user", "content": "text"}]}, timeout=30)
    assert r.status_code == 200 and r.json()["message"]["content"] == "Hello world"


# -- status: /v1/models, /health, localchat ps --------------------------------------------------------

def test_status(front, fake):
    sdk(front).chat.completions.create(model="chatty", messages=ask("text"))  # loaded
    listed = {m["id"]: m for m in httpx.get(front.url + "/v1/models", timeout=30).json()["data"]}
    assert listed["chatty"]["file"] == "upstream" and listed["chatty"]["capabilities"] == ["completion", "tools"]
    assert listed["gone"]["file"] == "unreachable"
    before = sum(r["path"] == "/v1/models" for r in fake.requests)
    health = httpx.get(front.url + "/health", timeout=30).json()
    card = next(m for m in health["loaded"] if m["name"] == "chatty")
    assert card["upstream"]["mode"] == "chat" and card["upstream"]["state"] == "ok"
    assert card["context_length"] == 32768 and card["family"] == "upstream"
    assert sum(r["path"] == "/v1/models" for r in fake.requests) > before  # the health probe
    out = subprocess.run([sys.executable, "-m", "localchat", "ps", "--url", front.url], capture_output=True, text=True,
                         timeout=60)
    assert out.returncode == 0, out.stderr
    assert "chatty" in out.stdout and "(chat mode)" in out.stdout


# -- the checks themselves ------------------------------------------------------------------------

def test_check_call():
    assert json.loads(check_call(RULES, "get_weather", '{"city": "Oslo", "days": 1}', "up")) == {"city": "Oslo",
                                                                                                 "days": 1}
    with pytest.raises(UpstreamError, match=r"at days: .*schema #/properties/days/minimum"):
        check_call(RULES, "get_weather", '{"city": "Oslo", "days": 0}', "up")
    with pytest.raises(UpstreamError, match="not a JSON object"):
        check_call(RULES, "get_weather", "[1]", "up")
    with pytest.raises(UpstreamError, match="tool_choice is none"):
        check_call(OutputRules(tools=RULES.tools, tool_choice="none"), "get_weather", "{}", "up")


def test_checker_holds_calls_until_the_end():
    checker = CallChecker(RULES, "up")
    assert checker.take(Thought("hm")) == [ReasoningDelta("hm")]
    assert checker.take(CallDelta(0, "c", "get_weather", '{"city": "Oslo",')) == []
    assert checker.take(CallDelta(0, None, None, ' "days": 3}')) == []
    start, args = checker.finish()
    assert isinstance(start, ToolCallStart) and start.name == "get_weather"
    assert isinstance(args, ToolCallArguments) and json.loads(args.fragment) == {"city": "Oslo", "days": 3}
    with pytest.raises(UpstreamError, match="required"):
        CallChecker(OutputRules(tools=RULES.tools, tool_choice="required"), "up").finish()


def test_a_call_named_in_another_case_is_the_declared_tool():
    checker = CallChecker(RULES, "up")
    checker.take(CallDelta(0, "c", "Get-Weather", '{"city": "Oslo", "days": 3}'))
    start, _ = checker.finish()
    assert start.name == "get_weather"
    checker = CallChecker(RULES, "up")
    checker.take(CallDelta(0, "c", "get_weather_now", "{}"))
    with pytest.raises(UpstreamError, match="did not declare"):
        checker.finish()
