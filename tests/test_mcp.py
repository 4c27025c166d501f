"""MCP tools, through the official SDK both ways: a real MCP server (localchat/devtools/mcp_server.py, the
SDK's MCPServer) over Streamable HTTP and over stdio; the page's bridge (POST /mcp/tools,
/mcp/call) on a real server; the terminal chat's `/mcp add` with a tiny model whose call the
grammar forces (a named tool_choice), the call approved in the terminal. The browser's side is
in test_webui.py."""

from __future__ import annotations

import asyncio
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import httpx
import pytest

from conftest import Server
from test_repl import Chat

from localchat import mcp_tools
from localchat.errors import ToolServerError, ToolServerTimeout
from localchat.mcp_tools import Hub, Target

from localchat.devtools import mcp_server as mcp_server_module
from localchat.devtools.mcp_server import LISTED, TIME, McpServer, dead_url

STDIO = f"-- {sys.executable} {mcp_server_module.__file__}"


@pytest.fixture(scope="module")
def mcp_server() -> Iterator[McpServer]:
    s = McpServer()
    yield s
    s.stop()


# -- the client, on its own ---------------------------------------------------------------------

def test_tools_become_openai_tools_and_bad_ones_are_left_out_with_the_reason(mcp_server: McpServer):
    found = asyncio.run(mcp_tools.tools_at(Target.parse(mcp_server.url)))
    assert found.server == "test-clock"
    assert [t.name for t in found.tools] == LISTED
    add = next(t.openai() for t in found.tools if t.name == "add")
    assert add["type"] == "function" and add["function"]["parameters"]["required"] == ["a", "b"]
    skipped = dict(found.skipped)
    assert set(skipped) == {"bad name", "broken"}
    assert "name" in skipped["bad name"] and "no-such-type" in skipped["broken"]


def test_a_call_answers_text_a_failure_is_an_error_result_a_huge_one_is_cut(mcp_server: McpServer):
    target = Target.parse(mcp_server.url)
    assert asyncio.run(mcp_tools.call_at(target, "add", {"a": 2, "b": 40})).text == "42"
    failed = asyncio.run(mcp_tools.call_at(target, "fail", {}))
    assert failed.is_error
    huge = asyncio.run(mcp_tools.call_at(target, "huge", {}))
    assert huge.cut == 1_000_000 - mcp_tools.RESULT_CHARS
    assert len(huge.text) < mcp_tools.RESULT_CHARS + 100 and huge.text.endswith("the result was too long]")


def test_down_slow_and_wrong_servers_are_one_clear_error(mcp_server: McpServer):
    with pytest.raises(ToolServerError, match="cannot reach .* is it running"):
        asyncio.run(mcp_tools.tools_at(Target.parse(dead_url())))
    with pytest.raises(ToolServerError, match="MCP endpoint"):
        asyncio.run(mcp_tools.tools_at(Target.parse(mcp_server.url.removesuffix("/mcp") + "/nope")))
    with pytest.raises(ToolServerTimeout, match="did not run slow in time"):
        asyncio.run(mcp_tools.call_at(Target.parse(mcp_server.url), "slow", {"seconds": 20}, seconds=1))
    with pytest.raises(ToolServerError, match="no program 'no-such-mcp-program'"):
        asyncio.run(mcp_tools.tools_at(Target.parse("-- no-such-mcp-program --flag")))


def test_a_hub_keeps_a_stdio_server_open_across_calls():
    hub = Hub(errlog=subprocess.DEVNULL)
    try:
        found = hub.add(STDIO)
        assert found.server == "test-clock" and hub.owner("add") == "test-clock"
        assert [t["function"]["name"] for t in hub.tools()] == LISTED
        assert hub.call("add", '{"a": 1, "b": 2}').text == "3"
        assert TIME in hub.call("server_time", "{}").text
        with pytest.raises(ToolServerError, match="no MCP server open here has a tool 'nope'"):
            hub.call("nope", "{}")
        assert hub.remove("test-clock") and hub.tools() == []
    finally:
        hub.close()


# -- the page's bridge ----------------------------------------------------------------------------

@pytest.fixture(scope="module")
def keyed(registry_file: Path) -> Iterator[Server]:
    s = Server(registry_file, "--model", "tiny-chatml", "--api-key", "k")
    yield s
    s.stop()


def test_the_bridge_lists_and_calls_behind_the_key(keyed: Server, mcp_server: McpServer):
    auth = {"Authorization": "Bearer k"}
    assert httpx.post(keyed.url + "/mcp/tools", json={"url": mcp_server.url}, timeout=60).status_code == 401
    listed = httpx.post(keyed.url + "/mcp/tools", json={"url": mcp_server.url}, headers=auth, timeout=60).json()
    assert listed["server"] == "test-clock"
    assert [t["function"]["name"] for t in listed["tools"]] == LISTED
    assert {s["name"] for s in listed["skipped"]} == {"bad name", "broken"}
    called = httpx.post(keyed.url + "/mcp/call", headers=auth, timeout=60,
                        json={"url": mcp_server.url, "name": "add", "arguments": '{"a": 3, "b": 4}'}).json()
    assert called == {"content": "7", "is_error": False, "cut": 0}


def test_the_bridge_says_what_is_wrong(keyed: Server, mcp_server: McpServer):
    auth = {"Authorization": "Bearer k"}

    def post(path: str, body: dict) -> httpx.Response:
        return httpx.post(keyed.url + path, json=body, headers=auth, timeout=60)

    down = post("/mcp/tools", {"url": dead_url()})
    assert down.status_code == 502 and "is it running" in down.json()["error"]["message"]
    assert down.json()["error"]["code"] == "mcp_server_error"
    for body, param in [({"url": "file:///etc/passwd"}, "url"), ({}, "url"),
                        ({"url": mcp_server.url, "command": "rm"}, "command")]:
        refused = post("/mcp/tools", body)
        assert refused.status_code == 400 and refused.json()["error"]["param"] == param, refused.text
    bad_args = post("/mcp/call", {"url": mcp_server.url, "name": "add", "arguments": "{not json"})
    assert bad_args.status_code == 400 and bad_args.json()["error"]["param"] == "arguments"
    assert post("/mcp/call", {"url": mcp_server.url, "name": "fail"}).json()["is_error"] is True
    assert httpx.get(keyed.url + "/health", timeout=10).status_code == 200  # the server is still fine


# -- the terminal chat --------------------------------------------------------------------------

def test_the_repl_runs_an_approved_call_and_sends_the_result_back(registry_file: Path, tmp_path: Path,
                                                                   mcp_server: McpServer):
    chat = Chat("--config", str(registry_file), "--model", "tiny-chatml", "--mcp", mcp_server.url, home=tmp_path)
    try:
        out = chat.say("/mcp add " + STDIO)  # a second server, over stdio: its tools share names, the first wins
        assert "test-clock: 5 tools (server_time, add, huge, fail, slow)" in out
        assert "left out broken" in out
        assert "test-clock" in chat.say("/mcp")
        chat.say("/set max_tokens 64")  # room for the forced call; the free answer after it is as long
        chat.say("/set tool_choice server_time")
        chat.ask("What time is it on the server?")
        chat.wait(r"server_time \{\}")
        chat.wait(r"Run it\? \[y\]es, \[n\]o, \[a\]lways")
        out = chat.say("y")  # the call runs, its result goes back, the model answers (tool_choice: auto now)
        assert TIME in out and "tool failed" not in out
        chat.say("/set tool_choice server_time")
        chat.ask("And now?")
        chat.wait(r"Run it\?")
        out = chat.say("n")
        assert "not run" in out and TIME not in out
        out = chat.say("/save " + str(tmp_path / "c.json"))
        import json
        saved = json.loads((tmp_path / "c.json").read_text())
        roles = [m["role"] for m in saved]
        assert roles == ["user", "assistant", "tool", "assistant", "user", "assistant", "tool", "assistant"]
        assert saved[1]["tool_calls"][0]["function"]["name"] == "server_time"
        assert saved[2]["tool_call_id"] == saved[1]["tool_calls"][0]["id"] and TIME in saved[2]["content"]
        assert saved[6]["content"] == "The user did not allow this tool call."
    finally:
        chat.close()


def test_the_repl_says_when_a_server_is_down_and_goes_on(registry_file: Path, tmp_path: Path):
    chat = Chat("--config", str(registry_file), "--model", "tiny-chatml", home=tmp_path)
    try:
        out = chat.say("/mcp add " + dead_url())
        assert "cannot reach" in out and "is it running" in out
        assert "no MCP servers" in chat.say("/mcp")
        out = chat.say("/mcp add -- no-such-mcp-program")
        assert "no program 'no-such-mcp-program'" in out
        chat.say("/set max_tokens 4")
        assert "token" in chat.say("hello")  # the chat goes on
    finally:
        chat.close()


def test_the_repl_does_not_run_a_repeated_call_and_asks_for_the_answer(looping, tmp_path: Path, mcp_server: McpServer):
    """The scripted model calls server_time whenever tools are offered (as the shipped Qwen2.5-Coder models do)."""
    chat = Chat("--url", looping.url, "--mcp", mcp_server.url, home=tmp_path)
    try:
        chat.ask("What time is it?")
        chat.wait(r"Run it\?")
        out = chat.say("y")
        assert TIME in out and "the same call as before: not run again" in out
        assert out.rstrip().splitlines()[-2] == "It is noon."
        assert "Run it?" not in out  # asked once
        chat.say("/save " + str(tmp_path / "c.json"))
        import json
        saved = json.loads((tmp_path / "c.json").read_text())
        assert [m["role"] for m in saved] == ["user", "assistant", "tool", "assistant"]  # the repeat is not kept
        assert saved[-1]["content"] == "It is noon."
    finally:
        chat.close()
