# Sourced by scripts/serve, scripts/test and scripts/bench: make .venv and install the project,
# only when pyproject.toml changed since the last install (llama-cpp-python compiles from source;
# pip caches the built wheel, so a fresh clone on the same machine reuses it).
set -euo pipefail
ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
VENV="$ROOT/.venv"
PY="${PYTHON:-python3}"
if [ ! -x "$VENV/bin/python" ]; then
    echo "localchat: creating $VENV" >&2
    "$PY" -m venv "$VENV"
fi
STAMP="$VENV/.localchat-installed"
WANT="$(cat "$ROOT/pyproject.toml" | sha256sum | cut -d' ' -f1) ${CMAKE_ARGS:-}"
if [ ! -f "$STAMP" ] || [ "$(cat "$STAMP")" != "$WANT" ]; then
    echo "localchat: installing into $VENV (the first time compiles llama.cpp: several minutes)" >&2
    "$VENV/bin/python" -m pip install --disable-pip-version-check -q -e "$ROOT[dev]" >&2
    echo "$WANT" > "$STAMP"
fi
export PATH="$VENV/bin:$PATH"
