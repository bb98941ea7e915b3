"""Ask a running OpenAI-compatible server what model it serves and its real window.

A registry knows a model's *trained* window; the server knows the window it actually
runs with (``--max-model-len``, ``--n_ctx``, ``num_ctx``), often much smaller. What each
server exposes, and what we ask:

==================  =====================================================================
vLLM                ``GET /v1/models`` → ``data[i].max_model_len``
llama.cpp server    ``GET /props`` → ``default_generation_settings.n_ctx`` (and its chat
                    template, BOS/EOS); ``/v1/models`` ``meta.n_ctx_train`` as a fallback
Ollama              ``POST /api/show`` → ``num_ctx`` in ``parameters`` (else 2,048, the
                    conservative default), ``<arch>.context_length`` as the upper bound
llama-cpp-python    exposes no window at all. It refuses a prompt of ``n_ctx`` tokens or
                    more *before evaluating anything* with ``context_length_exceeded`` and
                    the window in the message, so we send one such request
                    (``probe_tokens`` of text, checked with its tokenize endpoint first).
==================  =====================================================================

When the server's model file is on this machine (:mod:`~tokenflex.models.served_files`:
llama-cpp-python's command line, llama.cpp's ``model_path``, Ollama's modelfile, vLLM's
local folder) the Model counts with it, offline (``gguf:PATH``, ``hf:DIR``), with the
template the server renders, so counting never waits on a busy server.

What was discovered is kept on disk (:func:`discovery_cache_dir`, one JSON file per server
URL + model) for ``cache_ttl`` seconds; a server on this machine must also still be the same
process. The discovery logic is written once as a generator of HTTP requests (sans-I/O) and
driven by :func:`discover_model` (httpx sync) and :func:`adiscover_model` (httpx async).
"""

from __future__ import annotations

import asyncio
import dataclasses
import hashlib
import json
import logging
import os
import re
import time
from collections.abc import Generator, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import httpx

from ..chat_template import compile_template, render
from ..errors import ConfigError, TokenizerUnavailableError, UnknownModelError, UpstreamError
from ..tokenizers import get_tokenizer
from ..tokenizers.server import server_root
from .registry import Model, get_model
from .served_files import local_server_process, modelfile_path, served_path, vllm_model_dir

__all__ = [
    "DEFAULT_PROBE_TOKENS",
    "DISCOVERY_TTL_S",
    "MAX_ANSWER_BYTES",
    "OLLAMA_DEFAULT_NUM_CTX",
    "REFUSAL_WORDINGS",
    "FieldDifference",
    "ModelComparison",
    "Refusal",
    "adiscover_model",
    "compare",
    "discover_model",
    "discovery_cache_dir",
    "refusal",
    "template_renders",
]

log = logging.getLogger("tokenflex")

DEFAULT_PROBE_TOKENS = 262_144
"""Prompt size of the llama-cpp-python window probe (about 0.5 MB of text, ~0.6 s)."""
OLLAMA_DEFAULT_NUM_CTX = 2_048
"""The window assumed when an Ollama model sets no ``num_ctx`` (Ollama's historical default,
the smallest it has used: a request sized for it fits whatever the server really uses)."""

DISCOVERY_TTL_S = 3600.0
"""How long a discovered model is reused from the disk cache (seconds)."""

_N = r"(\d[\d,]*)"  # 128000 or 128,000

REFUSAL_WORDINGS: tuple[tuple[str, re.Pattern[str]], ...] = (
    # Anthropic: "prompt is too long: 210000 tokens > 200000 maximum"
    ("anthropic", re.compile(rf"prompt is too long: (?P<asked>{_N}) tokens > (?P<window>{_N})")),
    # Anthropic, input + max_tokens: "... exceed context limit: 197000 + 8192 > 200000"
    (
        "anthropic-output",
        re.compile(
            rf"exceed context limit: (?P<input>{_N}) \+ (?P<output>{_N}) > (?P<window>{_N})"
        ),
    ),
    # llama.cpp: "request (4476 tokens) exceeds the available context size (4096 tokens)"
    (
        "llama.cpp",
        re.compile(
            rf"request \((?P<asked>{_N}) tokens\) exceeds the available context size "
            rf"\((?P<window>{_N}) tokens\)"
        ),
    ),
    # OpenAI, vLLM, llama-cpp-python: "This model's maximum context length is 128000
    # tokens. However, your messages resulted in 130000 tokens" / "However, you requested
    # 2100 tokens" (vLLM's "your request has N input tokens" may leave out the output)
    (
        "openai",
        re.compile(
            rf"maximum context length is (?P<window>{_N}) tokens"
            rf"(?:.*?(?:resulted in|you requested) (?P<asked>{_N}) )?",
            re.DOTALL,
        ),
    ),
)
"""How upstreams word a context-length refusal: (name, pattern with a ``window`` group
and, where the wording gives it, the request's own size: ``asked``, or ``input`` +
``output``). Tried in order on the error's message."""


@dataclass(frozen=True)
class Refusal:
    """What an upstream's context-length refusal says."""

    window: int
    """The window the upstream states (tokens)."""
    asked: int | None
    """The request's size by the upstream's count, where the wording gives it."""
    wording: str
    """Which of :data:`REFUSAL_WORDINGS` matched (``llama.cpp-fields``: llama.cpp's JSON
    ``n_ctx`` / ``n_prompt_tokens``)."""


def _number(text: str | None) -> int | None:
    return int(text.replace(",", "")) if text else None


def refusal(status: int, body: bytes | str) -> Refusal | None:
    """The window an upstream states when it refuses a request as too long, or None
    when ``body`` is not such a refusal (any status but 4xx, another error, no number).

    Only the error's message is read (JSON ``error.message``, ``error`` or ``message``;
    the text itself when it is not JSON), at most 64 KiB of it.

    >>> refusal(400, '{"error": {"message": "prompt is too long: 210000 tokens > 200000 maximum"}}')
    Refusal(window=200000, asked=210000, wording='anthropic')
    >>> refusal(400, b'{"error": {"message": "Rate limit"}}') is None
    True
    """
    if not 400 <= status < 500:
        return None
    text = body[:65536].decode("utf-8", "replace") if isinstance(body, bytes) else body[:65536]
    message: Any = text
    fields: Mapping[str, Any] = {}
    try:
        data = json.loads(text)
    except ValueError:
        data = None
    if isinstance(data, Mapping):
        error = data.get("error", data)
        if isinstance(error, Mapping):
            fields = error
            message = error.get("message")
        else:
            message = error
        if not isinstance(message, str):
            message = data.get("message")
    if not isinstance(message, str):
        message = ""
    for name, pattern in REFUSAL_WORDINGS:
        found = pattern.search(message)
        if found is None:
            continue
        groups = found.groupdict()
        asked = _number(groups.get("asked"))
        if groups.get("input") is not None:
            asked = (_number(groups["input"]) or 0) + (_number(groups["output"]) or 0)
        window = _number(groups["window"])
        if window:
            return Refusal(window, asked, name)
    # llama.cpp ("exceed_context_size_error", whatever the message says): its JSON fields
    n_ctx = _int(fields.get("n_ctx"))
    if fields.get("type") == "exceed_context_size_error" and n_ctx:
        return Refusal(n_ctx, _int(fields.get("n_prompt_tokens")), "llama.cpp-fields")
    return None


@dataclass(frozen=True)
class _Req:
    method: str
    path: str
    json: Any = None


@dataclass(frozen=True)
class _Resp:
    status: int
    """HTTP status, or 0 when the server could not be reached."""
    body: Any
    """Parsed JSON, or None."""
    text: str


_Flow = Generator[_Req, _Resp, Model]


def _pick(entries: list[Mapping[str, Any]], model: str | None, where: str) -> Mapping[str, Any]:
    if not entries:
        raise UpstreamError(f"{where} lists no models.", status_code=502)
    if model is None:
        return entries[0]
    for e in entries:
        if e.get("id") == model or e.get("name") == model or e.get("model") == model:
            return e
    ids = [str(e.get("id")) for e in entries]
    raise UpstreamError(f"{where} does not serve {model!r}; it serves {ids}.", status_code=404)


def _int(value: Any) -> int | None:
    try:
        n = int(value)
    except (TypeError, ValueError):
        return None
    return n if n > 0 else None


def _registry(name: str) -> Model | None:
    """The registry's entry for a served name, without the unknown-model warning."""
    try:
        return get_model(name, strict=True)
    except UnknownModelError:
        return None


def _model(
    name: str,
    window: int,
    *,
    root: str,
    exact_tokenizer: bool,
    chat_template: str | None = None,
    bos_token: str = "",
    eos_token: str = "",
    provider: str,
    local_tokenizer: str | None = None,
) -> Model:
    """Registry knowledge (prices, output limit, tokenizer) with the server's window; a
    ``local_tokenizer`` (the server's own model file here) counts instead of its endpoint.
    A chat template that cannot render a one-message conversation within the render
    bounds (:mod:`tokenflex.chat_template`) is not used."""
    if chat_template is not None and not template_renders(chat_template, bos_token, eos_token):
        log.warning(
            "tokenflex: %s sent a chat template for %s that does not render within bounds; "
            "counting without it",
            root,
            name[:200],
        )
        chat_template = None
    base = _registry(name)
    if local_tokenizer is not None:
        tokenizer, chat_format = local_tokenizer, "template" if chat_template else "generic"
    elif chat_template:
        tokenizer, chat_format = f"server:{root}", "template"
    elif base is not None and base.tokenizer.partition(":")[0] != "estimate":
        tokenizer, chat_format = base.tokenizer, base.chat_format
    elif exact_tokenizer:
        # exact text counts, conservative per-message overhead
        tokenizer, chat_format = f"server:{root}", "generic"
    elif base is not None:  # the registry's family bound (estimate:qwen2, ...)
        tokenizer, chat_format = base.tokenizer, "generic"
    else:
        tokenizer, chat_format = "estimate:all", "generic"  # an unknown tokenizer
    output = base.max_output_tokens if base is not None else None
    if output is not None and output >= window:
        output = None
    return Model(
        name=name,
        context_window=window,
        max_output_tokens=output,
        tokenizer=tokenizer,
        chat_format=chat_format,
        input_price=base.input_price if base is not None else None,
        output_price=base.output_price if base is not None else None,
        provider=provider,
        aliases=(),
        family=base.family if base is not None else "",
        chat_template=chat_template,
        bos_token=bos_token,
        eos_token=eos_token,
        source="server",
    )


def template_renders(template: str, bos_token: str = "", eos_token: str = "") -> bool:
    """Whether ``template`` compiles and renders a one-message conversation within the
    render bounds (a template from a server is code from the network)."""
    from ..errors import TokenflexError

    try:
        render(
            compile_template(template),
            [{"role": "user", "content": "Hello"}],
            add_generation_prompt=True,
            bos_token=bos_token,
            eos_token=eos_token,
        )
    except TokenflexError as exc:
        log.info("tokenflex: chat template refused: %s", exc)
        return False
    return True


def _gguf(path: Path, *, template: bool) -> tuple[str, str | None, str, str] | None:
    """``(tokenizer, chat template, bos, eos)`` from a GGUF file here, or None when it
    cannot be read (llama-cpp-python missing, not a GGUF)."""
    from ..tokenizers.gguf import GGUFTokenizer

    name = f"gguf:{path}"
    try:
        tok = get_tokenizer(name).tokenizer
    except TokenizerUnavailableError as exc:
        log.info("tokenflex: cannot count with the server's model file %s: %s", path, exc)
        return None
    assert isinstance(tok, GGUFTokenizer)
    return name, tok.chat_template if template else None, tok.bos_token, tok.eos_token


def _flow(root: str, model: str | None, probe_tokens: int) -> _Flow:
    where = f"{root}/v1/models"
    r = yield _Req("GET", "/v1/models")
    if r.status == 0:
        raise UpstreamError(
            f"Cannot reach {where} ({r.text}); is the server running at {root}?",
            status_code=502,
        )
    if r.status != 200 or not isinstance(r.body, Mapping):
        raise UpstreamError(
            f"{where} answered HTTP {r.status}: {r.text[:200]!r} (not an OpenAI-compatible "
            "server, or a wrong URL / API key).",
            status_code=r.status or 502,
            body=r.text,
        )
    entries = [
        e for e in r.body.get("data") or r.body.get("models") or [] if isinstance(e, Mapping)
    ]
    entry = _pick(entries, model, where)
    name = str(entry.get("id") or entry.get("name") or model)

    # vLLM
    window = _int(entry.get("max_model_len"))
    if window is not None:
        log.info("tokenflex: %s serves %s with max_model_len=%d (vLLM)", root, name, window)
        served = served_path(root, entry.get("root"))  # only what its process here runs
        folder = vllm_model_dir(str(served)) if served is not None else None
        if folder is not None:
            path, template, bos, eos = folder
            return _model(
                name,
                window,
                root=root,
                exact_tokenizer=True,
                chat_template=template,
                bos_token=bos,
                eos_token=eos,
                provider="vllm",
                local_tokenizer=f"hf:{path}",
            )
        return _model(name, window, root=root, exact_tokenizer=True, provider="vllm")

    # llama.cpp llama-server
    p = yield _Req("GET", "/props")
    if p.status == 200 and isinstance(p.body, Mapping):
        settings = p.body.get("default_generation_settings")
        n_ctx = _int(p.body.get("n_ctx"))
        if n_ctx is None and isinstance(settings, Mapping):
            n_ctx = _int(settings.get("n_ctx"))
        meta = entry.get("meta")
        if n_ctx is None and isinstance(meta, Mapping):
            n_ctx = _int(meta.get("n_ctx_train"))
        if n_ctx is not None:
            log.info("tokenflex: %s serves %s with n_ctx=%d (llama.cpp)", root, name, n_ctx)
            template = p.body.get("chat_template")
            # a path from the network is opened only when the process here runs it
            model_path = served_path(root, p.body.get("model_path"))
            local = (
                _gguf(model_path, template=False)
                if model_path is not None and model_path.is_file()
                else None
            )
            return _model(
                name,
                n_ctx,
                root=root,
                exact_tokenizer=True,
                chat_template=template if isinstance(template, str) and template else None,
                bos_token=str(p.body.get("bos_token") or ""),
                eos_token=str(p.body.get("eos_token") or ""),
                provider="llama.cpp",
                local_tokenizer=local[0] if local else None,
            )

    # Ollama
    s = yield _Req("POST", "/api/show", {"model": name})
    if s.status == 200 and isinstance(s.body, Mapping):
        trained = None
        info = s.body.get("model_info")
        if isinstance(info, Mapping):
            trained = next(
                (_int(v) for k, v in info.items() if str(k).endswith(".context_length")), None
            )
        num_ctx = None
        for line in str(s.body.get("parameters") or "").splitlines():
            key, _, value = line.strip().partition(" ")
            if key == "num_ctx":
                num_ctx = _int(value.strip())
        if num_ctx is None:
            num_ctx = OLLAMA_DEFAULT_NUM_CTX
            log.info(
                "tokenflex: Ollama model %s sets no num_ctx; assuming %d (pass "
                "options.num_ctx in requests and context_window= to use more)",
                name,
                num_ctx,
            )
        window = min(num_ctx, trained) if trained else num_ctx
        blob = modelfile_path(str(s.body.get("modelfile") or ""), root)
        local = _gguf(blob, template=True) if blob is not None else None
        if local is not None:
            # Ollama renders its own Go template, written to match the model's Jinja one
            tokenizer, template, bos, eos = local
            return _model(
                name,
                window,
                root=root,
                exact_tokenizer=True,
                chat_template=template,
                bos_token=bos,
                eos_token=eos,
                provider="ollama",
                local_tokenizer=tokenizer,
            )
        return _model(name, window, root=root, exact_tokenizer=False, provider="ollama")

    # llama-cpp-python: no window anywhere; its refusal message carries it.
    c = yield _Req("POST", "/extras/tokenize/count", {"input": ""})
    process = local_server_process(root) if c.status == 200 else None
    if process is not None and process.n_ctx is not None:
        # the server's own command line (a server on this machine): no probe needed
        return _llama_cpp_python(name, process.n_ctx, root, process)
    if c.status == 200 and probe_tokens > 0:
        text = " a" * probe_tokens
        c = yield _Req("POST", "/extras/tokenize/count", {"input": text})
        count = _int(c.body.get("count")) if isinstance(c.body, Mapping) else None
        if count is not None and count < probe_tokens:
            text = text * (probe_tokens // count + 1)
        e = yield _Req("POST", "/v1/completions", {"model": name, "prompt": text, "max_tokens": 1})
        refused = refusal(e.status, e.text) if e.status == 400 else None
        if refused is not None:
            return _llama_cpp_python(name, refused.window, root, process)
        raise UpstreamError(
            f"{root} (llama-cpp-python) accepted a {probe_tokens:,}-token probe or did not "
            f"say its window (HTTP {e.status}: {e.text[:200]!r}); pass context_window= "
            "explicitly.",
            status_code=e.status or 502,
            body=e.text,
        )

    base = _registry(name)
    if base is not None:
        log.info("tokenflex: %s does not expose a window; using the registry's %s", root, base.name)
        return base
    raise UpstreamError(
        f"{root} serves {name!r} but exposes no context window (not vLLM, llama.cpp, "
        "Ollama or llama-cpp-python) and the registry does not know it. Register it with "
        "tokenflex.register_model(Model(name=..., context_window=...)).",
        status_code=502,
    )


def _llama_cpp_python(name: str, window: int, root: str, process: Any) -> Model:
    log.info("tokenflex: %s serves %s with n_ctx=%d (llama-cpp-python)", root, name, window)
    local = None
    if process is not None and process.model_path is not None:
        # its default renders the GGUF's own template; another --chat_format does not
        own = process.chat_format in (None, "chat_template.default")
        local = _gguf(process.model_path, template=own)
    if local is None:
        return _model(name, window, root=root, exact_tokenizer=True, provider="llama-cpp-python")
    tokenizer, template, bos, eos = local
    return _model(
        name,
        window,
        root=root,
        exact_tokenizer=True,
        chat_template=template,
        bos_token=bos,
        eos_token=eos,
        provider="llama-cpp-python",
        local_tokenizer=tokenizer,
    )


# -- the disk cache ------------------------------------------------------------------------------


def discovery_cache_dir() -> Path:
    """Where discovered models are kept: ``$TOKENFLEX_CACHE_DIR/discovery``, else the user
    cache folder (``$XDG_CACHE_HOME/tokenflex/discovery``, ``~/.cache/tokenflex/discovery``)."""
    base = os.environ.get("TOKENFLEX_CACHE_DIR")
    if not base:
        xdg = os.environ.get("XDG_CACHE_HOME") or os.path.join(os.path.expanduser("~"), ".cache")
        base = os.path.join(xdg, "tokenflex")
    return Path(base) / "discovery"


def _server_identity(root: str) -> list[int] | None:
    """The serving process (pid, start time in ms) for a server on this machine."""
    process = local_server_process(root)
    return None if process is None else [process.pid, process.started_ms]


def _cache_file(root: str, model: str | None) -> Path:
    key = hashlib.sha256(f"{root}\n{model or ''}".encode()).hexdigest()[:32]
    return discovery_cache_dir() / f"{key}.json"


def _cached(root: str, model: str | None, ttl: float) -> Model | None:
    if ttl <= 0:
        return None
    path = _cache_file(root, model)
    try:
        entry = json.loads(path.read_text(encoding="utf-8"))
        if not (0 <= time.time() - float(entry["saved"]) <= ttl):
            return None
        if entry.get("server") != _server_identity(root):
            return None  # another process answers on that port now
        fields = dict(entry["model"])
        fields["aliases"] = tuple(fields.get("aliases", ()))
        found = Model(**fields)
    except (OSError, ValueError, KeyError, TypeError, ConfigError):
        return None
    if not _trusted(found, root):
        log.info("tokenflex: discovery cache entry %s is not valid; asking the server", path)
        return None
    log.debug("tokenflex: %s from the discovery cache %s", found.name, path)
    return found


_MAX_WINDOW = 100_000_000


def _trusted(found: Model, root: str) -> bool:
    """Whether a discovered model (fresh, or read back from the disk cache) is one this
    process would make from a server's answer: a sane window, a tokenizer that is the
    server's endpoint, a registry name or a model file its process here runs, and a chat
    template that renders within bounds. A cache file written by anything else, or an
    answer that no longer holds, is not used."""
    if not 0 < found.context_window <= _MAX_WINDOW or len(found.name) > 1000:
        return False
    kind, _, rest = found.tokenizer.partition(":")
    if kind == "server" and rest != root:
        return False
    if kind in ("gguf", "hf"):
        file = Path(rest)
        ollama_blob = file.parent.name == "blobs" and modelfile_path(f"FROM {file}", root)
        if not (ollama_blob or served_path(root, rest) is not None) or not file.exists():
            return False
    template = found.chat_template
    return template is None or template_renders(template, found.bos_token, found.eos_token)


def _store(root: str, model: str | None, found: Model, ttl: float) -> None:
    if ttl <= 0 or found.source != "server":  # only what a server's answer made
        return
    path = _cache_file(root, model)
    entry = {
        "saved": time.time(),
        "url": root,
        "server": _server_identity(root),
        "model": dataclasses.asdict(found),
    }
    try:
        path.parent.mkdir(parents=True, exist_ok=True)
        tmp = path.with_suffix(f".{os.getpid()}.tmp")
        tmp.write_text(json.dumps(entry), encoding="utf-8")
        os.replace(tmp, path)
    except OSError as exc:
        log.info("tokenflex: cannot write the discovery cache %s: %s", path, exc)


MAX_ANSWER_BYTES = 16 * 1024 * 1024
"""Largest server answer discovery reads (a longer one is not parsed)."""


def _response(r: httpx.Response, data: bytes | None) -> _Resp:
    """``r`` as the flow sees it; ``data`` None: its body was over MAX_ANSWER_BYTES."""
    if data is None:
        return _Resp(r.status_code, None, f"(an answer over {MAX_ANSWER_BYTES:,} bytes, not read)")
    text = data.decode("utf-8", "replace")
    try:
        body = json.loads(text)
    except ValueError:
        body = None
    return _Resp(r.status_code, body, text)


def _read(client: httpx.Client, req: _Req, root: str) -> _Resp:
    with client.stream(req.method, root + req.path, json=req.json) as resp:
        data = bytearray()
        for chunk in resp.iter_bytes():
            data += chunk
            if len(data) > MAX_ANSWER_BYTES:
                return _response(resp, None)
        return _response(resp, bytes(data))


async def _aread(client: httpx.AsyncClient, req: _Req, root: str) -> _Resp:
    async with client.stream(req.method, root + req.path, json=req.json) as resp:
        data = bytearray()
        async for chunk in resp.aiter_bytes():
            data += chunk
            if len(data) > MAX_ANSWER_BYTES:
                return _response(resp, None)
        return _response(resp, bytes(data))


def _headers(api_key: str | None) -> dict[str, str]:
    return {"Authorization": f"Bearer {api_key}"} if api_key else {}


def discover_model(
    base_url: str,
    *,
    model: str | None = None,
    api_key: str | None = None,
    timeout: float = 5.0,
    probe_tokens: int = DEFAULT_PROBE_TOKENS,
    transport: httpx.BaseTransport | None = None,
    cache_ttl: float = DISCOVERY_TTL_S,
) -> Model:
    """The model a running server serves, with the window it really runs with.

    Args:
        base_url: The server's OpenAI base URL (``http://host:8000/v1``) or its root.
        model: Which model, when the server hosts several; default the first listed.
        api_key: Sent as ``Authorization: Bearer ...``.
        timeout: Seconds per request.
        probe_tokens: Size of the llama-cpp-python window probe; 0 disables it.
        transport: An httpx transport (tests).
        cache_ttl: Seconds a discovery is reused from the disk cache
            (:func:`discovery_cache_dir`); 0 asks the server every time.

    Returns:
        A :class:`~tokenflex.models.Model` with ``source="server"``; prices and output
        limits come from the registry when it knows the name; counts from the server's
        model file when it is on this machine, else from its tokenize endpoint.

    Raises:
        UpstreamError: the server is unreachable, answers with an error, or exposes no
            window for a model the registry does not know.

    >>> discover_model("http://127.0.0.1:8000/v1").context_window  # doctest: +SKIP
    2048
    """
    root = server_root(base_url)
    cached = _cached(root, model, cache_ttl)
    if cached is not None:
        return cached
    flow = _flow(root, model, probe_tokens)
    with httpx.Client(timeout=timeout, headers=_headers(api_key), transport=transport) as client:
        req = next(flow)
        while True:
            try:
                r = _read(client, req, root)
            except httpx.HTTPError as exc:
                r = _Resp(0, None, f"{type(exc).__name__}: {exc}")
            try:
                req = flow.send(r)
            except StopIteration as done:
                result: Model = done.value
                _store(root, model, result, cache_ttl)
                return result


async def adiscover_model(
    base_url: str,
    *,
    model: str | None = None,
    api_key: str | None = None,
    timeout: float = 5.0,
    probe_tokens: int = DEFAULT_PROBE_TOKENS,
    transport: httpx.AsyncBaseTransport | None = None,
    cache_ttl: float = DISCOVERY_TTL_S,
) -> Model:
    """Async twin of :func:`discover_model`. The work between requests (finding the
    server's process, loading its model file, the disk cache) runs in a worker thread, so
    the event loop stays free."""
    root = server_root(base_url)
    cached = await asyncio.to_thread(_cached, root, model, cache_ttl)
    if cached is not None:
        return cached
    flow = _flow(root, model, probe_tokens)
    async with httpx.AsyncClient(
        timeout=timeout, headers=_headers(api_key), transport=transport
    ) as client:
        step: _Req | Model = next(flow)
        while isinstance(step, _Req):
            try:
                r = await _aread(client, step, root)
            except httpx.HTTPError as exc:
                r = _Resp(0, None, f"{type(exc).__name__}: {exc}")
            step = await asyncio.to_thread(_advance, flow, r)
    await asyncio.to_thread(_store, root, model, step, cache_ttl)
    return step


def _advance(flow: _Flow, r: _Resp) -> _Req | Model:
    """The flow's next request, or its result (StopIteration cannot cross a thread)."""
    try:
        return flow.send(r)
    except StopIteration as done:
        result: Model = done.value
        return result


# -- the registry against a running server -------------------------------------------------------


@dataclass(frozen=True)
class FieldDifference:
    """One figure on which the registry and the server disagree."""

    field: str
    registry: Any
    server: Any
    note: str
    """What it means for plans, and what to do."""


@dataclass(frozen=True)
class ModelComparison:
    """What :func:`compare` found."""

    url: str
    served: Model
    """The model as the server runs it (what plans for this server use)."""
    registry: Model | None
    """The registry's entry for the name, None when it has none."""
    differences: tuple[FieldDifference, ...]

    @property
    def matches(self) -> bool:
        """The registry says what the server does (for every compared field)."""
        return not self.differences


def _differences(served: Model, entry: Model | None) -> tuple[FieldDifference, ...]:
    if entry is None:
        return (
            FieldDifference(
                "name",
                None,
                served.name,
                "not in the registry: plans for this server use what it reports; "
                "register it (TOKENFLEX_MODELS_FILE) to use it elsewhere",
            ),
        )
    out: list[FieldDifference] = []
    if entry.context_window != served.context_window:
        smaller = served.context_window < entry.context_window
        out.append(
            FieldDifference(
                "context_window",
                entry.context_window,
                served.context_window,
                "the server runs a smaller window than the registry's (its n_ctx / "
                "max-model-len / num_ctx): plans for it use the server's"
                if smaller
                else "the server accepts more than the registry says: the registry entry "
                "is stale or conservative",
            )
        )
    if entry.max_output_tokens != served.max_output_tokens:
        out.append(
            FieldDifference(
                "max_output_tokens",
                entry.max_output_tokens,
                served.max_output_tokens,
                "the registry's output limit does not fit the server's window",
            )
        )
    if (entry.tokenizer, entry.chat_format) != (served.tokenizer, served.chat_format):
        out.append(
            FieldDifference(
                "tokenizer",
                f"{entry.tokenizer} ({entry.chat_format})",
                f"{served.tokenizer} ({served.chat_format})",
                "the server's own tokenizer and template count exactly"
                if served.chat_format == "template"
                else "counts differ in how they are made",
            )
        )
    return tuple(out)


def compare(
    url: str,
    name: str | None = None,
    *,
    api_key: str | None = None,
    timeout: float = 5.0,
    probe_tokens: int = DEFAULT_PROBE_TOKENS,
    transport: httpx.BaseTransport | None = None,
) -> ModelComparison:
    """Compare the registry's entry for ``name`` with what the server at ``url`` runs.

    Args:
        url: The server's base URL.
        name: The registry name (and the served model, when the server lists several);
            default the server's first model, compared with the registry entry of its id.
        api_key, timeout, probe_tokens, transport: As for :func:`discover_model`.

    Returns:
        A :class:`ModelComparison`; ``differences`` lists window, output limit and
        tokenizer disagreements, each with what it means. The server is always asked
        (the disk cache is bypassed).

    >>> c = compare("http://127.0.0.1:8080/v1", "qwen2.5:7b")  # doctest: +SKIP
    >>> [(d.field, d.registry, d.server) for d in c.differences]  # doctest: +SKIP
    [('context_window', 32768, 4096)]
    """
    kwargs: dict[str, Any] = {
        "api_key": api_key,
        "timeout": timeout,
        "probe_tokens": probe_tokens,
        "transport": transport,
        "cache_ttl": 0,
    }
    try:
        served = discover_model(url, model=name, **kwargs)
    except UpstreamError as exc:
        if exc.status_code != 404:
            raise
        # llama.cpp-style servers run their one model under any name
        served = discover_model(url, **kwargs)
    entry = _registry(name or served.name)
    return ModelComparison(
        url=server_root(url),
        served=served,
        registry=entry,
        differences=_differences(served, entry),
    )
