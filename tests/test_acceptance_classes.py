"""scripts/acceptance's classes of a failed run (localchat/devtools/clients.py): a tool call left as
text is the server's where it names a tool the client declared, in whichever form it was written,
and in whichever turn the client showed it (a failed run has no final answer)."""

from __future__ import annotations

from pathlib import Path

import pytest

from localchat.devtools.clients import Run, classify
from localchat.families.codecs.base import ToolSet
from localchat.neutral import ToolSpec

DECLARED = ToolSet([ToolSpec("run_commands", parameters={"type": "object"}), ToolSpec("Bash", parameters={"type": "object"})])
LOG = "08:47:01 POST /v1/chat/completions 200 prompt=8000 cached=7900\n"

CASES = [
    # Cline through the 1.5B (scripts/acceptance, cline, plain): no final answer, the element in an earlier turn
    ("", '<user_input mode="plan">\n  <p>Asking.</p>\n</user_input>\n\n<tools>\n  <run_commands commands=\'["echo"]\'/>'
         "\n</tools>", "server: a call left as text"),
    ("", "<tools>\n  <say text='hi'/>\n</tools>", "model: a call to a tool the client does not declare (say)"),
    # Claude Code through the 1.5B (scripts/acceptance, claude, tool): a call to a tool this request did not send
    ("", '{"name": "TaskStop", "arguments": {}}\n\n---\n\n<system-reminder>', "model: a call to a tool the client does not "
                                                                             "declare (TaskStop)"),
    ('{"name": "bash", "arguments": {"command": "ls"}}', "", "server: a call left as text"),
    ('<tools>\n  <function name="Bash" arguments=\'{"command": "ls"}\'/>\n</tools>', "", "server: a call left as text"),
    # Qwen Code through the 1.5B (scripts/acceptance, qwen, tool): Qwen3-Coder's syntax, which the Hermes reader
    # does not read yet
    ("<function=run_commands>\n<parameter=command>\necho localchat-acceptance-42\n</parameter>\n</function>", "",
     "server: a call left as text"),
    ("", "Hello!", "model: no answer"),
]


@pytest.mark.fast
@pytest.mark.parametrize("answer, said, expected", CASES, ids=[str(i) for i in range(len(CASES))])
def test_a_call_left_as_text_is_classed_by_the_tool_it_names(answer: str, said: str, expected: str):
    run = Run("cline", "plain", "http://127.0.0.1:1", "m", 32768, (Path("/nonexistent"),) * 2)
    try:
        run.answer, run.said, run.code = answer, said, 0 if answer else 1
        assert classify(run, LOG, DECLARED) == expected
    finally:
        run.remove()
