"""The template conformance table: every chat template in llama.cpp's models/templates at the
version this project pins (read from the llama-cpp-python sdist, which pip downloads into a
cache folder the first time), each in a tiny GGUF with the special tokens it uses, served by
one real `localchat serve`:

    scripts/families [--only SUBSTRING ...] [--markdown] [--keep DIR]

Columns: the family chosen and its tool-call codec; `renders`: a conversation with a system
prompt, tools, an assistant's tool call and the tool's result is answered (the server renders
it); `history`: the call as the template itself writes it reads back through the codec (same
name, same arguments); `call`: tool_choice "required" on the chat route comes back as a parsed
call whose arguments validate against the schema; `reasoning`: when the template leaves the
model thinking, the reasoning is split from the answer; `exact`: localchat renders what the
template itself renders, byte for byte (scripts/families_exact.py: plain jinja2 set up as Hugging
Face and llama.cpp set it up, the messages as the client sent them, the GGUF's BOS / EOS): how
many of four conversations (a system prompt and a question; several turns; an assistant's tool
call with empty content and the tool's result; a call beside text, its result and more turns)
come out identical, of those compared. Not compared, by design: `(codec)`, the two tool-call
conversations where the template writes no calls itself (the family's codec writes them in its
syntax); `(no system)`: the template refuses a system prompt (localchat puts it at the start of
the first user turn, a blank line after it, where llama.cpp's workaround puts one newline), so the
conversations are compared without one. A difference kept on purpose is named in
families_exact.EXPLAINED and listed under Notes (none now); `protocols` (for a few templates): the
same forced call on the Anthropic Messages and OpenAI Responses routes, and on Ollama's
(which has no tool_choice: with `format` the answer is a call or JSON; a call, when written,
parses). A template passes when every check that applies passes. The exit status is 0 when every
template run passes, 1 when one does not (CI runs the whole table: .ci/run), 2 when none matched."""

from __future__ import annotations

import argparse
import importlib.metadata
import os
import subprocess
import sys
import tarfile
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))  # this checkout's localchat, whatever the venv installed
sys.path.insert(0, str(ROOT / "scripts"))

from families_checks import PROTOCOL_TEMPLATES, Row, Server, check_template, prepare  # noqa: E402


def templates(cache: Path) -> Path:
    """models/templates of the pinned llama.cpp, unpacked once from the llama-cpp-python sdist."""
    version = importlib.metadata.version("llama_cpp_python")
    folder = cache / f"llama-cpp-python-{version}-templates"
    if folder.is_dir() and any(folder.glob("*.jinja")):
        return folder
    sdist = next(cache.glob(f"llama_cpp_python-{version}.tar.gz"), None)
    if sdist is None:
        print(f"downloading the llama-cpp-python {version} sdist into {cache} …", file=sys.stderr)
        subprocess.run([sys.executable, "-m", "pip", "download", f"llama-cpp-python=={version}", "--no-deps",
                        "--no-binary", ":all:", "--disable-pip-version-check", "-q", "-d", str(cache)], check=True)
        sdist = next(cache.glob(f"llama_cpp_python-{version}.tar.gz"))
    folder.mkdir(parents=True, exist_ok=True)
    with tarfile.open(sdist) as tar:
        for member in tar.getmembers():
            if "/vendor/llama.cpp/models/templates/" in member.name and member.name.endswith(".jinja"):
                (folder / Path(member.name).name).write_bytes(tar.extractfile(member).read())  # type: ignore[union-attr]
    return folder


def table(rows: list[Row], markdown: bool) -> str:
    head = ["template", "family", "tool calls", "renders", "exact", "history", "call", "reasoning", "protocols"]
    lines = []
    cells = [[r.name, r.family, r.codec, r.renders, r.exact, r.history, r.call, r.reasoning, r.protocols]
             for r in rows]
    if markdown:
        lines.append("| " + " | ".join(head) + " |")
        lines.append("|" + "---|" * len(head))
        lines += ["| " + " | ".join(c) + " |" for c in cells]
    else:
        widths = [max(len(x) for x in col) for col in zip(head, *cells)]
        for c in [head, *cells]:
            lines.append("  ".join(x.ljust(w) for x, w in zip(c, widths)).rstrip())
    passed = sum(r.passed for r in rows)
    lines.append(f"\n{passed} of {len(rows)} templates pass every check that applies "
                 f"({sum(r.has_tools for r in rows)} have a tool syntax; "
                 f"{sum(r.passed and r.has_tools for r in rows)} of those pass).")
    same = [r for r in rows if r.exact != "—" and not any(p.startswith("renders differently") for p in r.problems)]
    lines.append(f"{len(same)} of {len(rows)} templates render every conversation compared as the template does.")
    noted = [r for r in rows if r.notes]
    if noted:
        lines.append("\nNotes:" if not markdown else "\nNotes:\n")
        lines += [f"- {r.name}: {'; '.join(r.notes)}" for r in noted]
    failing = [r for r in rows if not r.passed]
    if failing:
        lines.append("\nNot passing:" if not markdown else "\nNot passing:\n")
        lines += [f"- {r.name}: {r.why}" for r in failing]
    return "\n".join(lines)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--only", nargs="*", default=[], help="templates whose name contains one of these")
    ap.add_argument("--markdown", action="store_true", help="print the table as Markdown (for docs/families.md)")
    ap.add_argument("--keep", type=Path, help="write the tiny models here (default: a temporary folder)")
    args = ap.parse_args()
    cache = Path(os.environ.get("XDG_CACHE_HOME", Path.home() / ".cache")) / "localchat"
    cache.mkdir(parents=True, exist_ok=True)
    sources = sorted(templates(cache).glob("*.jinja"), key=lambda p: p.name.lower())
    if args.only:
        sources = [p for p in sources if any(o.lower() in p.name.lower() for o in args.only)]
    if not sources:
        ap.exit(2, f"families: no template {'matches --only' if args.only else 'found in ' + str(templates(cache))}\n")
    work = args.keep or Path(tempfile.mkdtemp(prefix="localchat-families-"))
    work.mkdir(parents=True, exist_ok=True)
    for name in ("CONFIG", "DATA", "PROMPT_CACHE"):  # the server's own folders, beside the tiny models, not the user's
        os.environ[f"LOCALCHAT_{name}_DIR"] = str(work / name.lower())
    started = time.monotonic()
    prepared = [prepare(path, work) for path in sources]
    config = work / "models.toml"
    config.write_text("".join(f'[models."{p.model}"]\npath = "{p.gguf}"\ncontext_length = 8192\n\n'
                              for p in prepared))
    server = Server(config)
    try:
        rows = [check_template(p, server, p.name in PROTOCOL_TEMPLATES) for p in prepared]
    finally:
        server.stop()
    print(table(rows, args.markdown))
    print(f"\n({len(rows)} templates in {time.monotonic() - started:.0f} s, one server; tiny models in {work})",
          file=sys.stderr)
    if not all(r.passed for r in rows):
        sys.exit(1)


if __name__ == "__main__":
    main()
