"""The tests' `localchat serve` (serve_process.py's ServeProcess) writes its log to a file the tests read
while it runs: reading it never loses or moves a line the server writes meanwhile. (The server's
stdout and stderr were that file's handle: its position was theirs, so a read that seeked it made
the server write its next line over the start of the file; an access-log line then went missing,
test_runaway.py's "no access-log line for loop-cancel".)"""

from __future__ import annotations

import os
import subprocess
import sys

import pytest

from localchat.serve_process import ServeProcess

pytestmark = pytest.mark.fast

LINES = 1000
# a line at a time, as the server logs, spread over a second or so of the reads
WRITER = (f"import time\nfor i in range({LINES}):\n    print(f'{{i:05d}} POST /v1/chat/completions 200', flush=True)\n"
          "    time.sleep(0.0003)")


def test_reading_a_servers_log_while_it_writes_loses_no_line(tmp_path):
    server = ServeProcess.__new__(ServeProcess)  # its log alone, as ServeProcess.__init__ makes it, written by a stand-in
    server.log = tmp_path / "server.log"
    with open(server.log, "w") as out:
        writer = subprocess.Popen([sys.executable, "-c", WRITER], stdout=out, stderr=subprocess.STDOUT,
                                  env={**os.environ, "PYTHONUNBUFFERED": "1"})
    try:
        reads = 0
        while writer.poll() is None:  # read as the tests do (log_line polls), while every line is written
            server.output()
            reads += 1
        assert writer.returncode == 0
        expected = "".join(f"{i:05d} POST /v1/chat/completions 200\n" for i in range(LINES))
        out = server.output()
        lost = sorted(set(expected.splitlines()) - set(out.splitlines()))
        assert out == expected, f"{len(lost)} lines lost or overwritten (first {lost[:5]}) over {reads} reads"
    finally:
        writer.kill()
        writer.wait()
