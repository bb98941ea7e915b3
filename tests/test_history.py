"""Reading history newest first, written once (one flow, a sync and an async driver):
every kind of source reads the same messages as a reference, sync and async alike."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator, Callable
from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from tokenflex.errors import InvalidInputError
from tokenflex.history import aread_newest_first, read_newest_first


def _reference(history: list[dict[str, Any]], budget: int) -> tuple[list[dict[str, Any]], bool]:
    """Newest first, up to and including the message that brings the total to ``budget``."""
    out, total = [], 0
    for m in history[::-1]:
        out.append(m)
        total += len(m["content"])
        if total >= budget:
            return out, False
    return out, True


def _enough(budget: int) -> Callable[[dict[str, Any]], bool]:
    total = 0

    def enough(m: Any) -> bool:
        nonlocal total
        total += len(m["content"])
        return total >= budget

    return enough


def _sources(history: list[dict[str, Any]], *, asynchronous: bool) -> dict[str, Any]:
    newest = history[::-1]

    def fetch(limit: int, offset: int) -> list[dict[str, Any]]:
        return newest[offset : offset + limit]

    async def afetch(limit: int, offset: int) -> list[dict[str, Any]]:
        return newest[offset : offset + limit]

    async def agen() -> AsyncIterator[dict[str, Any]]:
        for m in newest:
            yield m

    sources: dict[str, Any] = {"list": history, "iterator": iter(newest), "fetcher": fetch}
    if asynchronous:
        sources |= {"async fetcher": afetch, "async iterator": agen()}
    return sources


@settings(max_examples=60, deadline=None)
@given(
    sizes=st.lists(st.integers(0, 9), max_size=30),
    budget=st.integers(1, 80),
    page_size=st.integers(1, 7),
)
def test_every_source_reads_as_the_reference(sizes: list[int], budget: int, page_size: int) -> None:
    history = [{"role": "user", "content": "x" * n} for n in sizes]
    expected = _reference(history, budget)
    for name, source in _sources(history, asynchronous=False).items():
        got = read_newest_first(source, enough=_enough(budget), page_size=page_size)
        assert got == expected, name
    for name, source in _sources(history, asynchronous=True).items():
        got = asyncio.run(aread_newest_first(source, enough=_enough(budget), page_size=page_size))
        assert got == expected, name


def test_wrong_way_round_and_bad_sources_raise_alike() -> None:
    call = {"role": "assistant", "content": "", "tool_calls": [{"id": "a"}]}
    result = {"role": "tool", "tool_call_id": "a", "content": "r"}
    never = _enough(10**9)
    with pytest.raises(InvalidInputError, match="wrong way round"):
        read_newest_first(iter([call, result]), enough=never)
    with pytest.raises(InvalidInputError, match="wrong way round"):
        asyncio.run(aread_newest_first(iter([call, result]), enough=never))
    with pytest.raises(InvalidInputError, match="Use afit"):
        read_newest_first(42, enough=never)  # type: ignore[arg-type]
    with pytest.raises(InvalidInputError, match="returned int"):
        asyncio.run(aread_newest_first(lambda limit, offset: 3, enough=never))
