"""The chat page in a real Chromium (Debian's, driven by Playwright) against a real server.

Every page's network is limited to the server: a request to any other host is blocked and fails
the test. What a model writes is never asserted unless a grammar forces it: the page's "extra
request fields" setting carries a `grammar` (or forced tools) to the server, as a user could.
The real model is named (REAL_MODEL), not taken as the default. The pictures in docs/ come from
scripts/screenshots (the shipped default model answering a real question), not from a test."""

from __future__ import annotations

import json
import time
from collections.abc import Iterator
from pathlib import Path
from types import SimpleNamespace
from urllib.parse import urlsplit

import httpx
import pytest

from conftest import Server
from localchat.devtools.webpage import ARGS, CHROMIUM, MODELS_LISTED, PHONE, Page
from localchat.devtools.mcp_server import LISTED, TIME, McpServer, dead_url

playwright_api = pytest.importorskip("playwright.sync_api", reason="the Python package playwright is not installed: "
                                     "pip install playwright (scripts/test does)")
expect = playwright_api.expect
expect.set_options(timeout=60_000)  # a model loads, a shared machine is slow: waits are long, never fixed
if not CHROMIUM:
    pytest.skip("no Chromium here: the browser tests need one (Debian: apt-get install chromium; scripts/test "
                "installs it when it can) or LOCALCHAT_CHROMIUM=/path/to/chromium", allow_module_level=True)

REAL_MODEL = "gemma-3-270m"  # a real GGUF, named: the tests do not depend on which model is the default
TINY = "tiny-chatml"
KEY = "web-key"


def literal(text: str) -> str:
    """A GBNF string literal for text."""
    return '"' + text.replace("\\", "\\\\").replace('"', '\\"').replace("\n", "\\n") + '"'


def forced(text: str, **extra: object) -> dict[str, object]:
    """Extra request fields that make any model write exactly `text`."""
    return {"grammar": f"root ::= {literal(text)}", **extra}


@pytest.fixture(scope="module")
def browser() -> Iterator[object]:
    with playwright_api.sync_playwright() as p:
        b = p.chromium.launch(executable_path=CHROMIUM, args=ARGS)
        yield b
        b.close()


@pytest.fixture(scope="module")
def web(registry_file: Path) -> Iterator[Server]:
    s = Server(registry_file, "--model", TINY, "--max-loaded-models", "4")
    yield s
    s.stop()


@pytest.fixture
def page(browser: object, web: Server) -> Iterator[Page]:
    p = Page(browser, web)
    p.open()
    yield p
    p.close()


def health(server: Server) -> dict:
    return httpx.get(server.url + "/health", timeout=10).json()


def loaded(server: Server, name: str) -> dict | None:
    return next((m for m in health(server)["loaded"] if m["name"] == name), None)


# -- talking to the real model ------------------------------------------------------------------

@pytest.mark.real  # REAL_MODEL
def test_send_a_message_and_see_the_answer_stream(page: Page):
    page.choose(REAL_MODEL)
    page.settings({"max_tokens": 24, "ignore_eos": True})
    p = page.page
    # Watch the answer grow: the lengths of its text, as the page shows it while it is being written.
    p.evaluate("""() => { window.seen = []; new MutationObserver(() => {
        const a = document.querySelector('article.msg.assistant[aria-busy=true] .content');
        if (a && a.textContent.length) window.seen.push(a.textContent.length);
      }).observe(document.querySelector('#messages'), {subtree: true, childList: true, characterData: true}); }""")
    answer = page.send("Tell me about the sea.")
    lengths = sorted(set(p.evaluate("window.seen")))
    assert len(lengths) >= 2, f"the answer did not stream: {lengths}"
    assert len(answer.locator(".content").inner_text().strip()) >= lengths[0]
    stats = answer.locator(".stats").inner_text()
    assert REAL_MODEL in stats and "24 tokens" in stats and "tokens/s" in stats and "cached" in stats
    body = page.chats[-1]
    assert body["model"] == REAL_MODEL and body["stream_options"] == {"include_usage": True}
    assert body["messages"] == [{"role": "user", "content": "Tell me about the sea."}]


@pytest.mark.real  # REAL_MODEL
def test_stop_mid_stream_frees_the_slot(page: Page):
    server = page.server
    page.choose(REAL_MODEL)
    page.settings({"max_tokens": 4000, "ignore_eos": True})  # minutes of decoding if nobody stopped it
    answer = page.send("Tell me a very long story.", wait=False)
    expect(answer.locator(".content")).not_to_be_empty()  # the answer is arriving
    assert loaded(server, REAL_MODEL)["busy_slots"] >= 1
    page.page.keyboard.press("Escape")  # Esc stops
    expect(answer).to_have_attribute("aria-busy", "false")
    assert "stopped" in answer.locator(".stats").inner_text()
    deadline = time.monotonic() + 20
    while (card := loaded(server, REAL_MODEL))["busy_slots"] and time.monotonic() < deadline:
        time.sleep(0.1)
    assert card["busy_slots"] == 0 and card["requests"] == 0, card
    assert health(server)["recent"][0]["finish"] == "cancelled"
    assert page.page.is_visible("#send") and not page.page.is_visible("#stop")
    page.page.click("#open-status")
    page.page.locator(f"#status .loaded-model[data-model='{REAL_MODEL}'] .slots").filter(has_text="0/").wait_for()


# -- conversations ------------------------------------------------------------------------------

def test_reload_and_find_the_conversation(page: Page):
    page.choose(TINY)
    page.settings(forced("first answer"))
    page.send("remember me")
    p = page.page
    p.reload()
    p.locator("#conversations li .open", has_text="remember me").wait_for()
    assert p.locator("article.msg.user .text").inner_text() == "remember me"
    assert p.locator("article.msg.assistant .content").inner_text() == "first answer"
    p.click("#new-chat")
    assert p.locator("article.msg").count() == 0
    p.click("#conversations li .open >> text=remember me")
    assert p.locator("article.msg.assistant .content").inner_text() == "first answer"


def test_edit_and_regenerate_keep_branches(page: Page):
    p = page.page
    page.choose(TINY)
    page.settings(forced("alpha"))
    page.send("first question")
    user = p.locator("article.msg.user")
    user.get_by_role("button", name="Edit").click()
    p.fill("article.msg.user .edit-area", "second question")
    page.new_answer(lambda: p.press("article.msg.user .edit-area", "Enter"))
    assert p.locator("article.msg.user .text").inner_text() == "second question"
    assert page.chats[-1]["messages"] == [{"role": "user", "content": "second question"}]  # the edit replaces
    assert user.locator(".branch").inner_text() == "2/2"

    page.settings(forced("beta"))
    answer = page.new_answer(p.locator("article.msg.assistant").get_by_role("button", name="Regenerate").click)
    assert answer.locator(".content").inner_text() == "beta"
    assert answer.locator(".branch").inner_text() == "2/2"
    assert page.chats[-1]["messages"] == [{"role": "user", "content": "second question"}]
    answer.get_by_role("button", name="Previous version").click()
    expect(p.locator("article.msg.assistant .content")).to_have_text("alpha")
    p.locator("article.msg.user").get_by_role("button", name="Previous version").click()
    expect(p.locator("article.msg.user .text")).to_have_text("first question")
    p.reload()  # the branch on screen is kept
    expect(p.locator("article.msg.user .text")).to_have_text("first question")
    expect(p.locator("article.msg.user .branch")).to_have_text("1/2")


def test_switch_model(page: Page):
    p = page.page
    page.choose(TINY)
    page.settings(forced("one"))
    assert TINY in page.send("first").locator(".stats").inner_text()
    page.choose("tiny-gemma")
    expect(p.locator("#model-info")).to_contain_text("2,048 tokens of context")
    answer = page.send("second")
    assert page.chats[-1]["model"] == "tiny-gemma"
    assert answer.locator(".stats").inner_text().startswith("tiny-gemma")  # the model the server says answered
    assert loaded(page.server, "tiny-gemma") is not None
    p.reload()  # the conversation remembers its model
    p.wait_for_function(MODELS_LISTED, polling=100)
    expect(p.locator("#model")).to_have_value("tiny-gemma")


def test_rename_search_delete_export_import(page: Page, tmp_path: Path):
    p = page.page
    page.choose(TINY)
    page.settings(forced("ok"))
    page.send("apples and pears")
    p.click("#new-chat")
    page.send("the weather in Paris")
    items = p.locator("#conversations li .open")
    assert items.count() == 2
    p.get_by_role("button", name="Rename the weather in Paris").click()
    p.fill("#conversations input.rename", "Paris")
    p.press("#conversations input.rename", "Enter")
    expect(p.locator("#title")).to_have_text("Paris")
    p.fill("#search", "pears")  # titles and message text
    expect(items).to_have_text(["apples and pears"])
    p.fill("#search", "")
    expect(items).to_have_count(2)
    with p.expect_download() as download:
        p.click("#export")
    exported = tmp_path / "export.json"
    download.value.save_as(exported)
    data = json.loads(exported.read_text())
    assert sorted(c["title"] for c in data["conversations"]) == ["Paris", "apples and pears"]
    p.once("dialog", lambda d: d.accept())
    p.get_by_role("button", name="Delete Paris").click()
    expect(items).to_have_text(["apples and pears"])
    p.set_input_files("#import-file", str(exported))
    expect(items).to_have_count(2)
    p.click("#conversations li .open >> text=Paris")
    expect(p.locator("article.msg.user .text")).to_have_text("the weather in Paris")


# -- what answers look like ---------------------------------------------------------------------

RICH = ("# Title\n\n| a | b |\n|---|---|\n| 1 | 2 |\n\n```python\nprint(1)\n```\n\n"
        "Inline $e^{i\\pi}+1=0$ and display:\n\n$$\\int_0^1 x^2\\,dx$$\n")


def test_markdown_code_and_math_render(page: Page):
    p = page.page
    page.context.grant_permissions(["clipboard-read", "clipboard-write"], origin=page.server.url)
    page.choose(TINY)
    page.settings(forced(RICH))
    content = page.send("show me").locator(".content")
    assert content.locator("h1").inner_text() == "Title"
    assert content.locator("th").all_inner_texts() == ["a", "b"] and content.locator("td").all_inner_texts() == ["1", "2"]
    code = content.locator("pre code.language-python")
    code.and_(p.locator(".hljs")).wait_for()  # highlighted
    assert code.locator(".hljs-built_in").inner_text() == "print"
    content.locator(".code-head").get_by_role("button", name="Copy the code").click()
    p.wait_for_function("async () => (await navigator.clipboard.readText()) === 'print(1)\\n'", polling=100)
    content.locator(".katex-display").wait_for()
    assert content.locator(".katex").count() == 2


XSS = ('<img src=x onerror="window.__xss=1"><script>window.__xss=2</script>'
       '<a href="javascript:window.__xss=3">link</a><svg onload="window.__xss=4"></svg>'
       '<iframe src="javascript:window.__xss=5"></iframe> [md](javascript:window.__xss=6) '
       '<form action="/x"><input name=q></form><div style="position:fixed;inset:0">cover</div>')


def test_html_in_model_output_runs_nothing(page: Page):
    p = page.page
    dialogs: list[str] = []
    p.on("dialog", lambda d: (dialogs.append(d.message), d.dismiss()))
    page.choose(TINY)
    page.settings(forced(XSS))
    content = page.send('<b onclick="window.__xss=7">mine</b>').locator(".content")
    for link in content.locator("a").all():
        link.click()
    time.sleep(0.5)
    assert p.evaluate("window.__xss") is None and not dialogs
    found = p.evaluate("""() => [...document.querySelectorAll('#messages *')].flatMap(e =>
        [...e.attributes].filter(a => a.name.startsWith('on') || /^\\s*javascript:/i.test(a.value))
          .map(a => e.tagName + ' ' + a.name))""")
    assert found == []
    assert content.locator("script, iframe, form, input, [style]").count() == 0
    user = p.locator("article.msg.user .text")
    assert user.inner_text() == '<b onclick="window.__xss=7">mine</b>' and user.locator("b").count() == 0


def test_reasoning_and_tool_call_cards(page: Page):
    page.choose("tiny-qwen3")  # its template opens a think block
    page.settings(forced("Weighing it.</think>It is sunny."))
    answer = page.send("weather?")
    reasoning = answer.locator("details.reasoning")
    assert reasoning.is_visible() and reasoning.locator("summary").inner_text() == "Reasoning"
    assert reasoning.locator(".reasoning-body").text_content() == "Weighing it."
    assert answer.locator(".content").inner_text() == "It is sunny."

    tool = {"type": "function", "function": {"name": "get_weather", "parameters": {
        "type": "object", "properties": {"city": {"enum": ["Paris"]}}, "required": ["city"],
        "additionalProperties": False}}}
    page.choose(TINY)
    page.settings({"tools": [tool], "tool_choice": "required"})
    card = page.send("and in Paris?").locator(".tool-call")
    assert card.locator(".tool-name code").inner_text() == "get_weather"
    assert json.loads(card.locator(".tool-args").inner_text()) == {"city": "Paris"}


def test_json_schema_output_mode(page: Page):
    page.choose(TINY)
    schema = {"type": "object", "properties": {"answer": {"enum": ["yes"]}}, "required": ["answer"],
              "additionalProperties": False}
    p = page.page
    p.click("#open-settings")
    p.check("[name=json]")
    p.fill("[name=schema]", json.dumps(schema))
    p.click("#settings-save")
    answer = page.send("yes or no?")
    assert page.chats[-1]["response_format"]["json_schema"]["schema"] == schema
    assert json.loads(answer.locator(".content").inner_text()) == {"answer": "yes"}


# -- MCP tools --------------------------------------------------------------------------------------

@pytest.fixture(scope="module")
def mcp_server() -> Iterator[McpServer]:
    s = McpServer()
    yield s
    s.stop()


def test_an_mcp_tool_is_approved_run_and_its_result_answered(page: Page, mcp_server: McpServer):
    """The page lists a real MCP server's tools through the server, the model's call (forced by a named
    tool_choice: the grammar writes it) waits for approval, runs, and its result goes back to the model."""
    p = page.page
    page.choose(TINY)
    p.click("#open-settings")
    p.fill("textarea[name=mcp]", f"{mcp_server.url}\n{dead_url()}")
    p.click("#mcp-check")
    expect(p.locator("#mcp-status li.ok")).to_have_text("test-clock: " + ", ".join(LISTED) + " (bad name left out: "
                                                         "its name has characters tool names cannot have (A-Z, a-z, "
                                                         "0-9, _ . -); broken left out: its input schema is refused: "
                                                         "not a valid JSON Schema (draft 2020-12): at 'properties/x/"
                                                         "type': 'no-such-type' is not valid under any of the given "
                                                         "schemas)")
    expect(p.locator("#mcp-status li.error-text")).to_contain_text("cannot reach")
    forced_call = {"type": "function", "function": {"name": "server_time"}}
    p.fill("textarea[name=extra]", json.dumps({"tool_choice": forced_call, "max_tokens": 64}))
    p.click("#settings-save")

    calling = page.send("What time is it on the server?", wait=False)
    expect(p.locator("#toast")).to_contain_text("is it running")  # the server that is down: said, left out
    card = calling.locator(".tool-call")
    expect(card.locator(".tool-status")).to_have_text("Run this tool?")
    assert card.locator(".tool-name").inner_text() == "tool call server_time · test-clock"
    answer = page.new_answer(lambda: card.locator("button.run").click())
    expect(card.locator(".tool-result pre")).to_have_text(f"The server's clock says {TIME}.")
    assert not answer.locator(".error").is_visible()
    asked, told = page.chats[-2], page.chats[-1]
    assert asked["tool_choice"] == forced_call
    assert [t["function"]["name"] for t in asked["tools"]] == LISTED
    assert "tool_choice" not in told  # after a tool ran, the model answers freely: no loop of forced calls
    call, result = told["messages"][-2], told["messages"][-1]
    assert call["tool_calls"][0]["function"]["name"] == "server_time"
    assert result == {"role": "tool", "tool_call_id": call["tool_calls"][0]["id"],
                      "content": f"The server's clock says {TIME}."}

    calling = page.send("And now?", wait=False)  # "always" for this tool: asked once more, then never
    calling.locator(".tool-call button.always").click()
    expect(calling.locator(".tool-result pre")).to_contain_text(TIME)
    p.wait_for_function("() => !document.body.classList.contains('busy')", polling=100)
    calling = page.send("Once more?", wait=False)
    expect(calling.locator(".tool-result pre")).to_contain_text(TIME)
    assert calling.locator(".tool-approve").count() == 0
    p.wait_for_function("() => !document.body.classList.contains('busy')", polling=100)


def test_a_denied_or_failing_mcp_call_goes_back_to_the_model_and_the_chat_goes_on(page: Page, mcp_server: McpServer):
    p = page.page
    page.choose(TINY)
    p.click("#open-settings")
    p.fill("textarea[name=mcp]", mcp_server.url)
    p.fill("textarea[name=extra]", json.dumps({"tool_choice": {"type": "function", "function": {"name": "fail"}},
                                               "max_tokens": 64}))
    p.click("#settings-save")
    calling = page.send("Break something.", wait=False)
    page.new_answer(lambda: calling.locator(".tool-call button.deny").click())
    expect(calling.locator(".tool-status")).to_have_text("not run: you declined")
    assert page.chats[-1]["messages"][-1]["content"] == "The user did not allow this tool call."
    p.wait_for_function("() => !document.body.classList.contains('busy')", polling=100)
    calling = page.send("Try again.", wait=False)
    page.new_answer(lambda: calling.locator(".tool-call button.run").click())
    expect(calling.locator(".tool-result.failed pre")).to_contain_text("Error executing tool fail")
    assert "Error executing tool fail" in page.chats[-1]["messages"][-1]["content"]


def test_a_repeated_mcp_call_is_not_run_again_and_the_model_is_asked_to_answer(browser: object, looping: SimpleNamespace,
                                                                               mcp_server: McpServer):
    page = Page(browser, looping)
    try:
        p = page.open()
        p.click("#open-settings")
        p.fill("textarea[name=mcp]", mcp_server.url)
        p.click("#settings-save")
        first = page.send("What time is it?", wait=False)
        first.locator(".tool-call button.run").click()
        p.wait_for_function("() => !document.body.classList.contains('busy')", polling=100)  # busy from send to answer
        asked, repeated, answered = page.chats[-3:]
        assert "tools" in asked and "tools" in repeated
        assert [m["role"] for m in repeated["messages"]] == ["user", "assistant", "tool"]
        assert answered["messages"] == repeated["messages"] and "tools" not in answered  # asked again, beside it
        final = p.locator("article.msg.assistant").last
        expect(final.locator(".content")).to_have_text("It is noon.")
        assert final.locator(".branch").inner_text() == "2/2"
        final.locator("button[aria-label='Previous version']").click()
        expect(p.locator("article.msg.assistant").last.locator(".tool-status")).to_contain_text("not run again")
        assert p.locator(".tool-result").count() == 1  # run once
    finally:
        page.close()


# -- errors, keys, keyboard, the network ----------------------------------------------------------

def test_errors_show_what_to_do(page: Page):
    p = page.page
    page.choose(TINY)  # 2048 tokens of context; a long paste becomes an attachment
    p.focus("#prompt")
    p.evaluate("""() => { const data = new DataTransfer(); data.setData('text/plain', 'word '.repeat(3000));
        document.querySelector('#prompt').dispatchEvent(new ClipboardEvent('paste', {clipboardData: data,
          bubbles: true, cancelable: true})); }""")
    assert p.locator("#attachments li").inner_text().startswith("pasted-1.txt")
    assert p.input_value("#prompt") == ""
    error = page.send("summarise this").locator(".error")
    assert "context" in error.locator("strong").inner_text()
    assert "Start a new chat" in error.locator("p").inner_text()
    assert "--- pasted-1.txt ---" in page.chats[-1]["messages"][-1]["content"]

    p.click("#new-chat")
    page.choose("ghost")  # listed, but its file is gone
    error = page.send("hello?").locator(".error")
    assert "could not be loaded" in error.locator("p").inner_text()


def test_keyboard_shift_enter_is_a_new_line(page: Page):
    p = page.page
    p.fill("#prompt", "one")
    p.press("#prompt", "Shift+Enter")
    p.locator("#prompt").press_sequentially("two")
    assert p.input_value("#prompt") == "one\ntwo" and p.locator("article.msg").count() == 0


@pytest.fixture(scope="module")
def keyed(registry_file: Path) -> Iterator[Server]:
    s = Server(registry_file, "--model", TINY, "--api-key", KEY)
    yield s
    s.stop()


def test_the_key_prompt_with_api_key(browser: object, keyed: Server):
    page = Page(browser, keyed)
    p = page.page
    p.goto(keyed.url + "/")
    dialog = p.locator("#key-dialog")
    expect(dialog).to_be_visible()
    p.fill("#key-input", "wrong")
    p.click("#key-save")
    expect(p.locator("#key-why")).to_contain_text("refused")
    p.fill("#key-input", KEY)
    p.click("#key-save")
    p.wait_for_function(MODELS_LISTED, polling=100)
    page.settings(forced("locked"))
    assert page.send("hi").locator(".content").inner_text() == "locked"
    p.reload()  # kept in this browser: asked once
    p.wait_for_function(MODELS_LISTED, polling=100)
    expect(dialog).to_be_hidden()
    page.close()


def test_only_the_server_is_ever_contacted(page: Page):
    """Everything the page needs — scripts, styles, KaTeX's fonts, highlight.js — comes from the server."""
    page.choose(TINY)
    page.settings(forced(RICH))
    page.send("render everything").locator(".katex").first.wait_for()
    page.page.locator(".hljs").first.wait_for()
    page.page.evaluate("document.fonts.ready")
    hosts = {urlsplit(u).netloc for u in page.requested if not u.startswith(("data:", "blob:"))}
    assert hosts == {page.origin}
    assert any("/ui/vendor/katex/fonts/" in u for u in page.requested)  # fonts were needed, and served
    # page.close() (the fixture) fails the test if anything was blocked


PAGE_BYTES = """() => performance.getEntriesByType('navigation').concat(performance.getEntriesByType('resource'))
    .filter(e => e.entryType === 'navigation' || new URL(e.name).pathname.startsWith('/ui/'))
    .reduce((n, e) => n + e.transferSize, 0)"""  # the page and its files (the API calls left out)


def test_first_paint_and_transfer_size(browser: object, web: Server):
    """Measured, not asserted (a shared machine): printed for the notes (pytest -s)."""
    page = Page(browser, web)
    p = page.open()
    fcp = p.evaluate("performance.getEntriesByName('first-contentful-paint')[0].startTime")
    first = p.evaluate(PAGE_BYTES)
    page.choose(TINY)
    page.settings(forced(RICH))
    page.send("everything").locator(".katex-display").wait_for()
    p.locator(".hljs").first.wait_for()
    p.evaluate("document.fonts.ready")
    total = p.evaluate(PAGE_BYTES)
    print(f"\nwebui: first contentful paint {fcp:.0f} ms; transferred {first / 1024:.0f} KiB to first use, "
          f"{total / 1024:.0f} KiB with highlight.js, KaTeX and its fonts")
    assert fcp > 0 and first > 0 and total > first
    page.close()


# -- narrow screens -------------------------------------------------------------------------------

def test_phone_width(browser: object, web: Server):
    page = Page(browser, web, viewport=PHONE, is_mobile=True, has_touch=True)
    p = page.open()
    assert not p.locator("#sidebar").is_visible() or p.evaluate(
        "document.querySelector('#sidebar').getBoundingClientRect().right <= 0")
    p.click("#open-sidebar")
    p.wait_for_function("() => document.querySelector('#sidebar').getBoundingClientRect().left >= 0", polling=50)
    p.click("#close-sidebar")
    page.choose(TINY)
    page.settings(forced("fits"))
    assert page.send("small screen").locator(".content").inner_text() == "fits"
    width = p.evaluate("document.documentElement.scrollWidth")
    assert width <= PHONE["width"], "the page scrolls sideways on a phone"
    page.close()
