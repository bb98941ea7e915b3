"""``state=`` must be a state store (``get``, ``set``, ``delete``): fit() and
Conversation refuse anything else with an error naming the option, however many good
stores were seen before (the check keeps its yes by class, and only for a class that has
the methods itself)."""

from __future__ import annotations

from typing import Any

import pytest

from tokenflex import Conversation, InvalidInputError, fit
from tokenflex.state import MemoryStore, is_state_store

MESSAGES = [{"role": "user", "content": "hello"}]


class Pieces:
    """A store only where its instance was given the methods."""

    def __init__(self, store: MemoryStore | None) -> None:
        if store is not None:
            self.get, self.set, self.delete = store.get, store.set, store.delete


@pytest.mark.parametrize("bad", [object(), {}, "redis://localhost", Pieces(None)])
def test_fit_and_conversation_refuse_a_state_that_is_not_a_store(bad: Any) -> None:
    fit(MESSAGES, model="gpt-4o", state=MemoryStore())  # a good one first
    with pytest.raises(InvalidInputError, match="state must be a tokenflex StateStore"):
        fit(MESSAGES, model="gpt-4o", state=bad)
    with pytest.raises(InvalidInputError, match="state must be a tokenflex StateStore"):
        Conversation(model="gpt-4o", state=bad)


def test_an_instance_with_the_methods_does_not_vouch_for_its_class() -> None:
    good = Pieces(MemoryStore())
    assert is_state_store(good)
    assert fit(MESSAGES, model="gpt-4o", state=good).messages == MESSAGES
    assert not is_state_store(Pieces(None))
    assert is_state_store(MemoryStore()) and is_state_store(MemoryStore())
