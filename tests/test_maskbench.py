"""scripts/maskbench: every valid instance of a fixed sample of MaskBench is accepted by the
grammar made from its schema, and no invalid one is accepted without the converter saying which
keyword its grammar holds only in part (then the checker of written values refuses it). On the
shared corpus when it is there, else on cases this test writes in MaskBench's form."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
CORPUS = ROOT.parent / "shared" / "corpora" / "maskbench"
SCRIPT = ROOT / "scripts" / "maskbench.py"

# What the grammars once got wrong, each with valid and invalid instances.
CASES = {
    "order": ({"type": "object", "properties": {"dimensions": {"type": "object"}, "shape": {"type": "string"}},
               "required": ["shape", "dimensions"]},
              [{"dimensions": {"w": 2}, "shape": "square"}, {"shape": "square", "dimensions": {}}],
              [{"shape": "square"}, {"dimensions": {}, "shape": 3}]),
    "extra keys": ({"type": "object", "properties": {"a": {"type": "integer"}}},
                   [{"a": 1, "note": "x"}, {"z": [1], "a": 2}], [{"a": "1", "note": "x"}]),
    "formats": ({"type": "object", "properties": {
        "mail": {"type": "string", "format": "email"}, "url": {"type": "string", "format": "uri"},
        "day": {"type": "string", "format": "date"}, "at": {"type": "string", "format": "date-time"}}},
        [{"mail": "john.doe@example.com", "url": "http://localhost:8000/v1", "day": "2024-02-29",
          "at": "2024-01-01T10:00:00.123+01:00"}, {"url": "https://example.com/*", "mail": "a+b@c"}],
        [{"mail": "no at"}, {"day": "2023-02-29"}, {"url": "not a uri"}, {"at": "2024-01-01T24:00:00Z"}]),
    "decimal bounds": ({"type": "number", "minimum": 0.25, "exclusiveMaximum": 1.5},
                       [0.25, 0.3, 1, 1.49, 1.0], [0.24, 1.5, -1, 2]),
    "no type": ({"minLength": 2, "properties": {"a": {"const": 1}}}, ["ab", 5, {"a": 1}, [1], None],
                ["a", {"a": 2}]),
    "unanchored pattern": ({"type": "string", "pattern": "[0-9]{3}"}, ["ab123cd", "999"], ["12", "abc"]),
    "enum object": ({"enum": [{"a": 1, "b": [1, 2]}]}, [{"a": 1, "b": [1, 2]}, {"b": [1, 2], "a": 1}], [{"a": 1}]),
    "integer as 2.0": ({"type": "integer", "minimum": 1, "maximum": 3}, [2, 2.0], [0, 2.5]),
    "unique items": ({"type": "array", "items": {"type": "integer"}, "uniqueItems": True}, [[1, 2], []], [[1, 1]]),
    "metaschema ref": ({"properties": {"n": {"$ref": "http://json-schema.org/draft-04/schema#/definitions/"
                                                    "positiveIntegerDefault0"}}}, [{"n": 3}, {"n": 0}], [{"n": -1}]),
    "request by method": ({"anyOf": [{"properties": {"method": {"const": "ping"}, "params": {"type": "object"}}},
                                     {"properties": {"method": {"const": "sample"}, "params": {"type": "object",
                                      "properties": {"a": {}, "b": {}, "c": {}, "d": {}, "e": {}}}}}]},
                          [{"method": "sample", "params": {"e": 1, "a": 2}}], [{"method": "nope"}]),
}


def run(data: Path, registry: Path, *extra: str) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, str(SCRIPT), str(data), "--matchers", "localchat", "--mask-every", "0",
                           "--config", str(registry), "--model", "tiny-chatml", "--strict", "--each", *extra],
                          capture_output=True, text=True, timeout=1200)


def write_cases(data: Path) -> Path:
    """The cases above as a MaskBench data folder."""
    (data / "data").mkdir(parents=True)
    for name, (schema, valid, invalid) in CASES.items():
        tests = [{"valid": True, "data": v} for v in valid] + [{"valid": False, "data": v} for v in invalid]
        (data / "data" / f"case---{name.replace(' ', '_')}.json").write_text(
            json.dumps({"description": name, "schema": schema, "tests": tests}))
    return data


def test_a_fixed_sample_of_maskbench_passes(registry_file: Path, tmp_path: Path):
    data = CORPUS
    if not (CORPUS / "data.tar.gz").is_file():  # another machine: the cases above, in MaskBench's form
        data = write_cases(tmp_path / "maskbench")
    done = run(data, registry_file, "--sample", "300", "--seed", "7")
    assert done.returncode == 0, done.stdout[-3000:] + done.stderr[-2000:]
    table = next(line for line in done.stdout.splitlines() if line.startswith("| localchat"))
    cells = [c.strip() for c in table.strip("|").split("|")]
    assert cells[2] == "0" and cells[3].startswith("0 of "), table  # no valid instance rejected
    assert cells[4].endswith("/ 0"), table  # no invalid one accepted undeclared


def test_the_cases_pass(registry_file: Path, tmp_path: Path):
    """The cases above, always (the corpus sample may not hold them)."""
    data = write_cases(tmp_path / "cases")
    done = run(data, registry_file)
    assert done.returncode == 0, done.stdout[-3000:] + done.stderr[-2000:]
    assert f"| localchat → llama.cpp (+ checker) | {len(CASES)} (100.0%) |" in done.stdout, done.stdout
