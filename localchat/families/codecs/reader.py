"""Reading a block of calls in a `Shape` (shape.py) as it streams.

Strict (the text follows the shape's grammar): each call is announced once its name is complete
and its arguments stream as they come. Lenient (whatever a model wrote): a call is held until
it is complete and checked (a known tool, arguments that parse); a missing closing text or a
cut-off value is repaired; what cannot be read is given back as text, never dropped."""

from __future__ import annotations

import json
from typing import Any, Protocol

from ...neutral import Delta, Piece, ToolCallArguments, ToolCallStart, new_call_id
from .base import BlockParser, ToolSet
from .jsonscan import JsonScanner, loads_object, repair
from .pattern import FAIL, PARTIAL, held_back, match
from .xmlargs import XmlArgs, properties
from .xmlreader import XmlArgsReader

WAIT, GO = False, True
KEEP = 4096  # strict: text already read is dropped from the buffer past this much


class ShapeLike(Protocol):
    """What a reader reads of a shape: shape.py's `Shape` (which makes its parsers here, so this
    module names the texts it reads instead of importing it)."""

    open: str
    close: str
    call_open: str
    separator: str
    call_close: str
    name_key: str
    args_key: str
    name_end: str
    xml: XmlArgs | None

    @property
    def json_form(self) -> bool: ...

    @property
    def mids(self) -> tuple[str, ...]: ...

    @property
    def post(self) -> str: ...


class CallReader(BlockParser):
    """What every reader of a block of calls keeps and does: the text so far, the state it is in
    (a method `_STATE(final) -> GO | WAIT`), the calls read, and the outcomes (a call committed, a
    call failed, no call at all, the end of the block)."""

    def __init__(self, shape: ShapeLike, tools: ToolSet, first: int, strict: bool, marker: str) -> None:
        self.shape, self.tools, self.first, self.strict = shape, tools, first, strict
        self.marker_len = len(marker)
        self.buf, self.pos = "", 0
        self.state = "open" if shape.open else "pre"
        self.calls = 0
        self.staged: list[Piece] = []  # the current call's pieces, until it is complete (lenient)
        self.call_at = 0  # where the current call's text starts in buf
        self.args_at = 0  # where the current call's arguments start in buf
        self.name = ""
        self.out: list[Piece] = []

    @property
    def index(self) -> int:
        return self.first + self.calls

    def _open(self, final: bool) -> bool:
        at = match(self.shape.open, self.buf, self.pos, final)
        if at == PARTIAL:
            return WAIT
        if at == FAIL:
            return self._give_up()
        self.pos, self.state = at, "pre"
        return GO

    def _emit(self, piece: Piece) -> None:
        (self.out if self.strict else self.staged).append(piece)

    def _commit(self) -> None:
        self.out += self.staged
        self.staged = []
        self.calls += 1

    def _fail_call(self) -> bool:
        """This call cannot be read. Strict, once announced: it stands as written. Else its text
        (and what follows) is text again."""
        if self.strict and self.state in ("mid", "args", "post"):
            self.calls += 1
            return self._end()
        self.staged, self.pos = [], self.call_at
        return self._give_up()

    def _give_up(self) -> bool:
        """No call here: the marker is text, and what follows it is read as text again."""
        if not self.calls:
            self.out.append(Delta(self.buf[:self.marker_len]))
            self.pos = self.marker_len
        return self._end()

    def _end(self) -> bool:
        self.done, self.leftover = True, self.buf[self.pos:]
        return GO


class ShapeParser(CallReader):
    def __init__(self, shape: ShapeLike, tools: ToolSet, first: int, strict: bool, marker: str) -> None:
        super().__init__(shape, tools, first, strict, marker)
        self.scanner: JsonScanner | None = None
        self.xml: XmlArgsReader | None = None
        self.whole = shape.json_form and not strict  # lenient JSON form: read whole objects, any key order

    def push(self, text: str, final: bool = False) -> list[Piece]:
        self.buf += text
        while not self.done and getattr(self, f"_{self.state}")(final):
            pass
        if final and not self.done:
            self._truncated()
        if self.strict and not self.done and self.pos > KEEP:
            cut = self.pos
            self.buf, self.pos, self.call_at, self.args_at = self.buf[cut:], 0, self.call_at - cut, self.args_at - cut
        out, self.out = self.out, []
        return out

    # -- states (GO: went on; WAIT: needs more text) -------------------------------------------

    def _pre(self, final: bool) -> bool:
        s = self.shape
        pre = s.call_open if self.whole else s.pre
        at = match((s.separator + pre) if self.calls else pre, self.buf, self.pos, final)
        if at >= 0 and self.whole:  # an object must follow
            brace = match(" {", self.buf, at, final)
            at = at if brace >= 0 else brace
        if at >= 0:
            self.call_at, self.pos = self.pos, at
            self.state = "object" if self.whole else "name"
            return GO
        closing = match(s.close, self.buf, self.pos, final) if s.close else FAIL
        if at == PARTIAL or closing == PARTIAL:
            return WAIT
        if closing >= 0:
            self.pos = closing
        return self._end() if self.calls else self._give_up()

    def _name(self, final: bool) -> bool:
        if self.shape.json_form:
            end = JsonScanner().feed(self.buf[self.pos:])
            if end is None:
                return WAIT if not final else self._fail_call()
            try:
                name = json.loads(self.buf[self.pos:self.pos + end])
            except ValueError:
                return self._fail_call()
            self.pos += end
        else:
            rest = self.buf[self.pos:]
            stops = [i for i in (rest.find(e) for e in self._name_stops()) if i >= 0]
            cut = min(stops + [len(rest)])
            space = next((i for i, c in enumerate(rest[:cut]) if c.isspace() and rest[:i].strip()), cut)
            if cut == len(rest) and not final and len(rest) < 256:  # (a stop that starts before a space: Kimi K3)
                keep = held_back(rest, tuple(self._name_stops()))
                if keep and len(rest) - keep <= space:
                    return WAIT
            if min(cut, space) == len(rest) and not final:
                return WAIT if len(rest) < 256 else self._fail_call()
            name, self.pos = rest[:min(cut, space)].strip(), self.pos + min(cut, space)
        if not isinstance(name, str) or not name:
            return self._fail_call()
        if not self.strict:  # (strict: the grammar wrote a declared name)
            name = self.tools.resolve(name)
            if name is None:
                return self._fail_call()
        self.name, self.state = name, "mid"
        self._emit(ToolCallStart(self.index, new_call_id(), name))
        return GO

    def _mid(self, final: bool) -> bool:
        results = [match(" " + m, self.buf, self.pos, final) for m in self.shape.mids]  # (JSON may end in spaces)
        done = [r for r in results if r >= 0]
        if done:
            self.pos, self.state = done[0], "args"
            if self.shape.xml is not None:
                schema = self.tools[self.name].parameters if self.name in self.tools else None
                self.xml = XmlArgsReader(self.shape.xml, properties(schema), self.shape.post, self.strict)
            else:
                self.scanner, self.args_at = JsonScanner(), self.pos
            return GO
        return WAIT if PARTIAL in results else self._fail_call()

    def _args(self, final: bool) -> bool:
        if self.xml is not None:
            fragments, self.pos, finished = self.xml.read(self.buf, self.pos, final)
            for fragment in fragments:
                self._emit(ToolCallArguments(self.index, fragment))
            if finished is None:
                return self._fail_call()
            if finished:
                self.xml, self.state = None, "post"
            return GO if finished else WAIT
        assert self.scanner is not None
        end = self.scanner.feed(self.buf[self.args_at + self.scanner.seen:])
        stop = self.args_at + end if end is not None else len(self.buf)
        if self.strict and stop > self.pos:
            self._emit(ToolCallArguments(self.index, self.buf[self.pos:stop]))
            self.pos = stop
        if end is None:
            return WAIT
        if not self.strict:
            arguments = loads_object(self.buf[self.args_at:stop])
            if arguments is None:
                return self._fail_call()
            self._emit(ToolCallArguments(self.index, json.dumps(arguments, ensure_ascii=False)))
        self.pos, self.scanner, self.state = stop, None, "post"
        return GO

    def _object(self, final: bool) -> bool:
        """Lenient JSON form: the whole object at once, whatever the order of its keys."""
        end = JsonScanner().feed(self.buf[self.pos:])
        if end is None and not final:
            return WAIT
        text = self.buf[self.pos:self.pos + end] if end is not None else _repaired(self.buf[self.pos:])
        call = _named_call(text, self.shape, repaired=end is None) if text else None
        name = self.tools.resolve(call[0]) if call is not None else None
        if call is None or name is None:
            return self._fail_call()
        self.pos = self.pos + end if end is not None else len(self.buf)
        self._emit(ToolCallStart(self.index, new_call_id(), name))
        self._emit(ToolCallArguments(self.index, json.dumps(call[1], ensure_ascii=False)))
        self.state = "post"
        return GO

    def _post(self, final: bool) -> bool:
        if self.shape.json_form and not self.whole:  # the rest of the call's object (other keys a model adds)
            scanner = JsonScanner()
            scanner.stack, scanner.started = ["{"], True
            end = scanner.feed(self.buf[self.pos:])
            if end is None:
                return WAIT if not final else self._fail_call()
            self.pos += end
            self.whole = True  # (only the closing text is left; set back for the next call)
        post = " " + self.shape.call_close if self.whole else " " + self.shape.post  # (JSON may end in spaces)
        at = match(post, self.buf, self.pos, final)
        if at == PARTIAL:
            return WAIT
        self._commit()
        self.whole = self.shape.json_form and not self.strict
        if at == FAIL:  # a missing closing text: the call stands, the block ends here
            if final and match(post, self.buf, self.pos, False) == PARTIAL:
                self.pos = len(self.buf)  # (the output ended inside it)
            return self._end()
        self.pos, self.state = at, "pre"
        return GO

    # -- outcomes ----------------------------------------------------------------------------

    def _name_stops(self) -> list[str]:
        """Texts that end a name: what follows it in the syntax (its first fixed part)."""
        s = self.shape
        stops = [m.split("{")[0].strip() for m in s.mids]
        if not all(stops):  # only whitespace between the name and the arguments
            stops.append(s.post.split("{")[0].strip())
            stops.append(s.xml.key_open.strip() if s.xml is not None else "{")
        return [x for x in stops if x]

    def _truncated(self) -> None:
        """The output ended inside a call's arguments: close them if that can be done."""
        if self.xml is not None:
            fragments, _, _ = self.xml.read(self.buf, self.pos, final=True, cut=True)
            for fragment in fragments:
                self._emit(ToolCallArguments(self.index, fragment))
            self._commit()
            self.pos = len(self.buf)  # (what is left is the cut-off end of this call)
            self._end()
        elif self.strict:
            self.calls += 1
            self.pos = len(self.buf)
            self._end()
        else:
            try:
                arguments = repair(self.buf[self.args_at:])
            except ValueError:
                arguments = None
            if not isinstance(arguments, dict):
                self._fail_call()
                return
            self._emit(ToolCallArguments(self.index, json.dumps(arguments, ensure_ascii=False)))
            self._commit()
            self.pos = len(self.buf)
            self._end()


def _named_call(text: str, shape: ShapeLike, repaired: bool = False) -> tuple[str, Any] | None:
    """(name, arguments) from a call object, whichever keys a model used; it must have an object
    of arguments (a cut-off one must have got as far as them)."""
    obj = loads_object(text)
    if obj is None:
        return None
    inner = obj.get("function")  # OpenAI's own call item, {"type": "function", "function": {"name": N, "arguments": A}}
    if isinstance(inner, dict) and isinstance(inner.get("name"), str) and "arguments" in inner:
        obj = inner
    name = next((obj[k] for k in (shape.name_key, "name", "tool_name", "function") if isinstance(obj.get(k), str)), None)
    keys = [k for k in (shape.args_key, "arguments", "parameters", "args", "input") if k in obj]
    if not keys:  # a JSON object with a tool's name in it, but no arguments: not a call
        return None
    args = obj[keys[0]] if keys else {}
    if isinstance(args, str):
        args = loads_object(args)
    return (name, args) if name and isinstance(args, dict) else None


def _repaired(text: str) -> str:
    try:
        return json.dumps(repair(text))
    except ValueError:
        return ""
