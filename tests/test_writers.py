"""Who writes a request's state and a slot's: the scheduler (engine/core/scheduler.py) and the two
classes' own modules (engine/state/). The prefix cache answers with what a slot holds and what a
request reads (a Placement, a Landed), the media feed with the prompt it expanded and the chunks
it decoded, the executor with the sequences it made, the decoder with the drafted cells it
dropped (StepPlan.cuts); the scheduler applies them, adds each step's tokens to their slots
(`advance`) and copies an n > 1 prompt's cells to the other slots. A write is an
assignment, `del` or `+=` to a field of Job or Slot, an in-place change of one (append, extend,
pop, clear, …), or a call of a Slot method that changes it (keep, add_media, copy_from), on an
object named as the engine names the scheduler's: `job`, `slot`, `lead`, `s`, `other`, or
`….slot` / `….job` (a Sequence's slot, a row's), or an item of `….slots`."""

from __future__ import annotations

import ast
from pathlib import Path

import pytest

ENGINE = Path(__file__).resolve().parents[1] / "localchat" / "engine"
OWNERS = {"core/scheduler.py", "state/job.py", "state/slot.py",
          "fake.py"}  # (the scripted engine: jobs of its own, no slots)
NAMES = {"job", "slot", "lead", "s", "other", "reads"}
MUTATORS = {"append", "extend", "pop", "clear", "insert", "remove", "sort"}
SLOT_METHODS = {"keep", "add_media", "copy_from"}
pytestmark = pytest.mark.fast


def _fields() -> set[str]:
    out = set()
    for path, cls in (("state/job.py", "Job"), ("state/slot.py", "Slot")):
        for node in ast.walk(ast.parse((ENGINE / path).read_text())):
            if isinstance(node, ast.ClassDef) and node.name == cls:
                for n in ast.walk(node):
                    if isinstance(n, ast.Attribute) and isinstance(n.ctx, ast.Store) and \
                            isinstance(n.value, ast.Name) and n.value.id == "self":
                        out.add(n.attr)
                    elif isinstance(n, ast.AnnAssign) and isinstance(n.target, ast.Name):
                        out.add(n.target.id)
    return out


def _theirs(node: ast.expr) -> bool:
    """Whether an expression names the scheduler's job or slot (see the module's docstring), also
    as an item of a list of them (`job.slots[0]`, `self.slots[i]`)."""
    while isinstance(node, ast.Subscript):
        node = node.value
    if isinstance(node, ast.Name):
        return node.id in NAMES
    return isinstance(node, ast.Attribute) and node.attr in ("slot", "job", "lead", "slots")


def writes(source: str, fields: set[str]) -> list[tuple[int, str, str]]:
    """(line, function, what) of each write in a module's source."""
    found = []

    def visit(node: ast.AST, function: str) -> None:
        for child in ast.iter_child_nodes(node):
            name = child.name if isinstance(child, (ast.FunctionDef, ast.AsyncFunctionDef)) else function
            targets = []
            if isinstance(child, ast.Assign):
                targets = child.targets
            elif isinstance(child, (ast.AugAssign, ast.AnnAssign)):
                targets = [child.target]
            elif isinstance(child, ast.Delete):
                targets = child.targets
            for target in [e for t in targets for e in (t.elts if isinstance(t, ast.Tuple) else [t])]:
                while isinstance(target, ast.Subscript):
                    target = target.value
                if isinstance(target, ast.Attribute) and target.attr in fields and _theirs(target.value):
                    found.append((child.lineno, name, ast.unparse(target)))
            if isinstance(child, ast.Call) and isinstance(child.func, ast.Attribute):
                f = child.func
                if (f.attr in MUTATORS and isinstance(f.value, ast.Attribute) and f.value.attr in fields
                        and _theirs(f.value.value)) or (f.attr in SLOT_METHODS and _theirs(f.value)):
                    found.append((child.lineno, name, ast.unparse(f) + "()"))
            visit(child, name)
    visit(ast.parse(source), "")
    return found


def test_only_the_scheduler_writes_jobs_and_slots():
    fields = _fields()
    assert {"cells", "pending", "jumps", "busy", "seqs"} <= fields
    bad = [f"{path}:{line} in {function}: {what}"
           for path in sorted(ENGINE.rglob("*.py")) if str(path.relative_to(ENGINE)) not in OWNERS
           for line, function, what in writes(path.read_text(), fields)]
    assert not bad, "\n".join(bad)


def test_the_check_sees_each_kind_of_write():
    fields = _fields()
    source = '''
def f(job, slot, seq):
    job.pending = []
    job.cached += 1
    slot.cells.append(1)
    del job.pending[:3]
    seq.slot.keep(0)
    job.jumps, job.moved = [], None
    job.slots[0].cells.extend([1])
    self.slots[2].busy = True
    held.cells = []
'''
    assert [what for _, _, what in writes(source, fields)] == [
        "job.pending", "job.cached", "slot.cells.append()", "job.pending", "seq.slot.keep()", "job.jumps",
        "job.moved", "job.slots[0].cells.extend()", "self.slots[2].busy"]
