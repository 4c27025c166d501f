"""Incremental UTF-8 decoding and stop strings across token boundaries."""

import pytest

from localchat.engine.text import StopMatcher, Utf8Stream

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
