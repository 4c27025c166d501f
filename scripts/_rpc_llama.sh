# Sourced by scripts/test --rpc (and scripts/bench --rpc): build llama-cpp-python with llama.cpp's
# RPC backend (CMAKE_ARGS="-DGGML_RPC=on") into a folder of its own, once per version, and put it
# ahead of .venv's non-RPC copy on PYTHONPATH. .venv itself is left as it is: the RPC build is only
# needed for tests/test_rpc.py (and for a real RPC deployment, see docs/models.md "RPC models").
# Expects ROOT and VENV from _bootstrap.sh. One compile job, niced: it shares the machine.
VER="$(grep -o 'llama-cpp-python==[0-9.]*' "$ROOT/pyproject.toml" | cut -d= -f3)"
RPC_LLAMA="${LOCALCHAT_RPC_LLAMA:-${XDG_CACHE_HOME:-$HOME/.cache}/localchat/llama-cpp-python-$VER-rpc}"
if [ ! -f "$RPC_LLAMA/.complete" ]; then
    echo "localchat: building llama-cpp-python $VER with -DGGML_RPC=on into $RPC_LLAMA (one job: 10-20 min)" >&2
    SDIST="${XDG_CACHE_HOME:-$HOME/.cache}/localchat/llama_cpp_python-$VER.tar.gz"
    [ -f "$SDIST" ] || SDIST="llama-cpp-python==$VER"
    rm -rf "$RPC_LLAMA.part"
    CMAKE_ARGS="-DGGML_RPC=on" CMAKE_BUILD_PARALLEL_LEVEL="${CMAKE_BUILD_PARALLEL_LEVEL:-1}" \
        nice -n 19 "$VENV/bin/python" -m pip install --disable-pip-version-check -q --no-cache-dir \
        --no-deps --no-binary llama-cpp-python --target "$RPC_LLAMA.part" "$SDIST" >&2
    rm -rf "$RPC_LLAMA" && mv "$RPC_LLAMA.part" "$RPC_LLAMA" && touch "$RPC_LLAMA/.complete"
fi
export PYTHONPATH="$RPC_LLAMA${PYTHONPATH:+:$PYTHONPATH}"
