# Sourced by every wrapper in scripts/: make .venv and install the project,
# only when pyproject.toml (or CMAKE_ARGS) changed since the last install. llama-cpp-python
# compiles from source; pip caches the built wheel, so a fresh clone on this machine reuses it.
set -euo pipefail
ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
VENV="$ROOT/.venv"
PY="${PYTHON:-python3}"
PIP=(-m pip install --disable-pip-version-check -q)
if [ ! -x "$VENV/bin/python" ]; then
    echo "localchat: creating $VENV" >&2
    "$PY" -m venv "$VENV"
fi
STAMP="$VENV/.localchat-installed"
WANT="$(sha256sum < "$ROOT/pyproject.toml" | cut -d' ' -f1) cmake:${CMAKE_ARGS:-}"
HAVE="$(cat "$STAMP" 2>/dev/null || true)"
if [ "$HAVE" != "$WANT" ]; then
    echo "localchat: installing into $VENV (the first time compiles llama.cpp: several minutes)" >&2
    if [ -n "${CMAKE_ARGS:-}" ] && [ "${HAVE#* }" != "cmake:${CMAKE_ARGS}" ]; then
        # A GPU (or other) build: pip's wheel cache does not key on CMAKE_ARGS, so bypass it once.
        LLAMA="$(grep -o 'llama-cpp-python==[0-9.]*' "$ROOT/pyproject.toml")"
        "$VENV/bin/python" "${PIP[@]}" --no-cache-dir --force-reinstall --no-deps "$LLAMA" >&2
    fi
    "$VENV/bin/python" "${PIP[@]}" -e "$ROOT[dev]" >&2
    echo "$WANT" > "$STAMP"
fi
export PATH="$VENV/bin:$PATH"

# Whether a wrapper's arguments ask for its usage (-h, --help): it then prints it and does nothing
# else (no model pull, no browser setup), so `scripts/NAME --help` is quick and offline.
help_asked() {
    local arg
    for arg in "$@"; do
        case "$arg" in -h|--help) return 0 ;; esac
    done
    return 1
}
