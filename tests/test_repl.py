"""`localchat chat` driven in a pseudo-terminal, as a person would use it."""

from __future__ import annotations

import base64
import json
import os
import re
import sys
from pathlib import Path

import pexpect
import pytest

from conftest import DEFAULT, GEMMA, shipped

ANSI = re.compile(r"\x1b\[[0-9;?]*[A-Za-z]")
# prompt_toolkit turns bracketed paste on once per prompt shown and off once the line is
# accepted: unambiguous markers, unlike the prompt text, which is redrawn on every key.
READY, ACCEPTED = "\x1b[?2004h", "\x1b[?2004l"


class Chat:
    def __init__(self, *args: str, home: Path) -> None:
        env = {**os.environ, "PROMPT_TOOLKIT_NO_CPR": "1", "TERM": "xterm",
               "LOCALCHAT_DATA_DIR": str(home / "data"), "LOCALCHAT_CONFIG_DIR": str(home / "config")}
        self.p = pexpect.spawn(sys.executable, ["-m", "localchat", "chat", *args], env=env, encoding="utf-8",
                               timeout=90, dimensions=(50, 200))
        self.ready()

    def ready(self) -> str:
        """Everything printed until the next prompt, without terminal escapes."""
        self.p.expect_exact(READY)
        return ANSI.sub("", self.p.before)

    def wait(self, pattern: str) -> str:
        self.p.expect(pattern)
        return ANSI.sub("", self.p.before)

    def ask(self, line: str) -> None:
        """Type a line and return once the prompt has accepted it."""
        self.p.sendline(line)
        self.p.expect_exact(ACCEPTED)

    def say(self, line: str) -> str:
        """Type a line; what it printed, once the next prompt is up."""
        self.ask(line)
        return self.ready()

    def close(self) -> None:
        if self.p.isalive():
            self.p.sendline("/exit")
            self.p.expect(pexpect.EOF)


@pytest.fixture
@shipped
def chat(registry_file: Path, tmp_path: Path):
    # Gemma 3 270M, a base model: its answers run to max_tokens, so there is time to press Ctrl-C
    c = Chat("--config", str(registry_file), "--model", GEMMA, home=tmp_path)
    yield c
    c.close()


STATS = r"(\d+) tokens?(?: · [\d.]+ tok/s)?(?: · first token [\d.]+ s)?(?=\x1b\[0m|\r|\n)"


def test_answer_streams_then_shows_stats(chat: Chat):
    chat.say("/set max_tokens 120")
    chat.ask("Tell me a story about the sea.")
    chat.p.expect(r"\S\S")  # the first words of the answer are on screen …
    assert "tok/s" not in chat.p.before + chat.p.after  # … while the answer is still coming
    out = chat.wait(STATS)
    assert int(chat.p.match.group(1)) <= 120 and out.strip()
    chat.ready()


def test_ctrl_c_stops_the_answer_and_the_chat_goes_on(chat: Chat):
    chat.say("/set max_tokens 3000")
    for asked in range(1, 4):  # the base model may end an answer by itself before Ctrl-C lands: then ask again
        chat.ask("Write a very long story.")
        chat.p.expect(r"\S\S")
        chat.p.sendintr()
        if chat.p.expect(["interrupted", r"Ctrl-D or /exit"]) == 0:
            break
        chat.ready()  # the Ctrl-C reached the prompt: the answer had ended
    else:
        pytest.fail("three answers ended before Ctrl-C could stop one")
    chat.ready()
    assert f"messages    {2 * asked}" in chat.say("/show")
    chat.say("/set max_tokens 5")
    chat.ask("And now a short one.")
    chat.wait(STATS)
    chat.ready()
    assert f"messages    {2 * asked + 2}" in chat.say("/show")


def test_set_and_show(chat: Chat):
    assert "temperature = 0.3" in chat.say("/set temperature 0.3")
    chat.say("/set top_k 7")
    assert "takes a number" in chat.say("/set temperature hot")
    assert "between" in chat.say("/set top_p 3")
    assert "usage: /set KEY VALUE" in chat.say("/set warmth 1")
    assert "repetition_stop = 0" in chat.say("/set repetition_stop 0")  # sent as an extension, as top_k
    assert "whole number" in chat.say("/set repetition_stop 1.5")
    shown = chat.say("/show")
    assert re.search(r"temperature\s+0\.3", shown) and re.search(r"top_k\s+7", shown)
    assert re.search(r"repetition_stop\s+0", shown)
    assert re.search(r"min_p\s+server default", shown)
    assert GEMMA in shown


def test_save_then_load_round_trips(chat: Chat, tmp_path: Path):
    saved = tmp_path / "talk.json"
    chat.say("/system Be brief.")
    chat.say("/set max_tokens 4")
    chat.ask("Hello there")
    chat.wait(STATS)
    chat.ready()
    assert "saved 3 messages" in chat.say(f"/save {saved}")
    messages = json.loads(saved.read_text())
    assert [m["role"] for m in messages] == ["system", "user", "assistant"]
    assert messages[0]["content"] == "Be brief." and messages[1]["content"] == "Hello there"
    chat.say("/clear")
    chat.say("/system")
    assert "messages    0" in chat.say("/show")
    assert "loaded 3 messages" in chat.say(f"/load {saved}")
    shown = chat.say("/show")
    assert "messages    2" in shown and "Be brief." in shown
    assert "error" in chat.say(f"/load {tmp_path / 'missing.json'}")
    (tmp_path / "bad.json").write_text('{"not": "a list"}')
    assert "not a list of chat messages" in chat.say(f"/load {tmp_path / 'bad.json'}")
    assert "messages    2" in chat.say("/show")


def test_multiline_input(chat: Chat, tmp_path: Path):
    chat.say("/set max_tokens 2")
    chat.say('"""first line')  # the continuation prompt comes up
    chat.ask('second line"""')
    chat.wait(STATS)
    chat.ready()
    chat.p.send("alpha\x1b\rbeta\r")  # Alt-Enter inserts a new line, Enter sends
    chat.p.expect_exact(ACCEPTED)
    chat.wait(STATS)
    chat.ready()
    chat.say(f"/save {tmp_path / 'm.json'}")
    users = [m["content"] for m in json.loads((tmp_path / "m.json").read_text()) if m["role"] == "user"]
    assert users == ["first line\nsecond line", "alpha\nbeta"]


def test_tab_completes_slash_commands(chat: Chat):
    chat.p.send("/sh\t")
    chat.p.send("\r")
    chat.p.expect_exact(ACCEPTED)
    assert "messages    0" in chat.ready()


def test_unknown_command_help_and_leaving(chat: Chat):
    assert "unknown command /bogus" in chat.say("/bogus")
    helped = chat.say("/help")
    assert "/retry" in helped and "/save FILE" in helped
    chat.p.sendintr()
    assert "Ctrl-D or /exit to leave" in chat.ready()
    chat.p.sendline("/exit")
    chat.p.expect("bye")
    chat.p.expect(pexpect.EOF)


@pytest.mark.real  # the shipped default
def test_without_a_model_it_chats_with_the_default(registry_file: Path, tmp_path: Path):
    c = Chat("--config", str(registry_file), home=tmp_path)
    try:
        assert DEFAULT in c.say("/show")
        c.say("/set max_tokens 4")
        c.ask("Say hi.")
        c.wait(STATS)
        c.ready()
        assert "messages    2" in c.say("/show")
    finally:
        c.close()


def test_ctrl_d_leaves_and_history_persists(registry_file: Path, tmp_path: Path):
    c = Chat("--config", str(registry_file), "--model", "tiny-chatml", home=tmp_path)
    c.say("/show")
    c.p.sendeof()
    c.p.expect("bye")
    c.p.expect(pexpect.EOF)
    assert "/show" in (tmp_path / "data" / "history").read_text()


def test_retry_and_model_switch(chat: Chat):
    chat.say("/set max_tokens 3")
    assert "nothing to retry" in chat.say("/retry")
    chat.ask("Hello")
    chat.wait(STATS)
    chat.ready()
    chat.ask("/retry")
    chat.wait(STATS)
    chat.ready()
    assert "messages    2" in chat.say("/show")
    listed = chat.say("/models")
    assert f"* {GEMMA}" in listed and "tiny-chatml" in listed
    assert "no model" in chat.say("/model nonexistent")
    assert "now chatting with tiny-chatml" in chat.say("/model tiny-chatml")
    chat.say("/set seed 3")
    chat.ask("hello")
    chat.wait(STATS)


def test_chat_with_a_running_server_by_url(server, tmp_path: Path):
    c = Chat("--url", server.url, "--model", "tiny-llama3", "--system", "Be brief.", home=tmp_path)
    try:
        c.say("/set max_tokens 4")
        c.say("/set seed 3")
        c.ask("hello")
        c.wait(STATS)
        c.ready()
        assert "tiny-llama3" in c.say("/show") and "Be brief." in c.say("/show")
    finally:
        c.close()


def test_unreachable_url_is_one_clear_line(tmp_path: Path):
    c = Chat("--url", "http://127.0.0.1:9", home=tmp_path)
    try:
        assert "cannot reach the server" in c.say("hello")
        assert "messages    0" in c.say("/show")
    finally:
        c.close()


def test_reasoning_is_shown_dimmed(registry_file: Path, tmp_path: Path):
    c = Chat("--config", str(registry_file), "--model", "tiny-qwen3", home=tmp_path)
    try:
        c.say("/set max_tokens 6")
        c.say("/set seed 3")
        c.ask("hello")
        c.p.expect(STATS)
        raw = c.p.before
        thought = raw[raw.index("\x1b[2m"):]  # rich's dim style opens the thoughts …
        assert ANSI.sub("", thought).strip(), "… and they are on screen"
        c.ready()
        c.say(f"/save {tmp_path / 't.json'}")
        saved = json.loads((tmp_path / "t.json").read_text())
        assert saved[-1] == {"role": "assistant", "content": ""}  # thoughts are not part of the answer
    finally:
        c.close()


def _png(path: Path) -> Path:
    from test_vision import png
    path.write_bytes(png(31))
    return path


def test_image_command_and_a_pasted_path_attach_images(registry_file: Path, tmp_path: Path):
    """`/image PATH` and a path pasted alone on a line (bare, quoted, with escaped spaces, as a
    file:// URL) attach the image to the next message, which the model with a projector reads;
    /save keeps it as an OpenAI image_url part with a data: URI."""
    folder = tmp_path / "My Pictures"
    folder.mkdir()
    image = _png(folder / "cat.png")
    c = Chat("--config", str(registry_file), "--model", "tiny-vision", home=tmp_path)
    try:
        c.say("/set max_tokens 2")
        assert "attached cat.png" in c.say(f"/image {image}")
        for pasted in (f"'{image}'", str(image).replace(" ", "\\ "), image.as_uri()):
            assert "attached cat.png" in c.say(pasted)
        assert "attached    cat.png" in c.say("/show")
        c.ask("What is in these?")
        out = c.wait(STATS)
        assert "error" not in out
        c.ready()
        assert "attached" not in c.say("/show")  # sent with that message
        c.say(f"/save {tmp_path / 'seen.json'}")
        content = json.loads((tmp_path / "seen.json").read_text())[0]["content"]
        data = base64.b64encode(image.read_bytes()).decode()
        assert content[0] == {"type": "text", "text": "What is in these?"}
        assert content[1:] == [{"type": "image_url", "image_url": {"url": f"data:image/png;base64,{data}"}}] * 4
        assert "no file" in c.say(f"/image {tmp_path / 'missing.png'}")
        assert "unknown command" in c.say(f"{tmp_path}/missing.png")  # not a file: not an image either
    finally:
        c.close()


def test_an_image_reaches_the_server(registry_file: Path, tmp_path: Path):
    """A model without a projector refuses the image: the server saw it. The image stays attached."""
    image = _png(tmp_path / "cat.png")
    c = Chat("--config", str(registry_file), "--model", "tiny-chatml", home=tmp_path)
    try:
        c.say(f"/image {image}")
        out = c.say("What is it?")
        assert "does not read images" in out and "messages.0.content.1" in out
        assert "attached    cat.png" in c.say("/show") and "messages    0" in c.say("/show")
        assert "new conversation" in c.say("/clear") and "attached" not in c.say("/show")
    finally:
        c.close()
