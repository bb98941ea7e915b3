"""Which counter counts for a model: one per model and chat format, built on first use
and cached until the model registry changes; and the one-call helpers over it.
"""

from __future__ import annotations

import threading
from collections.abc import Callable, Sequence
from typing import Any

from .._types import Messages, Tool
from ..errors import ConfigError
from ..formats.tools import tools_to_chat
from ..message.checks import BadMessage
from ..message.objects import plain_message, tools_json_ready
from ..models import Model, get_model, registry_generation
from ..once import KeyedLocks
from ..tokenizers import CountCache, get_tokenizer
from .messages import (
    GENERIC_BASE,
    GENERIC_BASE_BY_FAMILY,
    GENERIC_TOKENS_PER_MESSAGE,
    EnvelopeCounter,
    MessageCounter,
)
from .provider import wrap
from .template import TemplateCounter

__all__ = ["COUNTERS", "count_messages", "count_tokens", "get_counter"]


Builder = Callable[[Model, CountCache], MessageCounter]
"""Makes the counter of a model with one chat format (its tokenizer loaded)."""


def _openai(model: Model, tokenizer: CountCache) -> MessageCounter:
    return EnvelopeCounter(
        model, tokenizer, exact=tokenizer.exact, per_message=3, per_name=1, priming=3
    )


def _openai_0301(model: Model, tokenizer: CountCache) -> MessageCounter:
    return EnvelopeCounter(
        model, tokenizer, exact=tokenizer.exact, per_message=4, per_name=-1, priming=3
    )


def _template(model: Model, tokenizer: CountCache) -> MessageCounter:
    if not model.chat_template:
        raise ConfigError(
            f"Model {model.name!r} has chat_format 'template' but no chat_template. Set "
            "chat_template (from the model's tokenizer_config.json) or use 'generic'."
        )
    return TemplateCounter(model, tokenizer)


def _mistral(model: Model, tokenizer: CountCache) -> MessageCounter:
    from .mistral import MistralCounter  # imports mistral-common's wrapper: on use

    return MistralCounter(model, tokenizer)


def _generic(model: Model, tokenizer: CountCache) -> MessageCounter:
    base = GENERIC_BASE_BY_FAMILY.get(model.family, GENERIC_BASE)
    return EnvelopeCounter(
        model,
        tokenizer,
        exact=False,
        per_message=GENERIC_TOKENS_PER_MESSAGE,
        per_name=1,
        priming=base,
    )


COUNTERS: dict[str, Builder] = {
    "openai": _openai,
    "openai-0301": _openai_0301,
    "template": _template,
    "mistral": _mistral,
    "generic": _generic,
}
"""The counter of each chat format (``Model.chat_format``); a format not listed counts
as ``generic``. Add an entry to count a new chat format."""


def _build(model: Model) -> MessageCounter:
    model = model.counting()  # its exact tokenizer, where that loads here
    tokenizer = get_tokenizer(model.tokenizer)
    return COUNTERS.get(model.chat_format, _generic)(model, tokenizer)


_counters: dict[str | Model, tuple[int, MessageCounter]] = {}
_counters_lock = threading.Lock()
"""Held over the dict, never over a build."""
_BUILDS: KeyedLocks[str | Model] = KeyedLocks()
"""Held over one model's counter's build (the others' go on)."""
_last: tuple[object, int, MessageCounter] | None = None
"""The last model asked for, by identity, with its counter: a fit asks for the same
:class:`Model` object several times, and hashing one walks all its fields."""


def get_counter(model: str | Model) -> MessageCounter:
    """The (cached) counter for a model name or :class:`~tokenflex.Model`.

    >>> from tokenflex import get_counter
    >>> c = get_counter("gpt-4o")
    >>> c.count([{"role": "user", "content": "Hello!"}])
    9

    Raises:
        UnknownModelError: never for a plain unknown name (that gets the conservative
            default and a logged warning); pass a Model from ``get_model(..., strict=True)``
            to be strict.
        TokenizerUnavailableError: the model's tokenizer cannot be loaded.
    """
    global _last
    last = _last
    if last is not None and last[0] is model and last[1] == registry_generation():
        return wrap(last[2])
    try:
        hit = _counters.get(model)
    except TypeError:  # a Model built with a list field is unhashable: no caching
        return wrap(_build(get_model(model)))
    if hit is not None and hit[0] == registry_generation():
        _last = (model, hit[0], hit[1])
        return wrap(hit[1])  # through the provider's count endpoint where one is active
    # built under this model's lock alone: a counter's set-up counts through its
    # tokenizer (a tokenizer server's answers, a vocabulary's load) and holds up no
    # other model's (:mod:`tokenflex.once`)
    with _BUILDS.held(model):
        resolved = get_model(model)  # loads the registry first: read the generation after
        generation = registry_generation()
        hit = _counters.get(model)
        if hit is not None and hit[0] == generation:
            counter = hit[1]  # (built while this one waited)
        else:
            counter = _build(resolved)
            with _counters_lock:
                if len(_counters) >= 1024:
                    _counters.clear()
                _counters[model] = (generation, counter)
        _last = (model, generation, counter)
    return wrap(counter)


def count_messages(
    messages: Messages, *, model: str | Model, tools: Sequence[Tool] | None = None
) -> int:
    """Tokens a chat request's input costs ``model``: messages, tools, reply priming.

    >>> import tokenflex
    >>> tokenflex.count_messages([{"role": "user", "content": "Hello!"}], model="gpt-4")
    9

    SDK, pydantic and LangChain message objects count as the chat dicts they stand for
    (read as :mod:`tokenflex.message.objects` reads them).

    Raises:
        InvalidMessagesError: ``messages`` is not a list of OpenAI-style messages.
        InvalidInputError: a tool schema that cannot be sent as JSON (as fit() says).
    """
    if tools:
        tools_json_ready(tools)
        if isinstance(tools, list | tuple):  # (anything else: the counter names it)
            tools = tools_to_chat(tools)  # any API's shape, counted as fit() counts it
    if isinstance(messages, list | tuple) and not set(map(type, messages)) <= {dict}:
        views: list[Any] = []
        for i, m in enumerate(messages):
            try:
                views.append(plain_message(m))
            except BadMessage as exc:
                raise exc.at(i) from None
        messages = views
    return get_counter(model).count(messages, tools)


def count_tokens(text: str, *, model: str | Model) -> int:
    """Tokens of plain text with ``model``'s tokenizer (no chat envelope).

    >>> import tokenflex
    >>> tokenflex.count_tokens("tiktoken is great!", model="gpt-4")
    6
    """
    return get_counter(model).text(text)
