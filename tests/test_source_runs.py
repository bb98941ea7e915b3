"""``tokenflex.session.source_runs``: a plan's messages found as runs of the request's
objects (the cache-stable memory's record and the proxy's plan store read them so)."""

from __future__ import annotations

from typing import Any

from hypothesis import given, settings
from hypothesis import strategies as st

from tokenflex.session import source_runs


@st.composite
def _plans(draw: st.DrawFn) -> tuple[list[Any], list[Any], int]:
    """A source of distinct or repeated objects, and a plan's messages: pieces of the
    source in order (a cut, a kept run, a gap) with messages of its own between them."""
    pool = [{"n": i} for i in range(draw(st.integers(1, 6)))]
    source = draw(st.lists(st.sampled_from(pool) | st.builds(dict), max_size=40))
    messages: list[Any] = []
    at = 0
    for _ in range(draw(st.integers(0, 6))):
        if draw(st.booleans()):
            messages.append({"made": len(messages)})  # a note, a summary, a cleared copy
        if source and at < len(source):
            start = draw(st.integers(at, len(source) - 1))
            stop = draw(st.integers(start, len(source)))
            messages.extend(source[start:stop])
            at = stop
    if draw(st.booleans()) and source:
        messages.append(draw(st.sampled_from(source)))  # one out of order
    return source, messages, draw(st.integers(0, len(source) + 2))


@settings(max_examples=400, deadline=None)
@given(case=_plans())
def test_runs_cover_the_messages_with_the_same_objects(
    case: tuple[list[Any], list[Any], int],
) -> None:
    """Every message is in exactly one run, in order; a run's messages are its source
    places' very objects; a message is left without a place exactly when no place of the
    source holds it (an identity search is the reference)."""
    source, messages, hint = case
    covered = 0
    for i, j, k in source_runs(source, messages, hint):
        assert i == covered and k >= 1
        if j is None:
            assert k == 1
            assert not any(s is messages[i] for s in source)
        else:
            assert j >= 0 and j + k <= len(source)
            assert all(messages[i + x] is source[j + x] for x in range(k))
        covered += k
    assert covered == len(messages)
