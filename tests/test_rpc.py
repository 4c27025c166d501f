"""llama.cpp RPC models: an entry with `rpc = ["host:port"]` runs its layers on a `localchat
rpc-worker`, through every route, from a worker process.

The end-to-end test puts the rpc-worker in a network namespace of its own, joined to the test's by
a veth pair (nothing but that link between them), and checks: the same greedy tokens as the model
loaded locally; the rpc-worker killed mid-stream → that request's error event, the server up,
`/health` saying the endpoint is down, 503s naming it; the rpc-worker back → the model serves again.
It needs llama-cpp-python built with `CMAKE_ARGS="-DGGML_RPC=on"` (`scripts/test --rpc` builds one
into its own folder and runs this module under `unshare -n`, so the machine's network is left as it
is), root and `ip` (localchat/devtools/rpclink.py); without them it is skipped and says why. The probe, the entries' checks and the
command's refusals run everywhere (fast)."""

from __future__ import annotations

import socket
import struct
import threading
import time
from collections.abc import Iterator
from pathlib import Path

import httpx
import openai
import pytest
from typer.testing import CliRunner

from localchat.devtools import rpclink
from conftest import Server
from localchat.cli import app
from localchat.engine.remote import rpc
from localchat.families import FAMILIES
from localchat.models import ModelSpec
from localchat.models.host import load_model, make_engine
from localchat.devtools.tinymodels import write_tiny_model

ASK = [{"role": "user", "content": "Say something long."}]


# -- the probe, against a fake endpoint that speaks the hello ------------------------------------

class FakeEndpoint:
    """Answers the RPC hello as `version`, one device with 1 GiB free of 2; or stays silent, or hangs up."""

    def __init__(self, version: tuple[int, int, int] = (rpc.PROTO_MAJOR, rpc.PROTO_MINOR, rpc.PROTO_PATCH),
                 behaviour: str = "answer") -> None:
        self.listener = socket.create_server(("127.0.0.1", 0))
        self.address = f"127.0.0.1:{self.listener.getsockname()[1]}"
        self.version, self.behaviour, self.held = version, behaviour, []
        threading.Thread(target=self._serve, daemon=True).start()

    def _serve(self) -> None:
        while True:
            try:
                conn, _ = self.listener.accept()
            except OSError:
                return
            if self.behaviour == "silent":
                self.held.append(conn)
                continue
            with conn:
                if self.behaviour == "hangup":
                    conn.recv(64)
                    continue
                cmd, size = struct.unpack("<BQ", conn.recv(9, socket.MSG_WAITALL))
                assert (cmd, size) == (rpc.CMD_HELLO, rpc.CONN_CAPS)
                conn.recv(size, socket.MSG_WAITALL)
                conn.sendall(struct.pack("<Q", 4 + rpc.CONN_CAPS) + bytes([*self.version, 0]) + bytes(rpc.CONN_CAPS))
                while header := conn.recv(9, socket.MSG_WAITALL):
                    cmd, size = struct.unpack("<BQ", header)
                    payload = conn.recv(size, socket.MSG_WAITALL) if size else b""
                    if cmd == rpc.CMD_DEVICE_COUNT:
                        conn.sendall(struct.pack("<QI", 4, 1))
                    elif cmd == rpc.CMD_GET_DEVICE_MEMORY and payload == struct.pack("<I", 0):
                        conn.sendall(struct.pack("<QQQ", 16, 1 << 30, 2 << 30))
                    else:
                        break

    def close(self) -> None:
        self.listener.close()
        for conn in self.held:
            conn.close()


@pytest.mark.fast
def test_the_probe_reads_the_version_and_the_memory():
    endpoint = FakeEndpoint()
    try:
        got = rpc.probe(endpoint.address)
    finally:
        endpoint.close()
    assert got == rpc.Endpoint(endpoint.address, "7.0.0", 1, 1 << 30, 2 << 30)


@pytest.mark.fast
def test_the_probe_says_why_an_endpoint_cannot_take_a_model():
    with socket.socket() as s:  # a port nothing listens on
        s.bind(("127.0.0.1", 0))
        dead = f"127.0.0.1:{s.getsockname()[1]}"
    with pytest.raises(rpc.RpcError, match=r"not reachable .*rpc-worker"):
        rpc.probe(dead)
    for endpoint, match in ((FakeEndpoint((6, 0, 0)), r"speaks RPC protocol 6\.0\.0.*same localchat"),
                            (FakeEndpoint((7, 1, 0)), r"7\.1\.0.*same localchat"),
                            (FakeEndpoint(behaviour="silent"), r"did not answer .*one client at a time"),
                            (FakeEndpoint(behaviour="hangup"), r"hung up on the hello")):
        try:
            with pytest.raises(rpc.RpcError, match=match):
                rpc.probe(endpoint.address, timeout=1)
        finally:
            endpoint.close()


@pytest.mark.fast
def test_an_entry_names_its_endpoints_and_split(tmp_path: Path):
    spec = ModelSpec(name="m", path=tmp_path / "m.gguf", rpc=["10.0.0.2:50052", "gpu-box:50052"],
                     tensor_split=[3, 1])
    assert spec.kind == "file" and spec.rpc == ["10.0.0.2:50052", "gpu-box:50052"]
    for bad, match in (({"rpc": ["10.0.0.2"]}, "host:port"), ({"rpc": ["[::1]:50052"]}, "host:port"),
                       ({"rpc": ["a:1", "a:1"]}, "twice"), ({"rpc": ["a:70000"]}, "host:port"),
                       ({"tensor_split": [0, 0]}, "above zero"), ({"tensor_split": [-1, 2]}, "zero or more")):
        with pytest.raises(ValueError, match=match):
            ModelSpec(name="m", path=tmp_path / "m.gguf", **bad)
    with pytest.raises(ValueError, match="rpc: set on the upstream"):
        ModelSpec(name="m", upstream="http://127.0.0.1:8100", rpc=["a:1"])


@pytest.mark.fast
def test_a_dead_endpoint_is_a_clear_error_before_anything_loads(tmp_path: Path):
    model = write_tiny_model(tmp_path / "tiny.gguf", FAMILIES["chatml"])
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        dead = f"127.0.0.1:{s.getsockname()[1]}"
    spec = ModelSpec(name="far", path=model, rpc=[dead])
    with pytest.raises(rpc.RpcError) as failed:
        load_model(spec, engine=lambda *a, **k: pytest.fail("no engine may start"))
    message = failed.value.message
    assert failed.value.status == 503 and "the model far" in message
    assert (dead in message and "not reachable" in message) if rpc.supported() else "-DGGML_RPC=on" in message


@pytest.mark.fast
def test_an_rpc_model_gets_a_worker_process_even_in_process(tmp_path: Path):
    """`--in-process` (worker = false) does not apply: ggml aborts the process that loses its link."""
    model = write_tiny_model(tmp_path / "tiny.gguf", FAMILIES["chatml"])
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        dead = f"127.0.0.1:{s.getsockname()[1]}"
    with pytest.raises(rpc.RpcError, match="the model far"):  # the worker's own probe, before any process starts
        make_engine(model, worker=False, name="far", n_ctx=256, parallel=1, rpc=[dead])


@pytest.mark.fast
def test_the_worker_command_keeps_to_loopback_unless_told():
    runner = CliRunner()
    refused = runner.invoke(app, ["rpc-worker", "--host", "0.0.0.0"])
    assert refused.exit_code == 1 and "--insecure-network" in refused.output and "SSH tunnel" in refused.output
    named = runner.invoke(app, ["rpc-worker", "--host", "gpu-box"])
    assert named.exit_code == 1 and "IPv4 address" in named.output


# -- end to end: a veth pair between two network namespaces ----------------------------------------

@pytest.fixture(scope="module")
def netns() -> Iterator[str]:
    if why := rpclink.missing():
        pytest.skip(why)
    with rpclink.namespace() as name:
        yield name


@pytest.fixture(scope="module")
def model_file(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return write_tiny_model(tmp_path_factory.mktemp("rpc") / "tiny.gguf", FAMILIES["chatml"], n_ctx=2048)


def _greedy(client: openai.OpenAI, model: str) -> list[str]:
    answer = client.chat.completions.create(model=model, messages=ASK, max_tokens=24, temperature=0,
                                            logprobs=True, extra_body={"ignore_eos": True})
    return [t.token for t in answer.choices[0].logprobs.content]


def _card(server: Server, name: str) -> dict:
    return next(m for m in httpx.get(server.url + "/health", timeout=30).json()["loaded"] if m["name"] == name)


def test_all_layers_on_a_worker_across_a_veth_pair(netns: str, model_file: Path, tmp_path: Path):
    config = tmp_path / "models.toml"
    config.write_text(f'default = "tiny-local"\n'
                      f'[models.tiny-local]\npath = "{model_file}"\ncontext_length = 2048\nparallel = 1\n'
                      f'[models.tiny-rpc]\npath = "{model_file}"\ncontext_length = 2048\nparallel = 1\n'
                      f'rpc = ["{rpclink.ENDPOINT}"]\n')
    worker = rpclink.Worker(netns, tmp_path / "rpc-worker.log")
    try:
        server = Server(config)
    except BaseException:
        worker.stop()
        raise
    try:
        assert "Never expose the RPC server to an open network" in worker.output()
        client = openai.OpenAI(base_url=server.url + "/v1", api_key="x", max_retries=0, timeout=120)
        local = _greedy(client, "tiny-local")
        remote = _greedy(client, "tiny-rpc")
        assert len(local) == 24 and remote == local, "the same greedy tokens through the link"
        card = _card(server, "tiny-rpc")
        assert card["rpc"] == [{"endpoint": rpclink.ENDPOINT, "state": "up"}] and card["worker"]["state"] == "ready"
        assert card["rpc_layers"] == "3/3", "every layer (and the output) on the worker"
        assert card["sizing"]["memory"] == f"RPC at {rpclink.ENDPOINT}", "sized to the worker's memory"
        assert "Accepted client connection" in worker.output()

        # the rpc-worker killed mid-stream: that request's error event; the server stays up
        stream = iter(client.chat.completions.create(model="tiny-rpc", messages=ASK, max_tokens=1900, stream=True,
                                                     extra_body={"ignore_eos": True}))
        for _ in range(3):
            next(stream)
        worker.kill()
        with pytest.raises(openai.APIError) as failed:
            for _ in stream:
                pass
        assert "RPC link" in str(failed.value.message)
        deadline = time.monotonic() + 30
        while (card := _card(server, "tiny-rpc"))["worker"]["state"] != "rpc_down" and time.monotonic() < deadline:
            time.sleep(0.2)
        assert card["rpc"][0]["endpoint"] == rpclink.ENDPOINT and card["rpc"][0]["state"] == "down", card
        assert "not reachable" in card["rpc"][0]["error"]
        with pytest.raises(openai.APIStatusError) as refused:
            client.chat.completions.create(model="tiny-rpc", messages=ASK, max_tokens=4)
        assert refused.value.status_code == 503 and rpclink.ENDPOINT in refused.value.message
        assert _greedy(client, "tiny-local") == local, "the other model serves on"
        assert server.proc.poll() is None, "the server lives on"

        # the rpc-worker back: the model is loaded again and serves
        worker = rpclink.Worker(netns, tmp_path / "rpc-worker.log")
        deadline = time.monotonic() + 120
        while _card(server, "tiny-rpc")["worker"]["state"] != "ready" and time.monotonic() < deadline:
            time.sleep(0.3)
        assert _card(server, "tiny-rpc")["rpc"] == [{"endpoint": rpclink.ENDPOINT, "state": "up"}]
        assert _greedy(client, "tiny-rpc") == local
        assert _card(server, "tiny-rpc")["worker"]["crashes"] == 0, "a lost link is not a crash"
    finally:
        server.stop()
        worker.stop()
