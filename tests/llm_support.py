"""Session-wide helpers for the real-model tests (``pytest -m llm``).

pytest-trio fixtures are function-scoped, because each test runs in its own trio loop. To
start llama.cpp's server once per session, :class:`LlamaServerThread` runs
:func:`actors.open_llama_server` in a trio loop of its own, on a worker thread, so that
the session fixture shares every line of the start, readiness and stop code with the
library (including the shielded stop on error), rather than a second ``subprocess.Popen``
path.
"""

from __future__ import annotations

import contextlib
import queue
import threading
from collections.abc import Iterator
from typing import Any

import pytest
import trio

from actors._agent.llama_server import _check_server_installed, smollm2_gguf_path
from actors.llama import open_llama_server

__all__ = ["LlamaServerThread", "llama_url", "llm_extra_missing"]


def llm_extra_missing() -> str | None:
    """Why the real-model tests cannot run here, or None when the ``llm`` extra is there."""
    try:
        _check_server_installed()
        smollm2_gguf_path()
    except (ModuleNotFoundError, FileNotFoundError) as error:
        return f"the llm extra is not usable: {error}"
    return None


class LlamaServerThread:
    """llama.cpp's server, owned by a trio loop on a worker thread.

    ``start`` returns the base URL once the server is ready; ``stop`` cancels the loop,
    which stops the server (SIGTERM, then SIGKILL) and reaps it before the thread ends.

    Args:
        **options: passed to :func:`actors.open_llama_server`.
    """

    def __init__(self, **options: Any) -> None:
        self._options = options
        self._started: queue.Queue[str | BaseException] = queue.Queue(maxsize=1)
        self._token: trio.lowlevel.TrioToken | None = None
        self._scope: trio.CancelScope | None = None
        self._error: BaseException | None = None
        self._thread = threading.Thread(target=self._main, name="llama-server", daemon=True)

    def start(self, timeout: float = 120.0) -> str:
        """Start the server and return its base URL (``http://127.0.0.1:PORT/v1``).

        Raises:
            Whatever ``open_llama_server`` raised while starting (``TimeoutError``,
            ``RuntimeError``, ``ModuleNotFoundError``), or ``TimeoutError`` when the
            thread did not report within ``timeout`` seconds.
        """
        self._thread.start()
        try:
            outcome = self._started.get(timeout=timeout)
        except queue.Empty:
            self.stop()
            raise TimeoutError(f"the llama server thread did not report in {timeout:g}s") from None
        if isinstance(outcome, BaseException):
            self._thread.join(timeout)
            raise outcome
        return outcome

    def stop(self, timeout: float = 60.0) -> None:
        """Stop the server and wait for its thread; a second call does nothing.

        Raises:
            RuntimeError: the thread did not end within ``timeout`` seconds.
            BaseException: whatever the server's loop raised while it ran or stopped.
        """
        token, scope = self._token, self._scope
        if token is not None and scope is not None and self._thread.is_alive():
            # RunFinishedError: the loop already ended; join below reaps the thread.
            with contextlib.suppress(trio.RunFinishedError):
                trio.from_thread.run_sync(scope.cancel, trio_token=token)
        if self._thread.ident is not None:
            self._thread.join(timeout)
            if self._thread.is_alive():
                raise RuntimeError(f"the llama server thread did not stop in {timeout:g}s")
        if self._error is not None:
            error, self._error = self._error, None
            raise error

    def _main(self) -> None:
        try:
            trio.run(self._serve)
        except BaseException as error:
            try:
                self._started.put_nowait(error)
            except queue.Full:
                # Already started: the failure belongs to stop().
                self._error = error

    async def _serve(self) -> None:
        self._token = trio.lowlevel.current_trio_token()
        with trio.CancelScope() as scope:
            self._scope = scope
            async with open_llama_server(**self._options) as base_url:
                self._started.put_nowait(base_url)
                await trio.sleep_forever()


@pytest.fixture(scope="session")
def llama_url() -> Iterator[str]:
    """One llama.cpp server for the session, shared by every ``-m llm`` module that
    imports this fixture (the tests that use it skip without the extra)."""
    server = LlamaServerThread(n_threads=1, ready_timeout=90)
    url = server.start()
    try:
        yield url
    finally:
        server.stop()
