"""The proxy's JSON parser reads every body as the stdlib parser does (issue 24, item 4).

``parse_json`` parses with orjson when it can (several times faster on a large body) and
falls back to :func:`json.loads` with the strict hooks otherwise. The property: for any
body — valid JSON of any shape, or valid JSON with hostile bytes spliced in (NaN, huge
numbers, lone surrogates escaped or raw, a BOM, UTF-16, deep nesting) — the answer is the
same value (same types: an integer past 64 bits stays an int) or the same 400 message as
the stdlib path alone, the reference.
"""

from __future__ import annotations

import gc
import json
from typing import Any
from unittest import mock

from hypothesis import given, settings
from hypothesis import strategies as st

from tokenflex.server import _validate
from tokenflex.server._validate import parse_json
from tokenflex.server.errors import ProxyError

_VALUES = st.recursive(
    st.none()
    | st.booleans()
    | st.integers()  # unbounded: past 64 bits too
    | st.floats(allow_nan=False, allow_infinity=False)
    | st.text(),  # lone surrogates included: json.dumps escapes them
    lambda inner: st.lists(inner, max_size=4) | st.dictionaries(st.text(), inner, max_size=4),
    max_leaves=20,
)
_SPLICES = st.sampled_from(
    [
        b"NaN", b"-Infinity", b"1e400", b"123456789012345678901", b"\\ud800", b"\xed\xa0\x80",
        b"\xef\xbb\xbf", b"\x00", b"\xff", b"[" * 130, b'"', b",", b"}", b"1e-400", b"-0",
    ]
)  # fmt: skip


def _outcome(raw: bytes) -> tuple[str, Any]:
    try:
        return "ok", json.dumps(parse_json(raw))  # dumps tells 1 from 1.0
    except ProxyError as exc:
        return "error", (exc.status_code, exc.message, exc.param, exc.code)


def _reference(raw: bytes) -> tuple[str, Any]:
    with mock.patch.object(_validate, "orjson", None):  # the stdlib path alone
        return _outcome(raw)


@given(_VALUES, st.booleans(), st.lists(st.tuples(st.integers(0, 10**6), _SPLICES), max_size=2))
def test_parses_as_the_stdlib_does(value: Any, ascii_only: bool, splices: list[Any]) -> None:
    raw = json.dumps({"model": "m", "messages": value}, ensure_ascii=ascii_only).encode(
        "utf-8", "surrogatepass"
    )
    for at, piece in splices:
        at %= len(raw) + 1
        raw = raw[:at] + piece + raw[at:]
    assert _outcome(raw) == _reference(raw)


@settings(max_examples=50)
@given(_VALUES, st.lists(st.tuples(st.integers(0, 10**6), _SPLICES), max_size=2), st.booleans())
def test_a_parse_leaves_the_collector_as_it_found_it(
    value: Any, splices: list[Any], enabled: bool
) -> None:
    """The parse puts the garbage collector off while orjson builds the value (nothing it
    makes is garbage); whatever the body (parsed, refused, or read the stdlib way), the
    collector is on again after it, or still off where the caller had turned it off."""
    raw = json.dumps({"model": "m", "messages": value}).encode("utf-8", "surrogatepass")
    for at, piece in splices:
        at %= len(raw) + 1
        raw = raw[:at] + piece + raw[at:]
    was = gc.isenabled()
    try:
        gc.enable() if enabled else gc.disable()
        _outcome(raw)
        assert gc.isenabled() == enabled
    finally:
        gc.enable() if was else gc.disable()


def test_a_wide_body_and_a_long_integer_go_the_stdlib_way() -> None:
    assert parse_json('{"n": 1}'.encode("utf-16")) == {"n": 1}  # orjson refuses UTF-16
    assert parse_json(b'{"n": 123456789012345678901234567890}') == {
        "n": 123456789012345678901234567890  # orjson would read a float
    }


def test_an_integer_past_64_bits_at_any_depth_stays_an_int() -> None:
    # orjson reads these as floats; the float past 2**63 in its answer sends the body
    # to the stdlib parser (the depth walk finds it, wherever it is)
    for n in (2**64, -(2**63) - 1, 10**30, -(10**40)):
        for raw in (f"{n}", f'{{"a": [1, {{"b": [{n}]}}]}}', f"[[[[{n}, 0.5]]]]"):
            assert parse_json(raw.encode()) == json.loads(raw)
            assert json.dumps(parse_json(raw.encode())) == json.dumps(json.loads(raw))
    # digits in a string, long mantissas and floats below 2**63 parse as the stdlib does
    for raw in ('{"t": "1234567890123456789012345"}', "[0.12345678901234567890123]",
                "[9223372036854775807, 18446744073709551615, 1e18, -1.5e-300]"):  # fmt: skip
        assert _outcome(raw.encode()) == _reference(raw.encode())


_WIDE_FLOATS = st.sampled_from([2.0**63, -(2.0**63), 2.0**64, 1e300, float("nan"), 9.2e18, 1.5])
_NESTED = st.recursive(
    st.none() | st.integers() | _WIDE_FLOATS | st.text(max_size=2),
    lambda inner: (
        st.lists(inner, max_size=3) | st.dictionaries(st.text(max_size=2), inner, max_size=3)
    ),
    max_leaves=40,
)


@settings(max_examples=500, deadline=None)
@given(_NESTED, st.integers(0, 8))
def test_the_c_depth_walk_finds_what_the_python_walk_finds(value: Any, limit: int) -> None:
    """The parsed body's walk in C (``_fastcut.json_scan``) answers as the level-by-level
    Python walk: too deep, a float that may be a widened integer (which of the two comes
    first), or the value itself; small limits put the bound inside the values drawn."""
    expected = _validate.read_walk(value, limit)
    assert _validate._orjson_walk(value, limit) is expected
    with mock.patch.object(_validate, "_JSON_SCAN", None):
        assert _validate._orjson_walk(value, limit) is expected
