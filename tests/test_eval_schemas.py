"""scripts/eval-schemas on a small folder: its totals are what the schemas written here must
give, so a broken import or a changed engine API shows up here instead of as 0% accepted."""

from __future__ import annotations

import json
import re
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
GOOD = [{"type": "object", "properties": {"a": {"type": "integer"}, "b": {"enum": ["x", "y"]}}, "required": ["a"]},
        {"type": "string", "maxLength": 5},
        {"type": "array", "items": {"type": "boolean"}, "maxItems": 3}]


def run(folder: Path, registry_file: Path, *extra: str) -> str:
    r = subprocess.run([sys.executable, str(ROOT / "scripts" / "eval_schemas.py"), str(folder), "--config",
                        str(registry_file), "--model", "tiny-chatml", *extra],
                       capture_output=True, text=True, timeout=300)
    assert r.returncode == 0, r.stderr
    return r.stdout


def total(out: str, label: str) -> int:
    return int(re.search(rf"{label}\s*:\s*(\d+)", out).group(1))


def test_totals_on_a_small_folder(tmp_path: Path, registry_file: Path):
    for i, schema in enumerate(GOOD):
        (tmp_path / f"good_{i}.json").write_text(json.dumps(schema))
    (tmp_path / "dangling_ref.json").write_text(json.dumps({"$ref": "#/$defs/nope"}))
    (tmp_path / "not_json.json").write_text("{nope")
    out = run(tmp_path, registry_file)
    assert out.startswith(f"5 schemas in {tmp_path}")
    assert total(out, "converted and validated") == 3
    assert total(out, "accepted by llama.cpp") == 3
    assert total(out, "rejected") == 2
    assert "dangling_ref.json: at '#': $ref '#/$defs/nope' points nowhere" in out


def test_generate_fills_the_schemas_under_their_grammars(tmp_path: Path, registry_file: Path):
    (tmp_path / "flag_1.json").write_text(json.dumps({"type": "object", "properties": {"on": {"type": "boolean"}},
                                                      "required": ["on"], "additionalProperties": False}))
    out = run(tmp_path, registry_file, "--generate", "1", "--max-tokens", "64")
    assert "generated 1 outputs with tiny-chatml" in out
    # whatever the model writes, the grammar allows only a valid object or a cut one
    assert total(out, "ended by themselves, NOT valid") == 0
    assert total(out, "ended by themselves, valid") + total(out, "cut by max_tokens") == 1
