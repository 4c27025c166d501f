"""`scripts/soak --agents`' pieces without a server: the recorded agent sessions in
tests/fixtures/agents/ (each loads, has a cold first request and follow-ups in its client's
protocol that share its prefix, no machine's path left in it), the scrubbing that made them, the
bodies as the soak sends them, and how it reads each protocol's stream."""

from __future__ import annotations

import importlib.util
import json
import re
import sys
from pathlib import Path

import httpx
import pytest

pytestmark = pytest.mark.fast  # file reads and parsing only

ROOT = Path(__file__).resolve().parent.parent
_spec = importlib.util.spec_from_file_location("soak_script", ROOT / "scripts" / "soak.py")
soak = importlib.util.module_from_spec(_spec)
sys.modules["soak_script"] = soak
_spec.loader.exec_module(soak)

PROTOCOL = {"claude": "/v1/messages", "codex": "/v1/responses"}  # the others: chat completions
CLIENTS = ("claude", "codex", "opencode", "qwen", "pi", "cline", "cn", "aider")  # scripts/acceptance's
FIXTURES = soak.load_fixtures()


def test_there_is_a_fixture_per_client():
    names = [f.client for f in FIXTURES]
    assert sorted(names) == sorted(CLIENTS)


@pytest.mark.parametrize("fixture", FIXTURES, ids=[f.client for f in FIXTURES])
def test_a_fixture_is_a_cold_request_and_its_follow_ups(fixture):
    assert len(fixture.requests) >= 2, "a first request and at least one follow-up"
    routes = {route for route, _ in fixture.requests}
    assert routes == {PROTOCOL.get(fixture.client, "/v1/chat/completions")}
    first = fixture.requests[0][1]
    key = {"/v1/messages": "messages", "/v1/responses": "input"}.get(fixture.requests[0][0], "messages")
    for _, body in fixture.requests[1:]:
        assert isinstance(body[key], list) and body[key], "a conversation"
        # the follow-ups continue the first request's conversation: the same tools, system prompt and first turn
        assert body.get("tools") == first.get("tools")
        assert body.get("system") == first.get("system") and body.get("instructions") == first.get("instructions")
        assert body[key][0] == first[key][0]
    assert len(json.dumps(fixture.requests[-1][1])) >= len(json.dumps(first)), "the last turn holds the first"


@pytest.mark.parametrize("fixture", FIXTURES, ids=[f.client for f in FIXTURES])
def test_no_path_of_the_recording_machine_is_left(fixture):
    text = json.dumps([body for _, body in fixture.requests], ensure_ascii=False)
    for gone in ("/acceptance/runs/", "-root--", "127.0.0.1:"):
        assert gone not in text, gone
    # an absolute /tmp/ or /root/ path (Qwen Code's prompt names its own relative `.qwen/tmp/`)
    assert not re.search(r"(?<![\w.~-])/(?:tmp|root)/", text)
    assert not re.search(r"\b(?:work|home)-[a-z0-9_]{8}\b", text)


def test_scrub_replaces_each_folder_the_same_way_everywhere():
    work = "/root/.cache/localchat/acceptance/runs/work-ab12cd_9"
    home = "/root/.cache/localchat/acceptance/runs/home-zz99yy00"
    text = (f"cwd {work}\nmemory at `{home}/.claude/projects/{soak.mangled(work)}/memory/`; folder work-ab12cd_9; "
            f"base http://127.0.0.1:54321/v1; log /tmp/localchat-x1/a.txt; rg /root/.cache/bin/rg")
    out = soak.scrub(text)
    assert out == ("cwd /home/user/project\nmemory at `/home/user/.claude/projects/-home-user-project/memory/`; "
                   "folder project; base http://localhost:8080/v1; log /home/user/scratch/a.txt; "
                   "rg /home/user/.cache/bin/rg")
    assert soak.scrub(text) == out


def test_bodies_as_the_soak_sends_them():
    chat = soak.prepared("/v1/chat/completions", {"model": "x", "stream": True, "max_tokens": 4096,
                                                  "messages": [{"role": "user", "content": "hi"}]})
    assert chat["model"] == soak.AGENT_MODEL and chat["max_tokens"] == soak.AGENT_MAX_TOKENS
    assert chat["stream_options"] == {"include_usage": True}
    assert soak.prepared("/v1/chat/completions", {"max_tokens": 10, "messages": []})["max_tokens"] == 10
    assert "stream_options" not in soak.prepared("/v1/chat/completions", {"messages": []})
    responses = soak.prepared("/v1/responses", {"stream": True, "input": []})
    assert responses["max_output_tokens"] == soak.AGENT_MAX_TOKENS and "max_tokens" not in responses
    assert soak.prepared("/v1/messages", {"max_tokens": 4096, "messages": []})["max_tokens"] == soak.AGENT_MAX_TOKENS


def test_eight_distinct_sessions_from_fewer_fixtures():
    assert [s.client for s in soak.sessions_of(FIXTURES, 8)] == [f.client for f in FIXTURES]
    three = [f for f in FIXTURES if f.client in ("aider", "claude", "cline")]  # aider's prompt names no folder
    sessions = soak.sessions_of(three, 8)
    assert [s.client for s in sessions] == ["aider", "claude", "cline", "claude-2", "cline-2", "claude-3", "cline-3",
                                            "claude-4"]
    firsts = {json.dumps(s.requests[0][1], sort_keys=True) for s in sessions}
    assert len(firsts) == 8, "every session's first prompt is its own"


def stream_of(*events: str) -> httpx.Response:
    return httpx.Response(200, content="".join(events).encode())


def read(route: str, response: httpx.Response, hang_up_after: int | None = None) -> soak.Turn:
    t = soak.Turn("s", 1)
    soak.read_stream(route, response, t, hang_up_after)
    return t


CHAT = ['data: {"choices":[{"index":0,"delta":{"role":"assistant"}}]}\n\n', ": keepalive\n\n",
        'data: {"choices":[{"index":0,"delta":{"content":"a"}}]}\n\n',
        'data: {"choices":[{"index":0,"delta":{"content":"b"},"finish_reason":"length"}]}\n\n',
        'data: {"choices":[],"usage":{"prompt_tokens":1000,"completion_tokens":2,"total_tokens":1002,'
        '"prompt_tokens_details":{"cached_tokens":990}}}\n\n', "data: [DONE]\n\n"]
MESSAGES = ['event: message_start\ndata: {"type":"message_start","message":{"usage":{"input_tokens":1000}}}\n\n',
            'event: ping\ndata: {"type":"ping"}\n\n',
            'event: content_block_start\ndata: {"type":"content_block_start","index":0}\n\n',
            'event: content_block_delta\ndata: {"type":"content_block_delta","index":0}\n\n',
            'event: content_block_stop\ndata: {"type":"content_block_stop","index":0}\n\n',
            'event: message_delta\ndata: {"type":"message_delta","usage":{"input_tokens":12,'
            '"cache_read_input_tokens":988,"output_tokens":1}}\n\n',
            'event: message_stop\ndata: {"type":"message_stop"}\n\n']
RESPONSES = ['event: response.created\ndata: {"type":"response.created"}\n\n',
             'event: response.output_text.delta\ndata: {"type":"response.output_text.delta","delta":"a"}\n\n',
             'event: response.incomplete\ndata: {"type":"response.incomplete","response":{"usage":{"input_tokens":'
             '1000,"input_tokens_details":{"cached_tokens":900}}}}\n\n']


@pytest.mark.parametrize("route, events, read_tokens", [("/v1/chat/completions", CHAT, 10),
                                                         ("/v1/messages", MESSAGES, 12),
                                                         ("/v1/responses", RESPONSES, 100)])
def test_a_stream_to_its_end_and_its_usage(route, events, read_tokens):
    t = read(route, stream_of(*events))
    assert (t.ended, t.prompt, t.read, t.problems) == ("end", 1000, read_tokens, [])
    cut = read(route, stream_of(*events[:-1 if route != "/v1/chat/completions" else -2]))
    assert cut.ended == "cut" and cut.problems[0][0] == "cut"
    hung = read(route, stream_of(*events), hang_up_after=1)
    assert hung.ended == "hung up" and not hung.problems


def test_error_events_end_a_stream_and_count_by_kind():
    t = read("/v1/chat/completions", stream_of(CHAT[0], 'data: {"error":{"type":"server_error","message":"x"}}\n\n',
                                               "data: [DONE]\n\n"))
    assert t.ended == "error" and [c for c, _ in t.problems] == ["server error"]
    t = read("/v1/messages", stream_of(MESSAGES[0], 'event: error\ndata: {"type":"error","error":{"type":'
                                                    '"invalid_request_error","message":"x"}}\n\n'))
    assert t.ended == "error" and [c for c, _ in t.problems] == ["error event"]
    t = read("/v1/responses", stream_of(RESPONSES[0], 'event: error\ndata: {"type":"error","code":"server_error"}\n\n',
                                        'event: response.failed\ndata: {"type":"response.failed","response":'
                                        '{"error":{"code":"server_error"}}}\n\n'))
    assert t.ended == "error" and [c for c, _ in t.problems] == ["server error"]


def test_the_rss_slope_is_least_squares_in_mb_per_minute():
    assert soak.slope([(0, 100), (1, 102), (2, 104)]) == pytest.approx(2)
    assert soak.slope([(0, 100)]) is None


class _Proc:
    def poll(self) -> None:
        return None


def judged(turns: list[soak.Turn], rss: list[tuple[float, float, float]], disk: int,
           news: dict[str, dict[int, int]] | None = None) -> tuple[bool, str]:
    sessions = [soak.Fixture("a", [("/v1/messages", {})] * 2), soak.Fixture("b", [("/v1/responses", {})] * 2)]
    run = soak.Run(2, 60, type("S", (), {"proc": _Proc()})())
    for t in turns:
        run.add(t)
    samples = soak.Samples(rss=rss, disk=[(1.0, disk)], worker_pids={7})
    worker = {"pid": 7, "state": "ready", "crashes": 0}
    return soak.agents_report(sessions, run, samples, 1000, True, worker, worker, news or {"a": {}, "b": {}}), ""


def turn(session: str, index: int, prompt: int, cached: int, ended: str = "end", repeat: bool = False) -> soak.Turn:
    return soak.Turn(session, index, 200, prompt, cached, ended, repeat=repeat)


def test_the_verdict(capsys):
    flat = [(0.0, 300.0, 900.0), (0.5, 301.0, 905.0), (1.0, 300.0, 902.0), (1.5, 302.0, 904.0)]
    good = [turn("a", 0, 10000, 0), turn("b", 0, 9000, 100),
            turn("a", 1, 10300, 9950),  # first pass: reads the 300 new tokens and 50 more (0.5% of 10000)
            turn("b", 1, 9200, 8800),  # 200 new, 200 more (2.2% of 9000)
            turn("a", 1, 10300, 9000, "hung up", repeat=True), turn("a", 1, 10300, 10299, repeat=True),
            turn("b", 1, 9200, 8800, repeat=True)]  # sent again: 400 read (4.4%)
    assert judged(good, flat, 900)[0]
    out = capsys.readouterr().out
    assert "soak --agents: PASS" in out and "350-300 #1" in out and "400 #1" in out and "slope" in out
    assert not judged([*good, turn("b", 1, 9200, 8700, repeat=True)], flat, 900)[0]  # 500 read again > 450
    assert "b: 1 warm turns read over 5% of its cold 9000 (turns [1])" in capsys.readouterr().out
    assert not judged([turn("b", 1, 9200, 8500) if t.session == "b" and t.index == 1 and not t.repeat else t
                       for t in good], flat, 900)[0]  # first pass: 700 read, 200 of them new: 500 > 450
    assert "b: 1 warm turns read" in capsys.readouterr().out
    # ... unless its prompt shares only a shorter prefix with the turn before (a client that rewrites the
    # middle): 600 tokens past it, 100 read beyond them
    assert judged([turn("b", 1, 9200, 8500) if t.session == "b" and t.index == 1 and not t.repeat else t
                   for t in good], flat, 900, {"a": {}, "b": {1: 600}})[0]
    assert "700-600 #1" in capsys.readouterr().out
    assert not judged([t for t in good if not (t.session == "a" and t.repeat)], flat, 900)[0]
    assert "a: no follow-up sent again" in capsys.readouterr().out
    growing = [(m, 300.0 + 100 * m, 900.0) for m in (0.0, 0.5, 1.0, 1.5)]  # 150 MB in 1.5 min
    assert not judged(good, growing, 900)[0]
    assert "server RSS grew 150 MB" in capsys.readouterr().out
    assert not judged(good, flat, 1001)[0]
    assert "the prompt store reached 1001 bytes" in capsys.readouterr().out
    assert not judged(good, flat[:2], 900)[0]  # too short to say
    cut = soak.Turn("a", 1, 200, ended="cut", problems=[("cut", "no end")])
    assert not judged([*good, cut], flat, 900)[0]
    assert "1 cut" in capsys.readouterr().out
