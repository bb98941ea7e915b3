"""``tokenflex serve``: the OpenAI-compatible proxy under uvicorn."""

from __future__ import annotations

import errno
import logging
import math
import socket
import time
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Annotated, Any

import typer

from ..errors import ConfigError
from ._app import app, err_console


@app.command()
def serve(
    upstream: Annotated[
        str | None,
        typer.Option(
            "--upstream",
            "-u",
            help="Upstream base URL (llama.cpp / vLLM / Ollama / OpenAI), e.g. "
            "http://127.0.0.1:8080. Also TOKENFLEX_SERVE_UPSTREAM or the config file.",
        ),
    ] = None,
    port: Annotated[int | None, typer.Option("--port", "-p", help="Port (default 8787).")] = None,
    host: Annotated[
        str | None, typer.Option("--host", help="Interface (default 127.0.0.1: loopback only).")
    ] = None,
    config: Annotated[
        Path | None,
        typer.Option(
            "--config", "-c", help="TOML config file (see docs/proxy.md).", dir_okay=False
        ),
    ] = None,
    mode: Annotated[
        str | None,
        typer.Option(
            "--mode",
            help="fit (default) or observe: forward every request as sent and only report "
            "the plan in x-tokenflex-would-* headers.",
        ),
    ] = None,
    log_level: Annotated[
        str, typer.Option("--log-level", help="debug, info, warning or error.")
    ] = "info",
    access_log: Annotated[
        bool, typer.Option("--access-log/--no-access-log", help="uvicorn's per-request access log.")
    ] = False,
) -> None:
    """Run the OpenAI-compatible proxy: every chat request is fitted before it is forwarded.

    The proxy key and the upstream API key come from the environment
    (TOKENFLEX_SERVE_PROXY_KEY, TOKENFLEX_SERVE_UPSTREAM_API_KEY) or the config file, never
    from the command line, where other users could read them.
    """
    level = log_level.upper()
    if level not in ("DEBUG", "INFO", "WARNING", "ERROR"):
        raise ConfigError(f"--log-level must be debug, info, warning or error, got {log_level!r}.")
    try:  # the server extra: missing, it is one line with the install hint
        import uvicorn  # noqa: F401

        from ..server import ServerConfig
    except ImportError as exc:
        raise ConfigError(
            f"tokenflex serve needs the server extra ({exc.name} is missing): "
            "pip install 'tokenflex[server]'."
        ) from exc
    settings = ServerConfig.load(config, upstream=upstream, port=port, host=host, mode=mode)
    # bind first: a port in use is one error line, before logging is set up and before
    # uvicorn's "startup complete"
    with listen_socket(settings.host, settings.port) as sock:
        _run(settings, sock, level=level, access_log=access_log)


def _run(settings: Any, sock: socket.socket, *, level: str, access_log: bool) -> None:
    from ..server import create_app

    with _server_logging(level):
        proxy = create_app(settings)  # a config it cannot serve stops here, with one line
        _serve(proxy, settings, sock, level=level, access_log=access_log)


class LineFormatter(logging.Formatter):
    """The server's log line format, its timestamp's text made once a second (every
    request logs a line; ``time.strftime`` of the same second each time was most of the
    format's cost). Writes what :class:`logging.Formatter` writes."""

    _second: tuple[float, str] = (math.nan, "")  # (no second equals it)

    def __init__(self) -> None:
        super().__init__("%(asctime)s %(levelname)s %(name)s: %(message)s")

    def formatTime(self, record: logging.LogRecord, datefmt: str | None = None) -> str:
        if datefmt is not None:
            return super().formatTime(record, datefmt)
        second = math.floor(record.created)  # (the second time.localtime reads)
        known = self._second  # (one tuple: threads see a second and its text together)
        if known[0] != second:
            known = self._second = (
                second,
                time.strftime(self.default_time_format, self.converter(record.created)),
            )
        msec = self.default_msec_format
        return known[1] if msec is None else msec % (known[1], record.msecs)


_LOG_FLAGS = ("_srcfile", "logThreads", "logProcesses", "logMultiprocessing")
"""The logging module's switches the server turns off (restored after it)."""


@contextmanager
def _server_logging(level: str) -> Iterator[None]:
    """The server's log lines on stderr, at ``level``, while it runs, in place of the
    root logger's handlers and of the command line's own (``warning: ...``: each line
    once, timestamped); the logging as it was after (``main(["serve", ...])`` called
    in a process that goes on, as the tests call it, leaves no handler on a stream that
    may be closed by then)."""
    root = logging.getLogger()
    named = [logging.getLogger(name) for name in ("tokenflex", "httpx")]
    handlers, levels = root.handlers[:], [root.level, *(n.level for n in named)]
    own = named[0].handlers[:]
    flags = [getattr(logging, flag) for flag in _LOG_FLAGS]
    handler = logging.StreamHandler()
    handler.setFormatter(LineFormatter())
    root.handlers[:] = [handler]
    named[0].handlers[:] = []
    root.setLevel(level)
    named[0].setLevel(level)
    # httpx logs every upstream request at INFO: one line per request is ours alone
    named[1].setLevel(max(logging.WARNING, logging.getLevelName(level)))
    # the format names no caller, thread or process: their lookups are skipped on every
    # record (the logging HOWTO's "Optimization"), a few µs of each request's log line
    for flag, off in zip(_LOG_FLAGS, (None, False, False, False), strict=True):
        setattr(logging, flag, off)
    try:
        yield
    finally:
        root.handlers[:] = handlers
        named[0].handlers[:] = own
        handler.close()
        for logger, was in zip((root, *named), levels, strict=True):
            logger.setLevel(was)
        for flag, was in zip(_LOG_FLAGS, flags, strict=True):
            setattr(logging, flag, was)


def _serve(proxy: Any, settings: Any, sock: socket.socket, *, level: str, access_log: bool) -> None:
    import uvicorn

    from ..server.limits import freeze_startup, uvicorn_options

    freeze_startup()  # what lives as long as the process: out of the collector's walks
    err_console.print(
        f"tokenflex proxy on http://{settings.host}:{settings.port}/v1 -> {settings.upstream}"
        + (" (proxy key required)" if settings.proxy_key else "")
        + (" (observe mode: requests forwarded as sent)" if settings.mode == "observe" else ""),
        highlight=False,
        soft_wrap=True,
    )
    server = uvicorn.Server(
        uvicorn.Config(
            proxy,
            host=settings.host,
            port=settings.port,
            log_level=level.lower(),
            access_log=access_log,
            lifespan="on",
            # header deadline (slowloris), short keep-alive, no server header, no websockets
            **uvicorn_options(settings),
        )
    )
    server.run(sockets=[sock])


def listen_socket(host: str, port: int) -> socket.socket:
    """A socket bound to ``host:port`` (as uvicorn binds one), or a :class:`ConfigError`
    naming the address and the fix: a port in use, an address this machine does not
    have, a port below 1024 without the right."""
    try:
        family, kind, proto, _, address = socket.getaddrinfo(host, port, type=socket.SOCK_STREAM)[0]
        sock = socket.socket(family, kind, proto)
    except OSError as exc:
        raise ConfigError(f"Cannot listen on {host}:{port}: {exc.strerror or exc}.") from exc
    try:
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        sock.bind(address)
        sock.listen(2048)
    except OSError as exc:
        sock.close()
        if exc.errno == errno.EADDRINUSE:
            reason = (
                "the port is in use (another tokenflex serve?). Stop that process or pick "
                "another port: --port N (or TOKENFLEX_SERVE_PORT)."
            )
        else:
            reason = f"{(exc.strerror or str(exc)).lower()}. Check --host and --port."
        raise ConfigError(f"Cannot listen on {host}:{port}: {reason}") from exc
    return sock
