"""The chat page's pictures in README.md and docs/webui.md, taken from the shipped default model
answering a real question (desktop and phone, light and dark) in Debian's Chromium.

    scripts/screenshots [--out docs] [--model NAME] [--question TEXT]

Starts `localchat serve` with the shipped registry (its default model unless --model), opens the
page in a fresh browser context per picture, asks the question (seed 1; a prompt read from the
cache may still sample another answer), waits for the whole answer, opens the status panel on the
desktop pictures, and writes docs/webui-{desktop,phone}-{light,dark}.png. What the model writes is
its own: look at the pictures before committing them."""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent / "tests"))
from conftest import Server  # noqa: E402

from localchat.models import Registry, shipped_config  # noqa: E402

QUESTION = "Write a Python function that tells whether a word is a palindrome, with a short example."


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--out", type=Path, default=Path(__file__).resolve().parent.parent / "docs")
    parser.add_argument("--model", help="the model that answers (default: the shipped registry's default)")
    parser.add_argument("--question", default=QUESTION)
    args = parser.parse_args()
    # (the page helpers of the browser tests; importing them skips, with the reason, where no Chromium is)
    from test_webui import ARGS, CHROMIUM, DESKTOP, PHONE, Page, playwright_api

    model = args.model or Registry.load(shipped_config()).default
    server = Server(shipped_config(), "--model", model)
    try:
        with playwright_api.sync_playwright() as p:
            browser = p.chromium.launch(executable_path=CHROMIUM, args=ARGS)
            for size in ("desktop", "phone"):
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
            browser.close()
    finally:
        server.stop()
    return 0


if __name__ == "__main__":
    sys.exit(main())
