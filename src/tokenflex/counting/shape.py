"""Whether every message of a request is well formed: checked up front, without counting.

fit() counts history lazily, newest first, and stops where the budget does, so a
malformed message in the part it never reads would pass unnoticed and break later
(``plan.to_dict()``, a stored plan), or pass on one model and fail on another. Every
message is therefore checked once, before fitting, by the counter's own reading of a
message with tokenizing switched off: the check accepts exactly what counting accepts,
and costs a walk over the dicts, not a tokenizer call.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from ..message.checks import BadMessage
from ..models import Model
from ..tokenizers import CountCache
from .messages import EnvelopeCounter

__all__ = ["check_one", "check_shapes", "shape_checker"]


class _NoTokens:
    """A tokenizer that counts nothing: the checker walks messages, it does not count."""

    name = "shape-check"
    exact = False

    def count(self, text: str) -> int:
        return 0


class _Free(CountCache):
    """No cache either: nothing is worth keeping when every count is 0."""

    __slots__ = ()

    def count(self, text: str) -> int:
        return 0


_last: tuple[Model, EnvelopeCounter] | None = None
"""The last checker made, with its model (a fit checks its new messages on every call)."""


def shape_checker(model: Model) -> EnvelopeCounter:
    """A counter for ``model`` whose ``message(m)`` raises :class:`BadMessage` for a
    malformed message and otherwise does no tokenizing (it returns envelope constants).
    The last one is kept for the same model object (it holds no state of its own)."""
    global _last
    last = _last
    if last is not None and last[0] is model:
        return last[1]
    checker = EnvelopeCounter(
        model, _Free(_NoTokens()), exact=False, per_message=0, per_name=0, priming=0
    )
    _last = (model, checker)
    return checker


def check_one(checker: EnvelopeCounter, message: Any) -> None:
    """``message`` read by ``checker``; :class:`BadMessage` (without an index) if it is
    malformed, including values JSON cannot hold (keys that are not strings, cycles)."""
    try:
        checker.message(message)
    except BadMessage:
        raise
    except (TypeError, ValueError, RecursionError) as exc:
        raise BadMessage(
            f"has a value that cannot be read as JSON ({type(exc).__name__}: {exc})",
            "Use str keys, JSON values and no circular references in message fields",
        ) from None


def check_shapes(messages: Sequence[Any], model: Model) -> None:
    """Check every message of ``messages`` (kept or not), O(their size), no tokenizing.

    Raises:
        BadMessage: the first malformed message, named by its index (``messages[3] has
            role 'wizard'. Use one of ...``).

    >>> from tokenflex.models import get_model
    >>> check_shapes([{"role": "user", "content": "hi"}, {"role": "bot"}], get_model("gpt-4o"))
    Traceback (most recent call last):
    ...
    tokenflex.message.checks.BadMessage: messages[1] has role 'bot'. Use one of system, developer, user, assistant, tool, function
    """  # noqa: E501
    checker = shape_checker(model)
    for i, m in enumerate(messages):
        try:
            check_one(checker, m)
        except BadMessage as exc:
            raise exc.at(i) from None
