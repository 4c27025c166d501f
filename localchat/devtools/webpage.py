"""The chat page in a real Chromium, driven by Playwright: what the browser tests
(tests/test_webui.py) and scripts/screenshots share. Debian's Chromium, or LOCALCHAT_CHROMIUM."""

from __future__ import annotations

import json
import os
import shutil
from collections.abc import Callable
from urllib.parse import urlsplit

from localchat.serve_process import ServeProcess

CHROMIUM = os.environ.get("LOCALCHAT_CHROMIUM") or next(
    (p for p in map(shutil.which, ("chromium", "chromium-browser", "google-chrome")) if p), None)
ARGS = ["--headless", "--no-sandbox", "--disable-gpu", "--disable-quic", "--no-first-run",
        "--disable-background-networking", "--disable-component-update", "--disable-sync"]
# Functions, not expressions: the page's CSP forbids eval, which Playwright uses for an expression.
MODELS_LISTED = "() => document.querySelector('#model').options.length > 1"
DESKTOP = {"width": 1280, "height": 800}
PHONE = {"width": 390, "height": 844}


class Page:
    """One browser context (fresh storage) on the server, its network limited to the server."""

    def __init__(self, browser: object, server: ServeProcess, **options: object) -> None:
        self.server = server
        self.origin = urlsplit(server.url).netloc
        self.context = browser.new_context(**{"viewport": DESKTOP, **options})  # type: ignore[attr-defined]
        self.blocked: list[str] = []
        self.requested: list[str] = []
        self.chats: list[dict] = []  # the bodies of the page's chat requests
        self.errors: list[str] = []
        self.context.route("**/*", self._route)
        self.page = self.context.new_page()
        self.page.set_default_timeout(60_000)
        self.page.on("pageerror", lambda e: self.errors.append(str(e)))
        self.page.on("request", self._request)

    def _route(self, route: object) -> None:
        url = route.request.url  # type: ignore[attr-defined]
        self.requested.append(url)
        if urlsplit(url).netloc == self.origin:
            route.continue_()  # type: ignore[attr-defined]
        else:
            self.blocked.append(url)
            route.abort()  # type: ignore[attr-defined]

    def _request(self, request: object) -> None:
        if request.url.endswith("/v1/chat/completions"):  # type: ignore[attr-defined]
            self.chats.append(request.post_data_json)  # type: ignore[attr-defined]

    def open(self) -> object:
        self.page.goto(self.server.url + "/")
        self.page.wait_for_function(MODELS_LISTED, polling=100)
        return self.page

    def choose(self, model: str) -> None:
        self.page.select_option("#model", model)

    def settings(self, extra: dict | None = None, **fields: str) -> None:
        p = self.page
        p.click("#open-settings")
        p.fill("textarea[name=extra]", json.dumps(extra) if extra else "")
        for name, value in fields.items():
            p.fill(f"[name={name}]", value)
        p.click("#settings-save")
        assert not p.is_visible("#settings"), p.inner_text("#settings-error")

    def send(self, text: str, wait: bool = True) -> object:
        """Type a message and press Enter: the new answer's <article> (once it has ended, if wait)."""
        self.page.fill("#prompt", text)
        return self.new_answer(lambda: self.page.press("#prompt", "Enter"), wait)

    def new_answer(self, act: Callable[[], object], wait: bool = True) -> object:
        """Do `act`; the answer it starts (once it has ended, if wait)."""
        p = self.page
        before = p.eval_on_selector_all("article.msg.assistant", "els => els.map(e => e.dataset.id)")
        act()
        new = ("ids => [...document.querySelectorAll('article.msg.assistant')]"
               ".map(e => e.dataset.id).find(id => !ids.includes(id))")
        p.wait_for_function(new, arg=before, polling=50)
        article = p.locator(f"article.msg.assistant[data-id='{p.evaluate(new, before)}']")
        if wait:
            from playwright.sync_api import expect

            expect(article).to_have_attribute("aria-busy", "false", timeout=60_000)
        return article

    def close(self) -> None:
        self.context.close()
        assert not self.errors, f"errors in the page: {self.errors}"
        assert not self.blocked, f"the page tried to reach other hosts: {self.blocked}"
