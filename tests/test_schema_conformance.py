"""scripts/schema-conformance: a verdict per schema and totals, on schemas this test writes and
on a sample of the shared corpus (when it is there)."""

from __future__ import annotations

import json
import re
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
CORPUS = ROOT.parent / "shared" / "corpora" / "tool-schemas-glaive"
SCRIPT = ROOT / "scripts" / "schema_conformance.py"


def run(*args: str) -> str:
    done = subprocess.run([sys.executable, str(SCRIPT), *args], capture_output=True, text=True, timeout=600)
    assert done.returncode == 0, done.stderr
    return done.stdout


def test_each_schema_gets_its_verdict(tmp_path: Path):
    schemas = {
        "exact.json": {"type": "object", "properties": {"n": {"type": "integer", "minimum": 1}}, "required": ["n"]},
        "loose.json": {"type": "array", "items": {"type": "string"}, "uniqueItems": True},
        "broken.json": {"type": "string", "pattern": "("},
        "deep.json": {"type": "array", "items": {"type": "array", "items": {"type": "array", "items": {}}}},
    }
    for name, schema in schemas.items():
        (tmp_path / name).write_text(json.dumps(schema))
    (tmp_path / "junk.json").write_text("{not json")
    out = run(str(tmp_path), "--each", "--max-schema-depth", "3")
    lines = {line.split("\t")[0]: line.split("\t") for line in out.splitlines() if "\t" in line}
    assert lines["exact.json"][1] == "enforced" and int(lines["exact.json"][2]) > 0
    assert lines["loose.json"][1:2] + lines["loose.json"][3:] == ["loosened", "#:uniqueItems"]
    assert lines["broken.json"][1] == "refused" and "#/pattern" in lines["broken.json"][3]
    assert lines["deep.json"][1] == "refused" and "max_schema_depth" in lines["deep.json"][3]
    assert lines["junk.json"][1] == "refused" and "not JSON" in lines["junk.json"][3]
    assert re.search(r"enforced :\s+1 ", out) and re.search(r"loosened :\s+1 ", out) and re.search(r"refused  :\s+3 ", out)
    assert "uniqueItems 1" in out and "largest grammars: " in out


def test_a_sample_of_the_shared_corpus(tmp_path: Path):
    folder = CORPUS
    if not folder.is_dir():  # another machine: a few schemas of the same kind
        folder = tmp_path
        for i in range(5):
            (tmp_path / f"t{i}.json").write_text(json.dumps({"type": "object", "properties": {
                "q": {"type": "string", "maxLength": 10 + i}, "k": {"enum": ["a", "b"]}}, "required": ["q"]}))
    out = run(str(folder), "--sample", "40")
    counts = [int(n) for n in re.findall(r"^\s+(?:enforced|loosened|refused)\s*:\s+(\d+)", out, re.M)]
    assert sum(counts) == min(40, len(list(folder.glob("*.json"))))
    assert "largest grammars: " in out
