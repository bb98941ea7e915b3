"""Which model files a server on this machine runs, so counting can use them offline.

A server's tokenize endpoint is exact but waits on its generation lock (llama-cpp-python
serializes every request, ``/v1/models`` included): a busy server makes counting wait.
When the server runs on this machine its model file usually is here too, and its own
tokenizer and chat template can be read from it once:

==================  =====================================================================
llama-cpp-python    exposes no path: the command line of the process listening on the
                    server's port names it (``--model PATH``, ``--n_ctx N``,
                    ``--chat_format NAME``); read with :mod:`psutil` (extra ``[gguf]``)
llama.cpp server    ``/props`` → ``model_path``, when its process here names it
Ollama              ``/api/show`` → ``modelfile``'s ``FROM /path/to/blob`` (a GGUF), a
                    content-addressed blob (``blobs/sha256-<hex>``) of an Ollama here
vLLM                ``/v1/models`` → ``root``, a local folder with ``tokenizer.json``, when
                    its process here names it
==================  =====================================================================

Only loopback servers are looked up by process. A path a server sends over the network
is never opened on its word alone (:func:`served_path`): a hostile or mistaken upstream
must not make this process read ``/etc/shadow`` or a 100 GB file. It is used only when
the process listening on the server's port on this machine names the same path on its
own command line (or, for Ollama, when it is a blob of the Ollama listening here).
"""

from __future__ import annotations

import json
import logging
import os
import re
from dataclasses import dataclass
from pathlib import Path
from typing import Any
from urllib.parse import urlsplit

__all__ = [
    "LocalServerProcess",
    "local_server_process",
    "modelfile_path",
    "parse_command_line",
    "served_path",
    "vllm_model_dir",
]

log = logging.getLogger("tokenflex")

_LOOPBACK = {"127.0.0.1", "localhost", "::1", "0.0.0.0", "::"}


@dataclass(frozen=True)
class LocalServerProcess:
    """What the command line of a llama-cpp-python process on this machine says."""

    pid: int
    started_ms: int
    """The process's start time (ms since the epoch): with ``pid``, which process it is."""
    model_path: Path | None
    """``--model``, when that file exists."""
    n_ctx: int | None
    """``--n_ctx``, when given (the server's default is 2,048, but ask it to be sure)."""
    chat_format: str | None
    """``--chat_format``, when given (``None`` or ``chat_template.default``: the GGUF's
    own template)."""
    argv: tuple[str, ...] = ()
    """The whole command line (what :func:`served_path` checks a path against)."""


def _option(argv: list[str], name: str) -> str | None:
    for i, arg in enumerate(argv):
        if arg == name and i + 1 < len(argv):
            return argv[i + 1]
        if arg.startswith(name + "="):
            return arg[len(name) + 1 :]
    return None


def parse_command_line(pid: int, argv: list[str], started_ms: int = 0) -> LocalServerProcess:
    """A :class:`LocalServerProcess` from a llama-cpp-python command line.

    >>> p = parse_command_line(7, ["python", "-m", "llama_cpp.server", "--model", "/nope.gguf",
    ...                            "--n_ctx=4096", "--chat_format", "chatml"])
    >>> p.model_path, p.n_ctx, p.chat_format
    (None, 4096, 'chatml')
    """
    model = _option(argv, "--model")
    path = Path(model) if model else None
    n_ctx_text = _option(argv, "--n_ctx")
    try:
        n_ctx = int(n_ctx_text) if n_ctx_text else None
    except ValueError:
        n_ctx = None
    return LocalServerProcess(
        pid=pid,
        started_ms=started_ms,
        model_path=path if path is not None and path.is_file() else None,
        n_ctx=n_ctx if n_ctx is not None and n_ctx > 0 else None,
        chat_format=_option(argv, "--chat_format"),
        argv=tuple(argv),
    )


def local_server_process(root: str) -> LocalServerProcess | None:
    """The process on this machine listening on ``root``'s port, if ``root`` is a loopback
    URL and :mod:`psutil` can see it (same user); ``None`` otherwise."""
    parts = urlsplit(root)
    host = (parts.hostname or "").lower()
    if host not in _LOOPBACK:
        return None
    port = parts.port or (443 if parts.scheme == "https" else 80)
    try:
        import psutil  # extra [gguf]
    except ImportError:
        log.debug("tokenflex: psutil is not installed; cannot find the server's model file")
        return None
    try:
        for conn in psutil.net_connections(kind="tcp"):
            if conn.status == psutil.CONN_LISTEN and conn.laddr and conn.laddr.port == port:
                if conn.pid is None:
                    continue
                process = psutil.Process(conn.pid)
                started = int(process.create_time() * 1000)
                return parse_command_line(conn.pid, process.cmdline(), started)
    except (psutil.Error, OSError) as exc:
        log.debug("tokenflex: cannot read the process serving %s: %s", root, exc)
    return None


_MAX_PATH = 4096
_BLOB = re.compile(r"sha256[-:][0-9a-f]{64}")


def _absolute(text: Any) -> Path | None:
    if not isinstance(text, str) or not 0 < len(text) <= _MAX_PATH or "\x00" in text:
        return None
    path = Path(text)
    return Path(os.path.normpath(path)) if path.is_absolute() else None


def served_path(root: str, text: Any) -> Path | None:
    """The path a server at ``root`` sent (``/props`` ``model_path``, vLLM's ``root``),
    when the process listening on ``root``'s port on this machine names the same path on
    its command line; None otherwise (a remote server, a path it does not run, not a
    path at all): nothing a network answer says is opened on its word alone.

    >>> served_path("http://gpu:8000", "/etc/passwd") is None
    True
    """
    path = _absolute(text)
    if path is None:
        return None
    process = local_server_process(root)
    if process is None:
        return None
    for arg in process.argv:
        value = arg.partition("=")[2] if arg.startswith("-") and "=" in arg else arg
        if _absolute(value) == path:
            return path
    log.info(
        "tokenflex: %s names the model file %s, which its process here does not run: not opened",
        root,
        str(path)[:200],
    )
    return None


def modelfile_path(modelfile: str, root: str | None = None) -> Path | None:
    """The GGUF an Ollama ``modelfile`` is built ``FROM``, when it is a content-addressed
    blob (``.../blobs/sha256-<hex>``) that is a file here, and (``root`` given) the
    Ollama at ``root`` runs on this machine.

    >>> modelfile_path("# comment\\nFROM /nonexistent/blob\\nTEMPLATE x") is None
    True
    """
    for line in modelfile.splitlines():
        key, _, value = line.strip().partition(" ")
        if key.upper() == "FROM":
            path = _absolute(value.strip())
            if path is None or path.parent.name != "blobs" or not _BLOB.fullmatch(path.name):
                return None
            if root is not None and local_server_process(root) is None:
                return None
            return path if path.is_file() else None
    return None


def vllm_model_dir(root: Any) -> tuple[Path, str | None, str, str] | None:
    """``(folder, chat_template, bos, eos)`` for a vLLM ``root`` that is a local folder with
    a ``tokenizer.json``; ``None`` otherwise (a Hugging Face id, or another machine)."""
    if not isinstance(root, str) or not root:
        return None
    folder = Path(root)
    if not (folder / "tokenizer.json").is_file():
        return None
    template: str | None = None
    bos = eos = ""
    config_file = folder / "tokenizer_config.json"
    if config_file.is_file():
        try:
            config = json.loads(config_file.read_text(encoding="utf-8"))
        except (OSError, ValueError):
            config = {}
        value = config.get("chat_template")
        template = value if isinstance(value, str) else None
        bos, eos = (_token_text(config.get(k)) for k in ("bos_token", "eos_token"))
    jinja = folder / "chat_template.jinja"
    if template is None and jinja.is_file():
        template = jinja.read_text(encoding="utf-8")
    return folder, template, bos, eos


def _token_text(value: Any) -> str:
    if isinstance(value, dict):
        value = value.get("content")
    return value if isinstance(value, str) else ""
