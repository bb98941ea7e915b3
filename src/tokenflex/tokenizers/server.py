"""Exact counts through a running server's tokenize endpoint.

The server that runs the model knows its tokenizer best. Three dialects exist, tried in
this order on first use (``kind="auto"``) and remembered:

============================  ==========================  ===================================
server                        endpoint                    request
============================  ==========================  ===================================
llama-cpp-python              ``POST /extras/tokenize``   ``{"input": text}``
llama.cpp ``llama-server``    ``POST /tokenize``          ``{"content": text,
                                                          "add_special": false,
                                                          "parse_special": true}``
vLLM                          ``POST /tokenize``          ``{"prompt": text,
                                                          "add_special_tokens": false}``
============================  ==========================  ===================================

All answer ``{"tokens": [...]}`` (vLLM also ``count``). Special-token strings
(``"<|im_start|>"``) are parsed as special tokens, as each server does with a prompt
rendered from its chat template; no BOS is counted (llama-cpp-python adds the vocabulary's
BOS, if it has one: we subtract what the empty string tokenizes to).
"""

from __future__ import annotations

import contextlib
import logging
import threading
import time
import weakref
from collections.abc import Iterable, Iterator, Mapping
from typing import Any, Literal

import httpcore
import httpx

from ..errors import TokenizerUnavailableError

__all__ = ["ServerKind", "ServerTokenizer", "server_root"]

log = logging.getLogger("tokenflex")

ServerKind = Literal["auto", "llama-cpp-python", "llama.cpp", "vllm"]
_KINDS: tuple[ServerKind, ...] = ("llama-cpp-python", "llama.cpp", "vllm")


def server_root(url: str) -> str:
    """The server's root URL: ``http://host:8000/v1/`` → ``http://host:8000``."""
    root = url.strip().rstrip("/")
    if root.endswith("/v1"):
        root = root[: -len("/v1")]
    if not root.startswith(("http://", "https://")):
        root = "http://" + root
    return root


class _Deadline(threading.local):
    """When the calling thread's tokenize call must be over (None: no call running)."""

    at: float | None = None

    def left(self, timeout: float | None) -> float | None:
        """The socket timeout for one read or write: ``timeout``, cut to what is left."""
        if self.at is None:
            return timeout
        rest = self.at - time.monotonic()
        if rest <= 0:
            raise httpcore.ReadTimeout("the tokenize call passed its deadline")
        return rest if timeout is None else min(timeout, rest)


class _DeadlineStream(httpcore.NetworkStream):
    def __init__(self, inner: httpcore.NetworkStream, deadline: _Deadline) -> None:
        self.inner, self.deadline = inner, deadline

    def read(self, max_bytes: int, timeout: float | None = None) -> bytes:
        return self.inner.read(max_bytes, self.deadline.left(timeout))

    def write(self, buffer: bytes, timeout: float | None = None) -> None:
        self.inner.write(buffer, self.deadline.left(timeout))

    def close(self) -> None:
        self.inner.close()

    def start_tls(
        self, ssl_context: Any, server_hostname: str | None = None, timeout: float | None = None
    ) -> httpcore.NetworkStream:
        tls = self.inner.start_tls(ssl_context, server_hostname, self.deadline.left(timeout))
        return _DeadlineStream(tls, self.deadline)

    def get_extra_info(self, info: str) -> Any:
        return self.inner.get_extra_info(info)


class _DeadlineBackend(httpcore.NetworkBackend):
    def __init__(self, deadline: _Deadline) -> None:
        self.inner, self.deadline = httpcore.SyncBackend(), deadline

    def connect_tcp(
        self,
        host: str,
        port: int,
        timeout: float | None = None,
        local_address: str | None = None,
        socket_options: Iterable[Any] | None = None,
    ) -> httpcore.NetworkStream:
        stream = self.inner.connect_tcp(
            host, port, self.deadline.left(timeout), local_address, socket_options
        )
        return _DeadlineStream(stream, self.deadline)

    def connect_unix_socket(
        self, path: str, timeout: float | None = None, socket_options: Iterable[Any] | None = None
    ) -> httpcore.NetworkStream:
        stream = self.inner.connect_unix_socket(path, self.deadline.left(timeout), socket_options)
        return _DeadlineStream(stream, self.deadline)

    def sleep(self, seconds: float) -> None:
        self.inner.sleep(seconds)


class _DeadlineTransport(httpx.HTTPTransport):
    """httpx's transport over sockets whose every read and write waits at most until the
    calling thread's deadline: httpx's own timeouts are per read, so a server trickling a
    byte every few seconds would hold a call for as long as it likes."""

    def __init__(self) -> None:
        super().__init__()
        self.deadline = _Deadline()
        # the pool httpx builds, on our sockets (httpx takes no network backend itself)
        self._pool = httpcore.ConnectionPool(
            ssl_context=httpx.create_ssl_context(),
            max_connections=4,
            network_backend=_DeadlineBackend(self.deadline),
        )

    @contextlib.contextmanager
    def within(self, seconds: float) -> Iterator[None]:
        """Every call made in the block ends within ``seconds`` (all reads together)."""
        self.deadline.at = time.monotonic() + seconds
        try:
            yield
        finally:
            self.deadline.at = None


class ServerTokenizer:
    """Counts with the tokenizer of the model a server runs (``server:URL``).

    >>> tok = ServerTokenizer("http://127.0.0.1:8080/v1")  # doctest: +SKIP
    >>> tok.count("Hello world")  # doctest: +SKIP
    2
    """

    exact = True

    def __init__(
        self,
        url: str,
        *,
        kind: ServerKind = "auto",
        model: str | None = None,
        api_key: str | None = None,
        timeout: float = 10.0,
        client: httpx.Client | None = None,
    ) -> None:
        """Args:
        url: The server's base URL, with or without ``/v1``.
        kind: The dialect, or ``auto`` to detect it on first use.
        model: Model name for servers that host several (vLLM, llama-cpp-python).
        api_key: Sent as ``Authorization: Bearer ...``.
        timeout: Seconds per request, in all: a server that trickles its answer is cut
            off then (with a client of its own; a given ``client``'s timeouts apply).
        client: An httpx client to use (tests, custom transports); owned by the caller.
        """
        if kind != "auto" and kind not in _KINDS:
            raise TokenizerUnavailableError(
                f"Unknown server kind {kind!r}; use one of {('auto', *_KINDS)}."
            )
        self.url = url
        self.root = server_root(url)
        self.name = f"server:{url}"
        self.model = model
        self.kind: ServerKind = kind
        headers = {"Authorization": f"Bearer {api_key}"} if api_key else {}
        self._own_client = client is None
        self._transport = _DeadlineTransport() if client is None else None
        self._client = client or httpx.Client(
            timeout=timeout, headers=headers, transport=self._transport
        )
        if self._own_client:
            # Tokenizers live in a process-wide cache: close the pooled connection when
            # this one is collected or at exit, not when the socket is garbage.
            self._finalizer = weakref.finalize(self, self._client.close)
        self._timeout = timeout
        self._bos: list[int] = []
        self._detected = kind != "auto"
        if kind == "llama-cpp-python":
            self._bos = self._call("llama-cpp-python", "")

    def _request(self, kind: ServerKind, text: str) -> tuple[str, dict[str, Any]]:
        if kind == "llama-cpp-python":
            body: dict[str, Any] = {"input": text}
            if self.model:
                body["model"] = self.model
            return "/extras/tokenize", body
        if kind == "llama.cpp":
            return "/tokenize", {"content": text, "add_special": False, "parse_special": True}
        body = {"prompt": text, "add_special_tokens": False}
        if self.model:
            body["model"] = self.model
        return "/tokenize", body

    def _post(self, path: str, body: Mapping[str, Any]) -> httpx.Response:
        bound = (
            self._transport.within(self._timeout)
            if self._transport is not None
            else contextlib.nullcontext()
        )
        try:
            with bound:
                return self._client.post(self.root + path, json=body, timeout=self._timeout)
        except httpx.HTTPError as exc:
            raise TokenizerUnavailableError(
                f"Cannot reach the tokenize endpoint {self.root}{path} "
                f"({type(exc).__name__}: {exc}); is the server running? Use another "
                "tokenizer (or the model's GGUF file, gguf:PATH) if not."
            ) from exc

    def _call(self, kind: ServerKind, text: str) -> list[int]:
        path, body = self._request(kind, text)
        r = self._post(path, body)
        if r.status_code != 200:
            raise TokenizerUnavailableError(
                f"{self.root}{path} answered HTTP {r.status_code}: {r.text[:200]!r}. "
                f"Check the URL and kind={self.kind!r}."
            )
        return _tokens(r, f"{self.root}{path}")

    def _detect(self) -> None:
        tried = []
        for kind in _KINDS:
            path, body = self._request(kind, "")
            r = self._post(path, body)
            if r.status_code == 200:
                try:
                    self._bos = _tokens(r, self.root + path)
                except TokenizerUnavailableError:
                    tried.append(f"{path} ({kind}): not a tokenize answer")
                    continue
                if kind != "llama-cpp-python":
                    self._bos = []
                self.kind = kind
                self._detected = True
                log.debug("tokenflex: %s speaks the %s tokenize dialect", self.root, kind)
                return
            tried.append(f"{path} ({kind}): HTTP {r.status_code}")
        raise TokenizerUnavailableError(
            f"{self.root} has no tokenize endpoint tokenflex knows: tried "
            f"{'; '.join(tried)}. Supported: llama-cpp-python, llama.cpp llama-server, "
            "vLLM. Use the model's own tokenizer instead (gguf:PATH, hf:PATH)."
        )

    def encode(self, text: str) -> list[int]:
        """Token ids of ``text`` (special tokens parsed, no BOS)."""
        if not self._detected:
            self._detect()
        tokens = self._call(self.kind, text)
        n = len(self._bos)
        if n and tokens[:n] == self._bos:
            tokens = tokens[n:]
        return tokens

    def count(self, text: str) -> int:
        """Tokens in ``text`` as the server's tokenizer sees it."""
        return len(self.encode(text))

    def close(self) -> None:
        """Close the HTTP client (if this tokenizer created it)."""
        if self._own_client:
            self._finalizer()

    def __repr__(self) -> str:
        return f"ServerTokenizer({self.url!r}, kind={self.kind!r})"


def _tokens(r: httpx.Response, where: str) -> list[int]:
    try:
        data = r.json()
        tokens = data["tokens"]
        # llama.cpp's with_pieces=true answers [{"id": .., "piece": ..}]
        return [int(t["id"]) if isinstance(t, Mapping) else int(t) for t in tokens]
    except (ValueError, KeyError, TypeError) as exc:
        raise TokenizerUnavailableError(
            f"{where} did not answer with {{'tokens': [...]}}: {r.text[:200]!r}"
        ) from exc
