"""Upstream models, token mode: a front localchat whose models.toml names a model `upstream =` a
second localchat (`serve --peer`, with an API key) serves it through every route as if it were its
own — rendering and grammars here, tokens and decoding there. Driven with the official SDK; the
same request sent to the peer directly is the reference (same prompt tokens, same seed, same
output). A peer that dies mid-answer: an error event in the stream, then 503s."""

from __future__ import annotations

import json
import os
import re
import signal
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path

import httpx
import jsonschema
import openai
import pytest

from conftest import Server
from localchat.engine import wire
from localchat.engine.params import Constraint, Done, Generate, Media, Prepared, SamplingParams, Text, TokenLogprob, TopLogprob
from localchat.engine.remote.upstream import Peer, mapped, refusal
from localchat.errors import ContextOverflow, QueueFull, UpstreamError, UpstreamTimeout, UpstreamUnavailable
from localchat.families import FAMILIES
from localchat.models import ModelSpec
from localchat.models.upstream import _with_defaults
from test_tools import ASK, ONE_CALL, TOOLS, check_calls, nudge, stream_calls
from test_vision import ask, logprobs, png, uri
from localchat.devtools.tinymodels import write_tiny_mmproj, write_tiny_model
from localchat.devtools.tool_schemas import WEATHER

FAMILY = "qwen3-coder"  # tool calls in XML (<function=NAME><parameter=KEY>…), not plain JSON
KEY = "peer-secret"
LONG = {"messages": [{"role": "user", "content": "hello"}], "max_tokens": 1900, "ignore_eos": True, "stream": True}


def _tomls(folder: Path, model: Path) -> Path:
    embed, vision, mmproj = (model.with_name(f"tiny-{n}.gguf") for n in ("embed", "vision", "mmproj"))
    (folder / "peer.toml").write_text(f'default = "tiny-remote"\nmax_stop_strings = 2\n'  # (the front allows 16)
                                      f'[models.tiny-remote]\npath = "{model}"\n'
                                      "context_length = 2048\nparallel = 2\n"
                                      f'[models.tiny-embed]\npath = "{embed}"\ncontext_length = 512\n'
                                      f'[models.tiny-vision]\npath = "{vision}"\nmmproj = "{mmproj}"\n'
                                      "context_length = 512\n")
    return folder / "peer.toml"


def _front(folder: Path, peer: Server) -> Server:
    (folder / "front.toml").write_text(
        f'default = "remote"\n[models.remote]\nupstream = "{peer.url}/v1"\nupstream_model = "tiny-remote"\n'
        f'api_key = "{KEY}"\n[models.remote-embed]\nupstream = "{peer.url}"\nupstream_model = "tiny-embed"\n'
        f'api_key = "{KEY}"\n[models.remote-vision]\nupstream = "{peer.url}"\nupstream_model = "tiny-vision"\n'
        f'api_key = "{KEY}"\n')
    return Server(folder / "front.toml")


@pytest.fixture(scope="module")
def model_file(tmp_path_factory: pytest.TempPathFactory) -> Path:
    folder = tmp_path_factory.mktemp("upstream")
    write_tiny_model(folder / "tiny-embed.gguf", FAMILIES["llama3"], n_ctx=512, pooling=1)
    write_tiny_model(folder / "tiny-vision.gguf", FAMILIES["gemma"], n_ctx=512, extra=("<start_of_image>", "<end_of_image>"))
    write_tiny_mmproj(folder / "tiny-mmproj.gguf")
    return write_tiny_model(folder / "tiny-remote.gguf", FAMILIES[FAMILY], n_ctx=2048)


@pytest.fixture(scope="module")
def pair(model_file: Path, tmp_path_factory: pytest.TempPathFactory) -> Iterator[tuple[Server, Server]]:
    folder = tmp_path_factory.mktemp("pair")
    peer = Server(_tomls(folder, model_file), "--peer", "--api-key", KEY)
    try:
        front = _front(folder, peer)
    except BaseException:
        peer.stop()
        raise
    yield peer, front
    alive = front.proc.poll() is None and peer.proc.poll() is None
    front.stop()
    peer.stop()
    assert alive, "a server died during the tests"


def sdk(server: Server, key: str = "anything") -> openai.OpenAI:
    return openai.OpenAI(base_url=server.url + "/v1", api_key=key, max_retries=0, timeout=120)


def both(pair: tuple[Server, Server], **kwargs):
    """The same request through the front (model `remote`) and to the peer directly."""
    peer, front = pair
    through = sdk(front).chat.completions.create(model="remote", **kwargs)
    direct = sdk(peer, KEY).chat.completions.create(model="tiny-remote", **kwargs)
    return through, direct


def peer_busy(peer: Server) -> int:
    loaded = httpx.get(peer.url + "/health", timeout=10).json()["loaded"]
    return sum(m["busy_slots"] + m["queued"] for m in loaded)


def test_chat_is_the_peers(pair):
    through, direct = both(pair, messages=ASK, max_tokens=12, seed=7, logprobs=True, top_logprobs=2, stop=["zz"])
    assert through.model == "remote"
    assert through.choices[0].message.content == direct.choices[0].message.content
    ours, theirs = through.choices[0].logprobs.content, direct.choices[0].logprobs.content
    assert [(t.token, [a.token for a in t.top_logprobs]) for t in ours] == \
        [(t.token, [a.token for a in t.top_logprobs]) for t in theirs]
    # (the same up to a batch's rounding: one of the two reads its prompt from the cache)
    assert [t.logprob for t in ours] == pytest.approx([t.logprob for t in theirs], abs=1e-3)
    assert through.usage.prompt_tokens == direct.usage.prompt_tokens
    assert through.usage.completion_tokens == direct.usage.completion_tokens


def test_streaming_and_usage(pair):
    peer, front = pair
    r = sdk(front).chat.completions.create(model="remote", messages=ASK, max_tokens=12, seed=7)
    text, usage, finish = "", None, None
    for chunk in sdk(front).chat.completions.create(model="remote", messages=ASK, max_tokens=12, seed=7, stream=True,
                                                    stream_options={"include_usage": True}):
        usage = chunk.usage or usage
        for c in chunk.choices:
            text += c.delta.content or ""
            finish = c.finish_reason or finish
    assert text == r.choices[0].message.content and finish == r.choices[0].finish_reason
    assert usage.prompt_tokens == r.usage.prompt_tokens and usage.completion_tokens == r.usage.completion_tokens


def test_n_choices(pair):
    through, direct = both(pair, messages=ASK, max_tokens=8, seed=3, n=2)
    assert [c.index for c in through.choices] == [0, 1]
    assert [c.message.content for c in through.choices] == [c.message.content for c in direct.choices]
    assert through.usage.completion_tokens == direct.usage.completion_tokens


def test_json_schema(pair):
    fmt = {"type": "json_schema", "json_schema": {"name": "weather", "schema": WEATHER, "strict": True}}
    through, direct = both(pair, messages=ASK, response_format=fmt, max_tokens=ONE_CALL, seed=8,
                           logit_bias=nudge(FAMILY))
    assert through.choices[0].finish_reason == "stop"
    jsonschema.validate(json.loads(through.choices[0].message.content), WEATHER)
    assert through.choices[0].message.content == direct.choices[0].message.content


def test_forced_tool_call_in_xml_syntax(pair):
    """The front renders the tools into the prompt and builds the codec's grammar; the peer decodes under it."""
    kwargs = dict(messages=ASK, tools=TOOLS, tool_choice="required", max_tokens=ONE_CALL, seed=3,
                  parallel_tool_calls=False, logit_bias=nudge(FAMILY))
    through, direct = both(pair, **kwargs)
    assert through.choices[0].finish_reason == "tool_calls"
    check_calls(through.choices[0].message.tool_calls)
    assert [(c.function.name, c.function.arguments) for c in through.choices[0].message.tool_calls] == \
        [(c.function.name, c.function.arguments) for c in direct.choices[0].message.tool_calls]
    calls, content, finish = stream_calls(sdk(pair[1]), model="remote", **kwargs)
    assert finish == "tool_calls" and not content.strip()
    assert [(c["name"], c["arguments"]) for c in calls.values()] == \
        [(c.function.name, c.function.arguments) for c in through.choices[0].message.tool_calls]


def test_refusals_come_before_the_first_byte(pair):
    """Too long for the context (known here), or refused by the peer as it takes the request (its own limit)."""
    client = sdk(pair[1])
    with pytest.raises(openai.BadRequestError) as long:
        client.chat.completions.create(model="remote", messages=[{"role": "user", "content": "hello " * 3000}],
                                       stream=True)
    assert long.value.code == "context_length_exceeded"
    with pytest.raises(openai.BadRequestError) as stops:
        client.chat.completions.create(model="remote", messages=ASK, stop=["x", "y", "z"], stream=True)
    assert "at most 2 stop strings" in stops.value.message and stops.value.param == "stop"


def test_cancel_frees_the_peers_slot(pair):
    peer, front = pair
    with httpx.Client(base_url=front.url, timeout=60) as h:
        with h.stream("POST", "/v1/chat/completions", json={"model": "remote", **LONG}) as r:
            seen, busy = 0, 0
            for line in r.iter_lines():
                seen += line.startswith("data: ")
                if seen >= 5:
                    busy = peer_busy(peer)
                    break  # (leaving the loop closes the connection)
    assert busy >= 1, "the peer decodes the request"
    deadline = time.monotonic() + 10
    while peer_busy(peer) and time.monotonic() < deadline:
        time.sleep(0.1)
    assert peer_busy(peer) == 0, "the client left the front: the peer's slot is free"


def test_the_entry_shows_where_it_runs(pair):
    peer, front = pair
    card = next(m for m in httpx.get(front.url + "/v1/models").json()["data"] if m["id"] == "remote")
    assert card["file"] == "upstream" and card["upstream"] == peer.url + "/v1"
    assert card["family"] == FAMILY and "tools" in card["capabilities"]
    loaded = httpx.get(front.url + "/health").json()["loaded"]
    (remote,) = [m for m in loaded if m["name"] == "remote"]
    assert remote["upstream"]["state"] == "ok" and remote["upstream"]["model"] == "tiny-remote"
    assert remote["context_length"] == 2048 and remote["slots"] == 2


def test_embeddings(pair):
    peer, front = pair
    through = sdk(front).embeddings.create(model="remote-embed", input=["hello world", "the sea"])
    direct = sdk(peer, KEY).embeddings.create(model="tiny-embed", input=["hello world", "the sea"])
    assert [d.embedding for d in through.data] == [d.embedding for d in direct.data]
    assert through.usage.prompt_tokens == direct.usage.prompt_tokens


def test_an_image(pair):
    """Decoded here (Pillow), its pixels sent; the peer's projector reads them."""
    peer, front = pair
    body = ask("What is in the picture?", uri(png(1)), model="remote-vision")
    through = httpx.post(front.url + "/v1/chat/completions", json=body, timeout=120)
    direct = httpx.post(peer.url + "/v1/chat/completions", json={**body, "model": "tiny-vision"}, timeout=120,
                        headers={"Authorization": f"Bearer {KEY}"})
    assert through.status_code == 200, through.text
    assert through.json()["usage"]["prompt_tokens"] == direct.json()["usage"]["prompt_tokens"]
    assert [t for t, _ in logprobs(through.json())] == [t for t, _ in logprobs(direct.json())]
    card = next(m for m in httpx.get(front.url + "/v1/models").json()["data"] if m["id"] == "remote-vision")
    assert "vision" in card["capabilities"]


def test_the_cli_shows_it(pair):
    peer, front = pair
    toml = front.proc.args[-1]  # the front's models.toml (Server's --config, last)
    ps = subprocess.run([sys.executable, "-m", "localchat", "ps", "--url", front.url], capture_output=True, text=True)
    assert ps.returncode == 0 and f"runs at {peer.url}/v1 as tiny-remote: ok" in " ".join(ps.stdout.split())
    listed = subprocess.run([sys.executable, "-m", "localchat", "models", "--config", str(toml)],
                            capture_output=True, text=True, env={**os.environ, "COLUMNS": "200"})
    assert listed.returncode == 0 and re.search(rf"remote +{FAMILY} +completion tools ", listed.stdout)
    ends = [line.rstrip().rsplit("  ", 1)[-1] for line in listed.stdout.splitlines()]
    assert f"upstream {peer.url}/v1" in ends and f"upstream {peer.url}" in ends  # both entries
    shown = subprocess.run([sys.executable, "-m", "localchat", "models", "show", "remote", "--config", str(toml)],
                           capture_output=True, text=True)
    assert shown.returncode == 0 and FAMILY in shown.stdout and "token mode" in shown.stdout


def test_the_peer_routes_are_guarded(pair):
    peer, front = pair
    body = {"model": "tiny-remote", "segments": [["hello", True]]}
    assert httpx.post(peer.url + "/internal/engine/tokenize", json=body).status_code == 401  # no key
    ok = httpx.post(peer.url + "/internal/engine/tokenize", json=body, headers={"Authorization": f"Bearer {KEY}"})
    assert ok.status_code == 200 and ok.json()["tokens"]
    assert httpx.post(front.url + "/internal/engine/tokenize", json=body).status_code == 404  # not started --peer
    bad = httpx.post(peer.url + "/internal/engine/generate", headers={"Authorization": f"Bearer {KEY}"},
                     json={"model": "tiny-remote", "request": wire.encode(Generate([10**9], SamplingParams()))})
    assert bad.status_code == 400 and bad.json()["error"]["class"] == "InvalidRequest"  # outside the vocabulary


def test_a_peer_that_dies_mid_stream(model_file: Path, tmp_path_factory: pytest.TempPathFactory):
    folder = tmp_path_factory.mktemp("dying")
    peer = Server(_tomls(folder, model_file), "--peer", "--api-key", KEY)
    try:
        front = _front(folder, peer)
    except BaseException:
        peer.stop()
        raise
    try:
        client = sdk(front)
        stream = client.chat.completions.create(model="remote", max_tokens=LONG["max_tokens"],
                                                messages=LONG["messages"], stream=True, extra_body={"ignore_eos": True})
        got = iter(stream)
        for _ in range(3):
            next(got)
        peer.proc.send_signal(signal.SIGKILL)
        with pytest.raises(openai.APIError) as failed:
            for _ in got:
                pass
        assert "upstream" in str(failed.value.message)
        with pytest.raises(openai.APIStatusError) as refused:
            client.chat.completions.create(model="remote", messages=ASK, max_tokens=4)
        assert refused.value.status_code == 503 and refused.value.body["code"] == "upstream_unavailable"
        r = httpx.post(front.url + "/v1/messages", json={"model": "remote", "max_tokens": 4, "messages": ASK})
        assert r.status_code == 503 and r.json()["type"] == "error"  # in Anthropic's shape
        (remote,) = httpx.get(front.url + "/health", timeout=30).json()["loaded"]
        assert remote["upstream"]["state"] == "failing"
        assert front.proc.poll() is None, "the front lives on"
    finally:
        front.stop()
        peer.stop()


def test_a_default_upstream_down_at_start_up_then_up(model_file: Path, tmp_path_factory: pytest.TempPathFactory):
    """A laptop whose GPU box is off still starts: it serves its other models, answers 503 for the
    upstream's, and serves that one too once the peer is up."""
    import conftest

    folder = tmp_path_factory.mktemp("late")
    port = conftest.free_port()
    (folder / "front.toml").write_text(
        f'default = "remote"\n[models.remote]\nupstream = "http://127.0.0.1:{port}/v1"\nupstream_model = "tiny-remote"\n'
        f'api_key = "{KEY}"\n[models.local]\npath = "{model_file}"\ncontext_length = 2048\n')
    front = Server(folder / "front.toml")
    peer = None
    try:
        assert "cannot be reached" in front.output() and "not loaded yet" in front.output()
        with pytest.raises(openai.APIStatusError) as refused:
            sdk(front).chat.completions.create(model="remote", messages=ASK, max_tokens=2)
        assert refused.value.status_code == 503 and refused.value.body["code"] == "upstream_unavailable"
        assert sdk(front).chat.completions.create(model="local", messages=ASK, max_tokens=2).choices
        peer = Server(_tomls(folder, model_file), "--peer", "--api-key", KEY, port=port)  # where the front looks
        answer = sdk(front).chat.completions.create(model="remote", messages=ASK, max_tokens=2)
        assert answer.model == "remote" and answer.choices[0].finish_reason in ("length", "stop")
        assert front.proc.poll() is None
    finally:
        front.stop()
        if peer is not None:
            peer.stop()


# -- the wire and the link's errors, without a server ---------------------------------------------

@pytest.mark.fast
def test_the_wire_round_trips_a_request_and_its_events():
    ask = Generate([1, 2, 3], SamplingParams(max_tokens=5, logit_bias={5: 1.5}, stop=("a",)), frozenset({7, 3}),
                   Constraint('root ::= "a"', ("x",), (("r", 'root ::= "b"'),)), n=2, adapters=((0, 1.0),),
                   media=(Media(1, "image", b"\x00\x01\x02", id="h", width=1, height=1),))
    assert wire.decode(json.loads(json.dumps(wire.encode(ask))), Generate) == ask
    events = [Prepared(3), Text("hi", 1, (TokenLogprob("a", float("-inf"), [97], [TopLogprob("b", -1.0, [98])]),), 2),
              Done("stop", 3, 2, 0, 1, matched_stop="a")]
    assert [wire.decode_item(json.loads(json.dumps(wire.encode(e)))) for e in events] == events
    with pytest.raises(wire.WireError, match="tokens.1"):
        wire.decode({"tokens": [1, "2"], "params": {}}, Generate)
    with pytest.raises(wire.WireError):
        wire.decode_item({"$": "Generate"})  # not an event: nothing but events is built from a stream


@pytest.mark.fast
def test_errors_cross_by_class_and_the_link_maps_once():
    for exc in (QueueFull("busy"), ContextOverflow("long", param="messages")):
        back = wire.decode_error(json.loads(json.dumps(wire.encode_error(exc))))
        assert type(back) is type(exc) and back.status == exc.status and back.param == exc.param
    odd = wire.decode_error({"class": "os.system", "message": "x", "status": 418})
    assert type(odd).__name__ == "LocalchatError" and odd.status == 418
    peer = Peer("http://127.0.0.1:9/v1", "m", timeout=3)
    request = httpx.Request("POST", peer.route("generate"))
    assert type(mapped(peer, httpx.ConnectError("refused", request=request))) is UpstreamUnavailable
    assert type(mapped(peer, httpx.ReadTimeout("slow", request=request))) is UpstreamTimeout
    assert type(mapped(peer, httpx.RemoteProtocolError("cut", request=request))) is UpstreamError
    assert [e.status for e in (UpstreamError("x"), UpstreamUnavailable("x"), UpstreamTimeout("x"))] == [502, 503, 504]
    assert "serve --peer" in refusal(peer, 404, b'{"error": {"message": "no route"}}').message
    crashed = refusal(peer, 500, b'{"error": {"message": "internal error: boom", "type": "server_error"}}')
    assert type(crashed) is UpstreamError and crashed.status == 502 and "boom" in crashed.message
    assert type(refusal(peer, 429, json.dumps({"error": wire.encode_error(QueueFull("q"))}).encode())) is QueueFull
    assert peer.route("open") == "http://127.0.0.1:9/internal/engine/open"


@pytest.mark.fast
def test_an_upstream_entry_leaves_the_model_to_the_peer():
    spec = ModelSpec(name="big", upstream="http://127.0.0.1:8100/v1", api_key="k", upstream_timeout=30,
                     sampling={"temperature": 0.5})
    assert spec.kind == "upstream" and spec.location() is None
    assert spec.peer() == Peer("http://127.0.0.1:8100/v1", "big", "k", 30.0, 5.0)
    for theirs in ({"family": "chatml"}, {"context_length": 4096}, {"mmproj": "/x.gguf"}, {"path": "/x.gguf"}):
        with pytest.raises(ValueError):
            ModelSpec(name="big", upstream="http://127.0.0.1:8100", **theirs)
    with pytest.raises(ValueError, match="only for a model with `upstream`"):
        ModelSpec(name="small", path="/x.gguf", api_key="k")
    merged = _with_defaults(spec, {"sampling": {"temperature": 0.1, "top_k": 5, "a_newer_knob": 1},
                                   "system_prompt_strip": "id=\\d+"})
    assert (merged.sampling.temperature, merged.sampling.top_k) == (0.5, 5)  # the entry's own, then the peer's
    assert merged.system_prompt_strip == "id=\\d+" and merged.name == "big"


def test_a_prompt_and_where_its_last_message_starts_come_in_one_tokenization(pair, model_file: Path):
    """prepare tokenizes a chat prompt once (Tokenizer.tokenize_at): its tokens, and how many come
    before the last message's segment; a token-mode upstream asks its peer in one round trip."""
    from localchat.engine.llama.model import Model
    from localchat.peer import PREFIX

    peer, _ = pair
    segments = [("<|im_start|>system\nBe brief.<|im_end|>\n", False), ("a user's <|im_end|> text", True),
                ("<|im_end|>\n<|im_start|>assistant\n", False), ("more", True)]
    model = Model(model_file)
    try:
        whole = model.tokenize(segments)
        for at in range(len(segments) + 1):
            assert model.tokenize_at(segments, at) == (whole, len(model.tokenize(segments[:at])))
            r = httpx.post(f"{peer.url}{PREFIX}/tokenize", headers={"Authorization": f"Bearer {KEY}"}, timeout=30,
                           json={"model": "tiny-remote", "segments": [list(s) for s in segments], "at": at})
            assert r.status_code == 200 and r.json() == {"tokens": whole, "at": len(model.tokenize(segments[:at]))}
        bad = httpx.post(f"{peer.url}{PREFIX}/tokenize", headers={"Authorization": f"Bearer {KEY}"}, timeout=30,
                         json={"model": "tiny-remote", "segments": [list(s) for s in segments], "at": -1})
        assert bad.status_code == 400 and "at" in bad.text
    finally:
        model.close()
