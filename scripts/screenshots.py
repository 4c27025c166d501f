"""The chat page's pictures in README.md and docs/webui.md, taken from the shipped default model
answering a real question (desktop and phone, light and dark) in Debian's Chromium.

    scripts/screenshots [--out docs] [--model NAME] [--question TEXT] [--tool-model NAME]

Starts `localchat serve` with the shipped registry (its default model unless --model), opens the
page in a fresh browser context per picture, asks the question (seed 1; a prompt read from the
cache may still sample another answer), waits for the whole answer, opens the status panel on the
desktop pictures, and writes docs/webui-{desktop,phone}-{light,dark}.png. Then docs/webui-mcp.png:
an MCP server's tool (localchat/devtools/mcp_server.py, the SDK's MCPServer, its clock real) added in Settings,
"What time is it on the server?" asked of --tool-model (default qwen2.5-coder-1.5b: the 0.5B
default calls the tool but cannot answer from its result), each call approved with Run. What the
model writes is its own: look at the pictures before committing them."""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

from localchat.devtools import isolate_home  # noqa: E402
from localchat.serve_process import Server  # noqa: E402

isolate_home()

from localchat.models import Registry, shipped_config  # noqa: E402

QUESTION = "Write a Python function that tells whether a word is a palindrome, with a short example."


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--out", type=Path, default=Path(__file__).resolve().parent.parent / "docs")
    parser.add_argument("--model", help="the model that answers (default: the shipped registry's default)")
    parser.add_argument("--question", default=QUESTION)
    parser.add_argument("--tool-model", default="qwen2.5-coder-1.5b", help="the model of the MCP picture")
    parser.add_argument("--mcp-only", action="store_true", help="take the MCP picture only")
    args = parser.parse_args()
    from playwright import sync_api as playwright_api

    from localchat.devtools.mcp_server import McpServer
    from localchat.devtools.webpage import ARGS, CHROMIUM, DESKTOP, PHONE, Page

    if not CHROMIUM:
        sys.exit("no Chromium here (Debian: apt-get install chromium), or LOCALCHAT_CHROMIUM=/path/to/chromium")

    model = args.model or Registry.load(shipped_config()).default
    server = Server(shipped_config(), "--model", model)
    clock = McpServer("--now")
    try:
        with playwright_api.sync_playwright() as p:
            browser = p.chromium.launch(executable_path=CHROMIUM, args=ARGS)
            for size in () if args.mcp_only else ("desktop", "phone"):
                for scheme in ("light", "dark"):
                    options = {"viewport": DESKTOP, "device_scale_factor": 1} if size == "desktop" else \
                        {"viewport": PHONE, "device_scale_factor": 2, "is_mobile": True, "has_touch": True}
                    page = Page(browser, server, color_scheme=scheme, **options)
                    tab = page.open()
                    page.choose(model)
                    page.settings(seed="1")
                    page.send(args.question)
                    tab.locator(".hljs").first.wait_for()
                    tab.evaluate("() => document.fonts.ready")
                    if size == "desktop":
                        tab.click("#open-status")
                        tab.locator("#status .loaded-model").first.wait_for()
                    path = args.out / f"webui-{size}-{scheme}.png"
                    tab.screenshot(path=str(path))
                    print(f"{path}: {model} answering {args.question!r}", flush=True)
                    page.close()
            mcp_picture(Page(browser, server, viewport=DESKTOP, device_scale_factor=1), clock.url, args.tool_model,
                        args.out / "webui-mcp.png")
            browser.close()
    finally:
        clock.stop()
        server.stop()
    return 0


def mcp_picture(page: object, url: str, model: str, path: Path) -> None:
    question = "What time is it on the server?"
    tab = page.open()  # type: ignore[attr-defined]
    page.choose(model)  # type: ignore[attr-defined]
    tab.click("#open-settings")
    tab.fill("textarea[name=mcp]", url)
    tab.fill("[name=seed]", "1")
    tab.click("#mcp-check")
    tab.locator("#mcp-status li.ok").wait_for()
    tab.click("#settings-save")
    tab.fill("#prompt", question)
    tab.press("#prompt", "Enter")
    tab.wait_for_function("() => document.body.classList.contains('busy')", polling=100)
    quiet = 0  # the page is idle a moment between rounds: done once it stays idle
    while quiet < 10:
        run = tab.locator(".tool-approve button.run")
        if run.count():
            run.first.click()
        quiet = 0 if tab.evaluate("() => document.body.classList.contains('busy')") else quiet + 1
        tab.wait_for_timeout(200)
    tab.screenshot(path=str(path))
    print(f"{path}: {model} asked {question!r} with an MCP server's tool", flush=True)
    page.close()  # type: ignore[attr-defined]


if __name__ == "__main__":
    sys.exit(main())
