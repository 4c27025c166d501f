"""The terminal chat's input line (prompt_toolkit): completion of slash commands and `/set` keys,
Alt-Enter for a new line, the history kept between runs."""

from __future__ import annotations

from collections.abc import Iterable, Sequence

from prompt_toolkit import PromptSession
from prompt_toolkit.completion import Completer, Completion
from prompt_toolkit.history import FileHistory
from prompt_toolkit.key_binding import KeyBindings

from .models import paths


class _Completer(Completer):
    def __init__(self, commands: Sequence[str], settings: Sequence[str]) -> None:
        self.commands, self.settings = commands, settings

    def get_completions(self, document, complete_event) -> Iterable[Completion]:
        text = document.text_before_cursor
        if not text.startswith("/"):
            return
        if " " not in text:
            for name in dict.fromkeys(self.commands):
                if name.startswith(text):
                    yield Completion(name, start_position=-len(text))
        elif text.startswith("/set ") and text.count(" ") == 1:
            word = text[5:]
            for key in self.settings:
                if key.startswith(word):
                    yield Completion(key, start_position=-len(word))


def prompt_session(commands: Sequence[str], settings: Sequence[str]) -> PromptSession[str]:
    history = paths.history_file()
    history.parent.mkdir(parents=True, exist_ok=True)
    keys = KeyBindings()

    @keys.add("escape", "enter")
    def _newline(event) -> None:
        event.current_buffer.insert_text("\n")

    return PromptSession(history=FileHistory(str(history)), completer=_Completer(commands, settings),
                         key_bindings=keys, complete_while_typing=False)
