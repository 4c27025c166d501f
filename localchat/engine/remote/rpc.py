"""llama.cpp's RPC backend: a model's layers on other machines' `localchat rpc-worker`s.

Three things, and nothing about HTTP or any protocol:

- `probe(endpoint)`: a TCP connection and the RPC hello (protocol version), the device count and
  memory, from Python. llama.cpp aborts the whole process on a dead or wrong-version endpoint, so
  every endpoint is probed before a model is loaded on it (and while its link is down).
- `register(endpoints)`: add the endpoints as ggml devices before the model loads, as llama.cpp's
  common/arg.cpp does (`Llama(rpc_servers=…)` is ignored by llama-cpp-python). Only in the worker
  process that decodes (worker.py): a lost link aborts that process, not the server.
- `serve(endpoint)`: run ggml's RPC server in this process (`localchat rpc-worker`); blocks.

It needs llama-cpp-python built with `CMAKE_ARGS="-DGGML_RPC=on"` (`supported()`).
"""

from __future__ import annotations

import ctypes
import re
import socket
import struct
from dataclasses import dataclass
from pathlib import Path

from ...errors import ModelUnavailable

# ggml-rpc.cpp / ggml-rpc.h of the pinned llama.cpp
PROTO_MAJOR, PROTO_MINOR, PROTO_PATCH = 7, 0, 0
CMD_GET_DEVICE_MEMORY, CMD_HELLO, CMD_DEVICE_COUNT = 11, 14, 15
CONN_CAPS = 24  # rpc_msg_hello_req's conn_caps (RDMA negotiation; zeros: plain TCP)
MAX_ENDPOINTS = 16  # GGML_RPC_MAX_SERVERS
DEFAULT_PORT = 50052  # llama.cpp's rpc-server's
ENDPOINT = re.compile(r"^[A-Za-z0-9_.-]+:\d{1,5}$")  # host:port as ggml parses it (no IPv6 brackets)
BUILD_HINT = ('this llama-cpp-python was built without llama.cpp\'s RPC backend: rebuild it with '
              'CMAKE_ARGS="-DGGML_RPC=on" (docs/models.md "RPC models")')


class RpcError(ModelUnavailable):
    """An endpoint that cannot take the model: not reachable, not answering, not the same protocol."""


@dataclass(frozen=True)
class Endpoint:
    """What an endpoint said to the probe."""

    address: str
    version: str  # its RPC protocol, major.minor.patch
    devices: int
    free: int  # bytes free on its devices, together
    total: int


def supported() -> bool:
    """llama-cpp-python was built with the RPC backend."""
    import llama_cpp as C

    return bool(C.llama_supports_rpc())


def check_endpoint(value: str) -> str:
    if not ENDPOINT.match(value) or not 0 < int(value.rpartition(":")[2]) < 65536:
        raise ValueError(f"{value!r} is not an RPC endpoint: write host:port (an IPv4 address or a name)")
    return value


def probe(address: str, *, connect_timeout: float = 3.0, timeout: float = 5.0) -> Endpoint:
    """Connect, say hello, ask the devices and their memory, hang up. Raises RpcError saying why."""
    host, _, port = address.rpartition(":")
    try:
        sock = socket.create_connection((host, int(port)), timeout=connect_timeout)
    except socket.timeout:
        raise RpcError(f"the RPC worker {address} did not accept a connection within {connect_timeout:g} s") from None
    except OSError as exc:
        raise RpcError(f"the RPC worker {address} is not reachable ({exc.strerror or exc}); "
                       "is `localchat rpc-worker` running there?") from None
    with sock:
        sock.settimeout(timeout)
        try:
            major, minor, patch = _hello(sock, address)
            if major != PROTO_MAJOR or minor > PROTO_MINOR:
                raise RpcError(f"the RPC worker {address} speaks RPC protocol {major}.{minor}.{patch}, this "
                               f"localchat {PROTO_MAJOR}.{PROTO_MINOR}.{PROTO_PATCH}: run the same localchat "
                               "(and llama-cpp-python) version on both ends")
            (count,) = struct.unpack("<I", _call(sock, CMD_DEVICE_COUNT, b"", 4, address))
            free = total = 0
            for device in range(count):
                f, t = struct.unpack("<QQ", _call(sock, CMD_GET_DEVICE_MEMORY, struct.pack("<I", device), 16, address))
                free, total = free + f, total + t
        except socket.timeout:
            raise RpcError(f"the RPC worker {address} accepted the connection but did not answer within "
                           f"{timeout:g} s: a worker serves one client at a time — is another server using it?"
                           ) from None
        except OSError as exc:
            raise RpcError(f"the RPC worker {address} broke the connection ({exc.strerror or exc})") from None
    return Endpoint(address, f"{major}.{minor}.{patch}", count, free, total)


def probe_all(addresses: list[str], name: str) -> list[Endpoint]:
    """Every endpoint of a model, or an RpcError naming the model and the first that failed."""
    if not supported():
        raise RpcError(f"the model {name} runs on RPC workers, but {BUILD_HINT}", param="model")
    out = []
    for address in addresses:
        try:
            out.append(probe(address))
        except RpcError as exc:
            raise RpcError(f"the model {name} cannot load: {exc.message}", param="model") from None
    return out


def _hello(sock: socket.socket, address: str) -> tuple[int, int, int]:
    sock.sendall(bytes([CMD_HELLO]) + struct.pack("<Q", CONN_CAPS) + bytes(CONN_CAPS))
    size = _recv(sock, 8, address)
    if size == b"":
        raise RpcError(f"the RPC worker {address} hung up on the hello: not a llama.cpp RPC server of "
                       f"protocol {PROTO_MAJOR}.x (an older or newer localchat?)")
    (n,) = struct.unpack("<Q", size)
    if n != 4 + CONN_CAPS:
        raise RpcError(f"the RPC worker {address} answered the hello with {n} bytes, not {4 + CONN_CAPS}: "
                       f"not a llama.cpp RPC server of protocol {PROTO_MAJOR}.x")
    answer = _recv(sock, n, address, strict=True)
    return answer[0], answer[1], answer[2]


def _call(sock: socket.socket, cmd: int, payload: bytes, answer: int, address: str) -> bytes:
    sock.sendall(bytes([cmd]) + struct.pack("<Q", len(payload)) + payload)
    (n,) = struct.unpack("<Q", _recv(sock, 8, address, strict=True))
    if n != answer:
        raise RpcError(f"the RPC worker {address} answered command {cmd} with {n} bytes, not {answer}")
    return _recv(sock, n, address, strict=True)


def _recv(sock: socket.socket, n: int, address: str, strict: bool = False) -> bytes:
    data = b""
    while len(data) < n:
        chunk = sock.recv(n - len(data))
        if not chunk:
            if data or strict:
                raise RpcError(f"the RPC worker {address} closed the connection mid-answer")
            return b""
        data += chunk
    return data


# -- ggml, through ctypes ------------------------------------------------------------------

def _ggml() -> ctypes.CDLL:
    """The libggml that libllama links (`libggml.so.0`): the wheel also holds a separate copy,
    `libggml.so`, and a device registered there is invisible to llama.cpp."""
    import llama_cpp as C

    lib = ctypes.CDLL(str(Path(C.__file__).parent / "lib" / "libggml.so.0"))
    lib.ggml_backend_reg_by_name.restype, lib.ggml_backend_reg_by_name.argtypes = ctypes.c_void_p, [ctypes.c_char_p]
    lib.ggml_backend_reg_get_proc_address.restype = ctypes.c_void_p
    lib.ggml_backend_reg_get_proc_address.argtypes = [ctypes.c_void_p, ctypes.c_char_p]
    lib.ggml_backend_register.restype, lib.ggml_backend_register.argtypes = None, [ctypes.c_void_p]
    lib.ggml_backend_dev_count.restype = ctypes.c_size_t
    lib.ggml_backend_dev_get.restype, lib.ggml_backend_dev_get.argtypes = ctypes.c_void_p, [ctypes.c_size_t]
    lib.ggml_backend_dev_type.restype, lib.ggml_backend_dev_type.argtypes = ctypes.c_int, [ctypes.c_void_p]
    return lib


def _rpc_function(lib: ctypes.CDLL, name: str, prototype: type) -> ctypes._CFuncPtr:
    reg = lib.ggml_backend_reg_by_name(b"RPC")
    address = lib.ggml_backend_reg_get_proc_address(reg, name.encode()) if reg else None
    if not address:
        raise RpcError(BUILD_HINT)
    return prototype(address)


def register(addresses: list[str]) -> None:
    """Add each endpoint's devices to ggml's list, where llama.cpp's model loader finds them (first,
    before any local GPU). Probe them first: ggml aborts the process on one that does not answer."""
    import llama_cpp as C

    C.llama_backend_init()
    lib = _ggml()
    add = _rpc_function(lib, "ggml_backend_rpc_add_server", ctypes.CFUNCTYPE(ctypes.c_void_p, ctypes.c_char_p))
    for address in addresses:
        reg = add(address.encode())
        if not reg:
            raise RpcError(f"ggml could not add the RPC worker {address}")
        lib.ggml_backend_register(reg)


def serve(endpoint: str, *, threads: int, cache_dir: str | None = None) -> None:
    """ggml's RPC server on `endpoint` (host:port), over this machine's GPUs, else its CPU, as
    llama.cpp's rpc-server picks them. Blocks; serves one client at a time."""
    import llama_cpp as C

    C.llama_backend_init()
    lib = _ggml()
    start = _rpc_function(lib, "ggml_backend_rpc_start_server", ctypes.CFUNCTYPE(
        None, ctypes.c_char_p, ctypes.c_char_p, ctypes.c_size_t, ctypes.c_size_t, ctypes.POINTER(ctypes.c_void_p)))
    devices = [lib.ggml_backend_dev_get(i) for i in range(lib.ggml_backend_dev_count())]
    gpus = [d for d in devices if lib.ggml_backend_dev_type(d) in (1, 2)]  # GPU, IGPU
    chosen = gpus or [d for d in devices if lib.ggml_backend_dev_type(d) == 0][:1]
    array = (ctypes.c_void_p * len(chosen))(*chosen)
    start(endpoint.encode(), cache_dir.encode() if cache_dir else None, threads, len(chosen), array)
