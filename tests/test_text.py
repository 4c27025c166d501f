"""Incremental UTF-8 decoding, stop strings across token boundaries, and the editor limits (/infill)."""

import pytest

from localchat.engine.sampling.text import LineLimits, StopMatcher, Utf8Stream

pytestmark = pytest.mark.fast  # the fast tier (scripts/test --fast)


def test_utf8_never_splits_a_character():
    data = "é🌊ü".encode()
    stream = Utf8Stream()
    out = [stream.push(data[i:i + 1]) for i in range(len(data))]
    assert "".join(out) + stream.flush() == "é🌊ü"
    assert all(len(piece.encode()) in (0, 2, 4) for piece in out)  # whole characters or nothing


def test_utf8_invalid_bytes_become_replacement_characters():
    stream = Utf8Stream()
    assert stream.push(b"a\xff") == "a\ufffd"
    assert stream.push(b"\xe2\x82") == ""
    assert stream.flush() == "\ufffd"


def test_stop_string_split_over_pieces_is_held_back_then_cut():
    m = StopMatcher(["</answer>"])
    assert m.push("The sea</") == ("The sea", False)
    assert m.push("ans") == ("", False)
    assert m.push("wer> and more") == ("", True)


def test_held_text_is_released_when_it_stops_matching():
    m = StopMatcher(["STOP"])
    assert m.push("ST") == ("", False)
    assert m.push("x") == ("STx", False)
    assert m.push("S") == ("", False)
    assert m.flush() == "S"


def test_earliest_of_several_stops_wins():
    m = StopMatcher(["world", "lo w"])
    assert m.push("hello world") == ("hel", True)


def _run(limits: LineLimits, pieces: list[tuple[str, float]]) -> tuple[str, bool]:
    out = []
    for text, now in pieces:
        emitted, ended = limits.push(text, now)
        out.append(emitted)
        if ended:
            return "".join(out), True
    return "".join(out) + limits.flush(), False


def test_a_line_indented_less_than_n_indent_ends_the_answer_before_it():
    # llama.vscode sends the cursor line's indentation: a completion stays inside the block
    text, ended = _run(LineLimits(4, 0), [("x = 1\n", 0), ("    y", 0), (" = 2\n  ", 0), ("  z = 3\n", 0),
                                          ("  ", 0), ("w = 4\n", 0)])
    assert (text, ended) == ("x = 1\n    y = 2\n    z = 3\n", True)
    # the first line is the cursor's own: never checked; a blank line ends it too (as llama-server)
    assert _run(LineLimits(4, 0), [("a", 0), ("\n", 0), ("\n", 0), ("    b", 0)]) == ("a\n", True)
    # a tab counts as one; whitespace held at the very end comes out when the answer ends by itself
    assert _run(LineLimits(1, 0), [("a\n\tb\n", 0), ("  ", 0)]) == ("a\n\tb\n  ", False)
    assert _run(LineLimits(0, 0), [("a\nb\n", 0)]) == ("a\nb\n", False)  # 0: off


def test_a_line_break_after_the_time_limit_ends_the_answer_after_that_token():
    # the clock starts at the first token; only a token holding a line break can end the answer
    limits = LineLimits(0, 500)
    assert _run(limits, [("a", 10.0), ("b", 10.2), ("c", 10.6), ("d\n  e", 10.7), ("f", 10.8)]) == ("abcd\n  e", True)
    assert _run(LineLimits(0, 500), [("a\n", 10.0), ("b\n", 10.4), ("c", 10.6)]) == ("a\nb\nc", False)
    assert _run(LineLimits(0, 0), [("a\n", 0.0), ("b\n", 99.0)]) == ("a\nb\n", False)
