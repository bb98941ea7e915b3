"""``is_json`` (plain JSON data as it stands: exact dicts with str keys, exact lists, exact
JSON scalars, at most 64 levels below the value) is walked in C where the package was
built with a C compiler. The C walk must answer as a reference written out here does, and
as the Python reading that stands in for it; ``plain()``, which takes the C walk's yes as
"nothing to dump", must give what its Python walk gives."""

from __future__ import annotations

import json
import math
from typing import Any
from unittest.mock import patch

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

import tokenflex.message.objects as objects
from tokenflex.tokenizers.base import native

NATIVE = native("is_json")


class Sub(dict):  # type: ignore[type-arg]
    """A dict subclass: not plain data."""


class Text(str):
    """A str subclass: not plain data."""

    __slots__ = ()


class Number(int):
    """An int subclass: not plain data."""


def reference(value: Any) -> bool:
    """Plain JSON data as it stands, read with an explicit stack (not recursion): every
    container an exact dict (str keys) or list, no deeper than 64 levels below the value,
    every leaf an exact str, int, float, bool or None."""
    atoms = (str, int, float, bool, type(None))
    stack = [(value, 0)]
    while stack:
        v, depth = stack.pop()
        if type(v) in atoms:
            continue
        if depth > 64:
            return False
        if type(v) is dict:
            if any(type(k) is not str for k in v):
                return False
            stack.extend((x, depth + 1) for x in v.values())
        elif type(v) is list:
            stack.extend((x, depth + 1) for x in v)
        else:
            return False
    return True


ATOMS = st.one_of(
    st.text(max_size=4),
    st.integers(),
    st.floats(allow_nan=True, allow_infinity=True),
    st.booleans(),
    st.none(),
    st.just(Text("x")),
    st.just(Number(3)),
    st.just(b"bytes"),
)
KEYS = st.one_of(st.text(max_size=3), st.text(max_size=3), st.integers(), st.just(Text("k")))
VALUES = st.recursive(
    ATOMS,
    lambda children: st.one_of(
        st.lists(children, max_size=4),
        st.dictionaries(KEYS, children, max_size=4),
        st.dictionaries(st.text(max_size=3), children, max_size=4),
        st.dictionaries(st.text(max_size=3), children, max_size=3).map(Sub),
        st.lists(children, max_size=3).map(tuple),
    ),
    max_leaves=30,
)


def nested(levels: int, leaf: Any = 1) -> Any:
    """``levels`` containers one inside the other (lists and dicts by turns)."""
    value = leaf
    for k in range(levels):
        value = [value] if k % 2 else {"k": value}
    return value


def same(a: Any, b: Any) -> bool:
    """Equal values, NaN equal to NaN (a float's repr tells them apart)."""
    return repr(a) == repr(b)


@settings(max_examples=600, deadline=None)
@given(VALUES)
def test_is_json_answers_as_the_reference(value: Any) -> None:
    expected = reference(value)
    assert objects.read_is_json(value) is expected
    assert objects.is_json(value) is expected
    if NATIVE is not None:
        assert NATIVE(value) is expected
    if expected:  # what it vouches for, the encoder writes and reads back
        assert same(json.loads(json.dumps(value)), value) or _has_nan_or_big_float(value)


def _has_nan_or_big_float(value: Any) -> bool:
    if type(value) is float:
        return math.isnan(value) or math.isinf(value)
    if type(value) is dict:
        return any(map(_has_nan_or_big_float, value.values()))
    if type(value) is list:
        return any(map(_has_nan_or_big_float, value))
    return False


@pytest.mark.parametrize("levels", [1, 63, 64, 65, 66, 67, 200])
@pytest.mark.parametrize("leaf", [1, [], {}, (1,)])
def test_the_depth_bound_is_the_same_in_c_and_python(levels: int, leaf: Any) -> None:
    value = nested(levels, leaf)
    expected = reference(value)
    assert objects.read_is_json(value) is expected
    assert objects.is_json(value) is expected
    if NATIVE is not None:
        assert NATIVE(value) is expected


@settings(max_examples=400, deadline=None)
@given(VALUES)
def test_plain_gives_what_its_python_walk_gives(value: Any) -> None:
    got = objects.plain(value)
    with patch.object(objects, "_NATIVE_IS_JSON", None):
        walked = objects.plain(value)
    assert same(got, walked)
    assert (got is value) is (walked is value)
    if reference(value):
        assert got is value  # plain data comes back as the same object


def test_the_c_walk_is_built_here() -> None:
    """The package as tested here has its C walk (a build without a compiler falls back
    to the Python reading, tested above all the same)."""
    if NATIVE is None:
        pytest.skip("built without a C compiler")
    assert objects.is_json({"a": [1]}) and not objects.is_json({"a": (1,)})


KEYS_ANY = st.one_of(st.text(max_size=3), st.integers(), st.floats(), st.booleans(), st.none())
DUMPED = st.recursive(
    st.one_of(
        st.text(),
        st.integers(min_value=-(2**80), max_value=2**80),
        st.floats(allow_nan=True, allow_infinity=True),
        st.booleans(),
        st.none(),
        st.just(Text("sub")),
        st.just(Number(7)),
        st.just(b"raw"),
        st.just({1, 2}),
    ),
    lambda children: st.one_of(
        st.lists(children, max_size=4),
        st.lists(children, max_size=3).map(tuple),
        st.dictionaries(KEYS_ANY, children, max_size=4),
        st.dictionaries(st.text(max_size=3), children, max_size=3).map(Sub),
    ),
    max_leaves=25,
)


@settings(max_examples=600, deadline=None)
@given(DUMPED)
def test_compact_json_writes_what_json_dumps_writes(value: Any) -> None:
    """The encoder made once writes the text ``json.dumps`` with the same options writes
    (non-str keys, NaN, big ints, subclasses, values only ``default=str`` can write)."""
    expected = json.dumps(value, ensure_ascii=False, separators=(",", ":"), default=str)
    assert objects.compact_json(value) == expected


def test_compact_json_refuses_what_json_dumps_refuses() -> None:
    """A value that contains itself is a ValueError (json.dumps' circular-reference
    error), one nested past the recursion limit a RecursionError, as with json.dumps."""
    cyclic: dict[str, Any] = {"a": 1}
    cyclic["self"] = [cyclic]
    with pytest.raises(ValueError, match="Circular reference"):
        json.dumps(cyclic, ensure_ascii=False, separators=(",", ":"), default=str)
    with pytest.raises(ValueError, match="Circular reference"):
        objects.compact_json(cyclic)
    deep = nested(50_000)
    with pytest.raises(RecursionError):
        objects.compact_json(deep)
