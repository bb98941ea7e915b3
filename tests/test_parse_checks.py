"""The proxy's body parser checks each message at least as strictly as fit() does.

The proxy parses a body with its format's :meth:`~tokenflex.formats.base.RequestFormat.parse`
and fit() then skips :func:`tokenflex.roundtrip.check_prepared` for the list the parser
vouched for (issue 24: checking every message twice was ~40 % of a 2,000-message fit).
That is only sound if the parser rejects everything ``check_prepared`` would reject, for
every registered format and every model's counter. The property below feeds each format's
parser near-valid bodies (a valid body with one value, anywhere in it, replaced by JSON
junk or removed) as JSON, and asserts: the parser refuses it, the converter refuses it
(fit() still runs the converter), or ``check_prepared`` passes on what fit() would check,
for one model of every chat format. ``test_the_property_catches_a_lax_parser`` shows it
goes red for a parser that checks less.
"""

from __future__ import annotations

import contextlib
import json
import random
from collections.abc import Callable, Iterator
from typing import Any
from unittest import mock

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from tokenflex import TokenflexError, fit
from tokenflex.formats import anthropic, responses
from tokenflex.formats import body as body_module
from tokenflex.formats.body import BodyError, RequestParts, check_items, check_model
from tokenflex.formats.registry import get_format
from tokenflex.message.checks import BadMessage
from tokenflex.models import get_model, list_models
from tokenflex.roundtrip import check_prepared, prepare
from tokenflex.server._validate import parse_json

FORMATS = ("chat", "anthropic", "responses", "gemini")
MODELS = list({m.chat_format: m for m in reversed(list_models())}.values())
"""One model per chat format (each has its own counter, hence its own shape check)."""

JUNK: list[Any] = [
    None, True, False, 0, -1, 7, 1.5, "", "x", "wizard", "text", "image_url", "user",
    [], {}, [1], ["x"], [{}], {"type": "text"}, {"type": "text", "text": 1},
    {"type": "image_url", "image_url": {}}, {"url": 5}, {"role": "user"}, [[[]]],
]  # fmt: skip

_CHAT: list[Any] = [
    {"role": "system", "content": "be brief"},
    {"role": "developer", "content": [{"type": "text", "text": "rules"}]},
    {"role": "user", "content": [
        {"type": "text", "text": "look"},
        {"type": "image_url", "image_url": {"url": "https://x.test/a.png", "detail": "low"}},
    ]},
    {"role": "assistant", "content": None, "tool_calls": [
        {"id": "c1", "type": "function", "function": {"name": "f", "arguments": "{}"}}
    ]},
    {"role": "tool", "tool_call_id": "c1", "content": "42"},
    {"role": "assistant", "content": "ok", "name": "bot"},
    {"role": "user", "content": "and then?"},
]  # fmt: skip
_ANTHROPIC: list[Any] = [
    {"role": "user", "content": [
        {"type": "text", "text": "look"},
        {"type": "image", "source": {"type": "url", "url": "https://x.test/a.png"}},
        {"type": "document", "source": {"type": "text", "media_type": "text/plain",
                                        "data": "doc"}},
    ]},
    {"role": "assistant", "content": [
        {"type": "thinking", "thinking": "hm", "signature": "s"},
        {"type": "text", "text": "calling"},
        {"type": "tool_use", "id": "t1", "name": "f", "input": {"a": [1, {"b": None}]}},
    ]},
    {"role": "user", "content": [
        {"type": "tool_result", "tool_use_id": "t1", "content": [{"type": "text", "text": "1"}]}
    ]},
    {"role": "assistant", "content": "done"},
    {"role": "user", "content": "more"},
]  # fmt: skip
_RESPONSES: list[Any] = [
    {"type": "message", "role": "developer", "content": "rules"},
    {"role": "user", "content": [
        {"type": "input_text", "text": "look"},
        {"type": "input_image", "image_url": "https://x.test/a.png"},
    ]},
    {"type": "reasoning", "summary": [{"type": "summary_text", "text": "hm"}]},
    {"type": "function_call", "call_id": "c1", "name": "f", "arguments": "{}"},
    {"type": "function_call_output", "call_id": "c1", "output": "42"},
    {"type": "message", "role": "assistant", "content": [{"type": "output_text", "text": "ok"}]},
    {"role": "user", "content": "and then?"},
]  # fmt: skip
_GEMINI: list[Any] = [
    {"role": "user", "parts": [
        {"text": "look"}, {"inlineData": {"mimeType": "image/png", "data": "iVBORw0KGgo="}},
    ]},
    {"role": "model", "parts": [{"functionCall": {"name": "f", "args": {"a": 1}}}]},
    {"role": "user", "parts": [{"functionResponse": {"name": "f", "response": {"r": 2}}}]},
    {"role": "model", "parts": [{"text": "ok"}]},
    {"role": "user", "parts": [{"text": "and then?"}]},
]  # fmt: skip


def _body(fmt: str, r: random.Random) -> dict[str, Any]:
    """A valid body of ``fmt``: a random slice of its sample conversation."""
    items = {"chat": _CHAT, "anthropic": _ANTHROPIC, "responses": _RESPONSES, "gemini": _GEMINI}
    sample = json.loads(json.dumps(items[fmt]))
    a = r.randrange(len(sample))
    b = r.randrange(a, len(sample)) + 1
    body: dict[str, Any] = {"model": "m"}
    key = get_format(fmt).items_key if fmt != "gemini" else "contents"
    body[key] = sample[a:b]
    if fmt == "anthropic" and r.random() < 0.5:
        body["system"] = r.choice(["sys", [{"type": "text", "text": "sys"}]])
    if fmt == "responses" and r.random() < 0.5:
        body["instructions"] = "sys"
    if fmt == "gemini" and r.random() < 0.5:
        body["systemInstruction"] = {"parts": [{"text": "sys"}]}
    return body


def _paths(value: Any, at: tuple[Any, ...] = ()) -> list[tuple[Any, ...]]:
    """Every path to a value inside ``value`` (a dict key or list index per step)."""
    out = [at]
    if isinstance(value, dict):
        for k, v in value.items():
            out += _paths(v, (*at, k))
    elif isinstance(value, list):
        for i, v in enumerate(value):
            out += _paths(v, (*at, i))
    return out


def _mutated(body: dict[str, Any], r: random.Random) -> dict[str, Any]:
    """``body`` with one to three values inside its conversation replaced by junk or
    removed (a near-valid body), or left valid."""
    key = next(k for k in ("messages", "input", "contents") if k in body)
    for _ in range(r.choice([0, 1, 1, 1, 2, 3])):
        paths = [p for p in _paths(body[key]) if p]
        if not paths:
            break
        *parent_path, last = r.choice(paths)
        parent: Any = body[key]
        for step in parent_path:
            parent = parent[step]
        if isinstance(parent, dict) and r.random() < 0.3:
            del parent[last]
        else:
            parent[last] = json.loads(json.dumps(r.choice(JUNK)))
    return body


def _fit_would_refuse(fmt_name: str, parts: RequestParts) -> bool:
    """Whether fit(), as the proxy calls it, refuses the parsed request anywhere in the
    checks that :func:`check_prepared` makes (False: it passes them for every model). A
    converter's refusal is not counted: fit() converts the items either way."""
    fmt = get_format(fmt_name)
    # a copy: the parsed list itself is vouched for, and check_prepared would skip it
    items, system, format_ = list(parts.items), parts.system, fmt_name
    if fmt.via_chat:  # the proxy fits the chat form of the request, format detected
        items, system, format_ = fmt.to_chat(items, system), None, None
    elif fmt.internal:  # (as server/_fitter.py calls fit())
        format_, system = None, None
    try:
        prepared = prepare(items, format=format_, system=system, tools=parts.tools)
    except BadMessage:
        return False  # the converter refuses it: fit() still runs it
    for model in MODELS:
        try:
            check_prepared(prepared, model)
        except BadMessage:
            return True
    return False


def _escapes(
    fmt_name: str, seed: int, parse: Callable[[dict[str, Any]], RequestParts]
) -> str | None:
    """The body a lax ``parse`` lets through that fit() would refuse (None: none)."""
    r = random.Random(f"{fmt_name}-{seed}")
    body = parse_json(json.dumps(_mutated(_body(fmt_name, r), r)).encode())
    try:
        parts = parse(body)
    except BodyError:
        return None
    return json.dumps(body) if _fit_would_refuse(fmt_name, parts) else None


@pytest.mark.parametrize("fmt_name", FORMATS)
@settings(max_examples=300, deadline=None)
@given(seed=st.integers(0, 2**32))
def test_the_parser_refuses_what_check_prepared_refuses(fmt_name: str, seed: int) -> None:
    escaped = _escapes(fmt_name, seed, get_format(fmt_name).parse)
    assert escaped is None, f"{fmt_name} parse accepted a body fit() refuses: {escaped}"


def test_the_property_catches_a_lax_parser() -> None:
    """A parser that checks only the roles (the body helpers' minimum) lets through bodies
    fit() refuses, and the property finds one in a few hundred seeds."""

    def lax(body: dict[str, Any]) -> RequestParts:
        return RequestParts(check_model(body), check_items(body.get("messages"), "messages", None))

    assert any(_escapes("chat", seed, lax) is not None for seed in range(300))


def test_every_registered_format_is_covered() -> None:
    from tokenflex.formats.registry import formats

    assert {f.name for f in formats() if f.path is not None} <= set(FORMATS)


def _parsed(fmt_name: str, items: list[Any]) -> RequestParts:
    fmt = get_format(fmt_name)
    return fmt.parse(parse_json(json.dumps({"model": "m", fmt.items_key: items}).encode()))


@pytest.mark.parametrize(
    ("fmt_name", "items"),
    [("chat", _CHAT), ("anthropic", _ANTHROPIC), ("responses", _RESPONSES)],
)
def test_a_parsed_list_is_not_checked_again_and_a_copy_is(fmt_name: str, items: Any) -> None:
    format_ = None if fmt_name == "chat" else fmt_name
    parts = _parsed(fmt_name, items)
    copy = list(parts.items)
    prepared = prepare(parts.items, format=format_, system=None, tools=None)
    assert prepared.vouched == len(prepared.messages) > 0
    assert prepare(copy, format=format_, system=None, tools=None).vouched == 0
    # read once: the same list read again (a short one, not remembered) is checked
    assert prepare(parts.items, format=format_, system=None, tools=None).vouched == 0


def test_a_list_vouched_as_chat_and_read_as_another_format_is_checked() -> None:
    parts = _parsed("chat", [{"role": "user", "content": "hi"}])
    prepared = prepare(parts.items, format="responses", system=None, tools=None)
    assert prepared.vouched == 0


@pytest.mark.parametrize("edit", ["replace", "append"])
def test_a_parsed_list_given_other_items_is_checked(edit: str) -> None:
    parts = _parsed("chat", [{"role": "user", "content": "hi"}] * 40)
    bad = {"role": "wizard", "content": "x"}
    if edit == "replace":
        parts.items[1] = bad
    else:
        parts.items.append(bad)
    at = 1 if edit == "replace" else 40
    tiny = get_model("gpt-4o").replace(name="gpt-4o-tiny", context_window=150)
    # (messages[1] is cut, never counted: only the check before fitting can see it)
    with pytest.raises(TokenflexError, match=rf"messages\[{at}\].*wizard"):
        fit(parts.items, model=tiny, max_tokens=50)


def test_a_parsed_long_list_fits_as_a_copy_does() -> None:
    """Do no harm: the plan of a vouched list (remembered: 40 messages) is the plan of
    the same messages given by a caller, fitted again or not."""
    items = [
        {"role": "user" if i % 2 else "assistant", "content": f"turn {i} " * 30} for i in range(40)
    ]
    parts = _parsed("chat", items)
    small = get_model("gpt-4o").replace(name="gpt-4o-2k", context_window=2_000)
    want = fit(list(items), model=small, max_tokens=100).messages
    assert fit(parts.items, model=small, max_tokens=100).messages == want
    assert fit(parts.items, model=small, max_tokens=100).messages == want


def _agent_items(fmt: str, rounds: int) -> list[Any]:
    """An agent's tool rounds in ``fmt`` (Anthropic blocks or Responses items): more than
    the memo's short-list length, so fit() remembers the list for the fit."""
    if fmt == "anthropic":
        items: list[Any] = [{"role": "user", "content": "Fix the failing test."}]
        for i in range(rounds):
            call = {"type": "tool_use", "id": f"t{i}", "name": "read", "input": {"path": f"{i}"}}
            result = {"type": "tool_result", "tool_use_id": f"t{i}", "content": f"line {i} " * 40}
            items += [
                {"role": "assistant", "content": [{"type": "text", "text": "ok"}, call]},
                {"role": "user", "content": [result]},
            ]
        return items
    items = [{"type": "message", "role": "user", "content": "Fix the failing test."}]
    for i in range(rounds):
        items += [
            {"type": "function_call", "call_id": f"c{i}", "name": "read", "arguments": "{}"},
            {"type": "function_call_output", "call_id": f"c{i}", "output": f"line {i} " * 40},
        ]
    return items


def _edit(item: Any, fmt: str, text: str) -> None:
    """``item``'s text replaced in place (the same dict given a new value)."""
    if fmt == "anthropic":
        item["content"] = (
            text if isinstance(item["content"], str) else [{"type": "text", "text": text}]
        )
    elif item.get("type") == "function_call_output":
        item["output"] = text
    else:
        item["content"] = text


@settings(max_examples=25, deadline=None)
@given(
    fmt=st.sampled_from(["anthropic", "responses"]),
    rounds=st.integers(16, 40),
    window=st.sampled_from([3_000, 6_000, 128_000]),
    at=st.integers(0, 10_000),
    grow=st.integers(1, 300),
)
def test_a_parsed_native_list_is_read_once(
    fmt: str, rounds: int, window: int, at: int, grow: int
) -> None:
    """A list a parse vouched for is the proxy's, read once: its fit keeps no marks of its
    items and forgets its read when done. The plan is a copy's plan, and the same list
    object fitted again after an item was edited in place is read afresh: its plan is the
    plan of a copy of the edited list (never one from the first read's conversion)."""
    model = get_model("gpt-4o").replace(name=f"gpt-4o-{window}", context_window=window)
    items = _agent_items(fmt, rounds)
    parts = _parsed(fmt, items)

    def plan_of(given: list[Any]) -> tuple[Any, ...]:
        p = fit(given, model=model, max_tokens=200, format=fmt)
        return p.input_tokens, p.messages, len(p.dropped)

    want = plan_of(json.loads(json.dumps(parts.items)))
    assert plan_of(parts.items) == want
    k = at % len(parts.items)
    _edit(parts.items[k], fmt, "edited " * grow)
    assert plan_of(parts.items) == plan_of(json.loads(json.dumps(parts.items)))


@pytest.mark.parametrize("fmt", ["chat", "anthropic", "responses"])
def test_a_parsed_list_is_forgotten_when_its_fit_is_done(fmt: str) -> None:
    """The memo keeps its places for lists read again: a request read once is dropped
    from it when its fit returns (its conversion and copies go with it)."""
    from tokenflex import roundtrip

    items = (
        _agent_items(fmt, 20)
        if fmt != "chat"
        else [{"role": "user" if i % 2 else "assistant", "content": f"turn {i}"} for i in range(40)]
    )
    parts = _parsed(fmt, items)
    fit(parts.items, model="gpt-4o", max_tokens=200, format=None if fmt == "chat" else fmt)
    assert roundtrip._MEMO.get(parts.items) is None
    copy = list(parts.items)  # a caller's list: remembered for its next read
    fit(copy, model="gpt-4o", max_tokens=200, format=None if fmt == "chat" else fmt)
    assert roundtrip._MEMO.get(copy) is not None


# -- the quick passes: a good body's items are read without naming anything --------------


def _parse_outcome(fmt_name: str, body: dict[str, Any]) -> tuple[Any, ...]:
    try:
        parts = get_format(fmt_name).parse(body)
    except BodyError as exc:
        return ("refused", exc.message, exc.param, exc.code)
    return ("parsed", len(parts.items))


@contextlib.contextmanager
def _checks_only() -> Iterator[None]:
    """Every format's parse with its quick passes saying no: the checks that name what
    is wrong read every item (the reference)."""
    no = staticmethod(lambda *args: False)
    with (
        mock.patch.object(anthropic, "blocks_pass", no),
        mock.patch.object(responses, "items_pass", no),
        mock.patch.object(body_module, "_items_pass", no),
    ):
        yield


@pytest.mark.parametrize("fmt_name", FORMATS)
@settings(max_examples=300, deadline=None)
@given(seed=st.integers(0, 2**32))
def test_a_quick_pass_parses_as_the_checks_do(fmt_name: str, seed: int) -> None:
    """A near-valid body (one to three values replaced by junk or removed, or none) is
    parsed, or refused with the same message, param and code, whether the quick passes
    read its items or the checks alone do."""
    r = random.Random(f"{fmt_name}-{seed}")
    raw = json.dumps(_mutated(_body(fmt_name, r), r)).encode()
    quick = _parse_outcome(fmt_name, parse_json(raw))
    with _checks_only():
        assert quick == _parse_outcome(fmt_name, parse_json(raw))


@pytest.mark.parametrize("fmt_name", ["anthropic", "responses"])
def test_a_good_body_takes_the_quick_pass(fmt_name: str) -> None:
    """Each sample conversation is read by the quick passes alone (the checks that name
    an item are never called for it)."""
    r = random.Random(fmt_name)
    for _ in range(20):
        body = parse_json(json.dumps(_body(fmt_name, r)).encode())
        with (
            mock.patch.object(anthropic, "_check_blocks", side_effect=AssertionError),
            mock.patch.object(responses, "_check_items", side_effect=AssertionError),
        ):
            assert _parse_outcome(fmt_name, body)[0] == "parsed"
    items = _ANTHROPIC if fmt_name == "anthropic" else _RESPONSES
    assert body_module._items_pass(
        items, ("user", "assistant") if fmt_name == "anthropic" else None, "content"
    )
