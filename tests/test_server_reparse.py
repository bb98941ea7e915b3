"""A conversation's next turn parses only what it added (issue 24, item 4).

:class:`ParsedBodies` reuses the items a body shares, byte for byte from its start, with a
body its owner sent before. The reference is the stdlib parser alone, on the whole body:
for any sequence of bodies (grown, edited, re-spaced, with hostile bytes spliced in), each
answer is the same value, with the same types, or the same 400 as the reference's.
"""

from __future__ import annotations

import json
from typing import Any
from unittest import mock

import httpx
from hypothesis import given, settings
from hypothesis import strategies as st

from tokenflex.server import _validate
from tokenflex.server._validate import ParsedBodies
from tokenflex.server.errors import ProxyError

_SCALARS = (
    st.none()
    | st.booleans()
    | st.integers()  # unbounded: past 64 bits too
    | st.floats(allow_nan=False, allow_infinity=False)
    | st.text(max_size=8)
)
_VALUES = st.recursive(
    _SCALARS,
    lambda inner: (
        st.lists(inner, max_size=3) | st.dictionaries(st.text(max_size=4), inner, max_size=3)
    ),
    max_leaves=8,
)
_SPLICES = st.sampled_from(
    [b"NaN", b"1e400", b"123456789012345678901", b"\\ud800", b"\xed\xa0\x80", b"\xff",
     b"[" * 130, b'"', b",", b"}", b"]", b"[", b"0", b"5", b'"messages":[],', b" "]
)  # fmt: skip
_EDITS = st.one_of(
    st.tuples(st.just("append"), st.lists(_VALUES, min_size=1, max_size=3)),
    st.tuples(st.just("last"), _VALUES),
    st.tuples(st.just("digit"), st.integers(0, 9)),
    st.tuples(st.just("drop"), st.integers(1, 3)),
    st.tuples(st.just("other"), _VALUES),
    st.tuples(st.just("twice"), _VALUES | st.just([])),
    st.tuples(st.just("escaped"), _VALUES | st.just([])),  # the key written another way
    st.tuples(st.just("deep"), st.integers(124, 127)),  # about MAX_DEPTH in the body
)
_FORMATS = st.sampled_from([(",", ":"), (", ", ": "), (" ,", " : ")])


_ESCAPED = '"mess\\u0061ges"'  # "messages", as JSON may write it


def _dump(body: list[tuple[str, Any]], seps: tuple[str, str], ascii_only: bool) -> bytes:
    """``body``'s members in order (a key may repeat) as JSON text."""
    item, key = seps
    members = [
        (k if k == _ESCAPED else json.dumps(k))
        + key
        + json.dumps(v, separators=seps, ensure_ascii=ascii_only)
        for k, v in body
    ]
    return ("{" + item.join(members) + "}").encode("utf-8", "surrogatepass")


def _outcome(parse: Any, raw: bytes) -> tuple[str, Any]:
    try:
        return "ok", json.dumps(parse(raw))  # dumps tells 1 from 1.0
    except ProxyError as exc:
        return "error", (exc.status_code, exc.message, exc.param, exc.code)


def _reference(raw: bytes) -> tuple[str, Any]:
    with mock.patch.object(_validate, "orjson", None):  # the stdlib path alone, whole
        return _outcome(_validate.parse_json, raw)


def _edit(items: list[Any], others: list[tuple[str, Any]], edit: tuple[str, Any]) -> None:
    kind, arg = edit
    if kind == "append":
        items.extend(arg)
    elif kind == "last" and items:
        items[-1] = arg
    elif kind == "digit":  # a number that goes on: 12 -> 123 (the next one may go on)
        last = items.pop() if items and type(items[-1]) is int else 1
        items.append(int(str(last) + str(arg)))
    elif kind == "drop":
        del items[-arg:]
    elif kind == "other":
        others.append(("max_tokens", arg))
    elif kind == "twice":
        others.append(("messages", arg))
    elif kind == "escaped":
        others.append((_ESCAPED, arg))
    elif kind == "deep":
        deep: Any = 0
        for _ in range(arg):
            deep = [deep]
        items.append(deep)


@settings(max_examples=300, deadline=None)
@given(
    st.lists(_VALUES, max_size=4),
    st.lists(st.tuples(_EDITS, _FORMATS, st.booleans()), min_size=2, max_size=5),
    st.lists(st.tuples(st.integers(0, 10**6), _SPLICES), max_size=1),
)
def test_each_body_parses_as_the_stdlib_parses_it_whole(
    start: list[Any], turns: list[Any], splices: list[Any]
) -> None:
    bodies = ParsedBodies(1 << 20, min_bytes=0)
    items, others = list(start), [("model", "m")]
    opening = _dump([*others, ("messages", items)], (",", ":"), True)
    for _ in range(2):  # (a body is kept parsed from its conversation's second turn)
        assert _outcome(lambda r: bodies.parse(r, "messages", "client"), opening) == _reference(
            opening
        )
    for n, (edit, seps, ascii_only) in enumerate(turns):
        _edit(items, others, edit)
        before = [m for m in others if m[0] == "model"]
        after = [m for m in others if m[0] != "model"]
        raw = _dump([*before, ("messages", items), *after], seps, ascii_only)
        if n == len(turns) - 1:
            for at, piece in splices:  # the last turn: hostile bytes anywhere
                at %= len(raw) + 1
                raw = raw[:at] + piece + raw[at:]
        assert _outcome(lambda r: bodies.parse(r, "messages", "client"), raw) == _reference(raw)


def _turn(n: int) -> bytes:
    messages = [
        {"role": "user" if i % 2 == 0 else "assistant", "content": f"turn {i} " + "x" * 200}
        for i in range(n)
    ]
    return json.dumps({"model": "gpt-4o", "messages": messages, "max_tokens": 256}).encode()


def test_a_grown_conversation_reuses_the_items_it_repeats() -> None:
    bodies = ParsedBodies(1 << 20, min_bytes=0)
    _, going = bodies.parse_turn(_turn(10), "messages", "a")
    assert not going and bodies.held == (1, len(_turn(10)))  # its bytes alone, no objects
    second, going = bodies.parse_turn(_turn(12), "messages", "a")  # parsed whole, kept
    assert going and bodies.reused == 0
    third, going = bodies.parse_turn(_turn(14), "messages", "a")
    assert going and third == json.loads(_turn(14))
    assert all(x is y for x, y in zip(second["messages"], third["messages"][:12], strict=True))
    assert third["messages"] is not second["messages"]  # a list of the request's own
    assert bodies.reused == 1
    again = bodies.parse(_turn(14), "messages", "a")  # the same bytes again
    assert all(x is y for x, y in zip(third["messages"], again["messages"], strict=True))
    assert bodies.reused == 2
    assert bodies.held[0] == 1  # each turn in place of the one it went on from


def test_a_body_that_does_not_go_on_is_not_kept_parsed() -> None:
    bodies = ParsedBodies(1 << 20, min_bytes=0)
    other = json.dumps({"model": "gpt-4o", "messages": [{"role": "user", "content": "hi"}]})
    for raw in (_turn(10), other.encode()):  # two requests, two conversations
        assert bodies.parse_turn(raw, "messages", "a")[1] is False
    assert bodies.held[0] == 2 and bodies.reused == 0
    # a body that repeats the first 5 of 10 items (a conversation begun again otherwise)
    fork = json.loads(_turn(10))
    fork["messages"][5:] = [{"role": "user", "content": "another way"}]
    value, going = bodies.parse_turn(json.dumps(fork).encode(), "messages", "a")
    assert value == fork and not going


def test_a_body_is_never_reused_for_another_owner() -> None:
    bodies = ParsedBodies(1 << 20, min_bytes=0)
    mine = [bodies.parse(_turn(10), "messages", "a") for _ in range(3)]
    assert bodies.reused == 1
    theirs = bodies.parse_turn(_turn(10), "messages", "b")
    assert theirs == (mine[-1], False)  # another owner's first sight
    assert not any(x is y for x, y in zip(mine[-1]["messages"], theirs[0]["messages"], strict=True))
    assert bodies.reused == 1


def test_the_bodies_kept_stay_within_their_bounds() -> None:
    size = len(_turn(10))
    bodies = ParsedBodies(size * 5, per_owner=2, min_bytes=0)
    for owner in "abcd":
        for n in (10, 11, 13):
            bodies.parse(_turn(n)[:-1] + b" " * (n % 2) + b"}", "messages", owner)
            _, held = bodies.held
            assert held <= size * 5
    assert bodies.held[0] <= 4
    big = ParsedBodies(size * 3, min_bytes=0)  # a body over a quarter: parsed, not kept
    assert big.parse(_turn(10), "messages", "a") == json.loads(_turn(10))
    assert big.held == (0, 0)


def test_a_number_or_a_literal_that_goes_on_is_parsed_again() -> None:
    bodies = ParsedBodies(1 << 20, min_bytes=0)
    for before, after in ((b"12", b"123"), (b"1", b"1.5"), (b"1", b"1e3"), (b"-0", b"-0.0")):
        for raw in (
            b'{"messages": [{"a": 1}, ' + before + b"]}",
            b'{"messages": [{"a": 1}, ' + before + b"]}",  # (kept parsed from here)
            b'{"messages": [{"a": 1}, ' + after + b"]}",
        ):
            assert bodies.parse(raw, "messages", "a") == json.loads(raw)
    assert (
        json.dumps(bodies.parse(b'{"messages": [1, 1.0]}', "messages", "b"))
        == '{"messages": [1, 1.0]}'
    )
    assert bodies.reused >= 4  # (the object before each number was reused)


def _agent_turn(blocks: list[Any]) -> bytes:
    """An Anthropic body: a task, then one user message of ``blocks`` after another."""
    messages: list[Any] = [{"role": "user", "content": "Fix the bug."}]
    for i, block in enumerate(blocks):
        messages.append({"role": "assistant", "content": f"step {i} " + "y" * 100})
        messages.append({"role": "user", "content": [block]})
    body = {"model": "claude-x", "max_tokens": 256, "messages": messages}
    return json.dumps(body).encode()


def _text(i: int) -> dict[str, Any]:
    return {"type": "text", "text": f"result {i} " + "z" * 100}


def test_an_anthropic_turn_checks_only_the_messages_it_adds() -> None:
    """The messages a body repeats from the last one the Anthropic parse passed are the
    same objects: their blocks are not checked again, the added ones are."""
    from tokenflex.formats import anthropic
    from tokenflex.formats.registry import get_format

    fmt = get_format("anthropic")
    bodies = ParsedBodies(1 << 22, min_bytes=0)
    seen: list[int] = []
    blocks_pass = anthropic.blocks_pass

    def counted(blocks: list[Any]) -> bool:
        seen.append(1)
        return blocks_pass(blocks)

    with mock.patch.object(anthropic, "blocks_pass", counted):
        for n in (20, 21, 21, 22):  # (kept parsed from the second turn on)
            seen.clear()
            req = _validate.parse_request(
                fmt, _agent_turn([_text(i) for i in range(n)]), bodies=bodies, owner="a"
            )
            assert len(req.messages) == 1 + 2 * n
    assert len(seen) <= 5  # the last turn's two new messages, and the last few again


def test_a_bad_block_a_body_repeats_is_refused_again() -> None:
    """Only items a parse passed are trusted: a body that repeats one the last body was
    refused for (a block of no known type) is refused too, however it goes on."""
    from tokenflex.formats.registry import get_format

    fmt = get_format("anthropic")
    bodies = ParsedBodies(1 << 22, min_bytes=0)
    bad = [_text(i) for i in range(20)]
    bad[3] = {"type": "no-such-block", "text": "?"}
    for n in range(20, 24):
        blocks = bad + [_text(i) for i in range(20, n)]
        try:
            _validate.parse_request(fmt, _agent_turn(blocks), bodies=bodies, owner="a")
        except ProxyError as exc:
            assert "messages[8]" in str(exc.message) or "messages[8]" in str(exc.param)
        else:
            raise AssertionError(f"a body of {n} turns with a bad block was not refused")


def test_a_chat_turn_checks_only_the_messages_it_adds() -> None:
    """The chat parse reads past the messages a body repeats from the last one it passed
    (the same objects): each turn of a conversation that goes on, or the same body
    again, checks its new messages and the last few it may send otherwise."""
    from tokenflex.formats import chat
    from tokenflex.formats.registry import get_format

    fmt = get_format("chat")
    bodies = ParsedBodies(1 << 22, min_bytes=0)
    read: list[int] = []
    plain_until = chat.plain_until

    def counted(messages: Any, lo: int, hi: int, roles: Any) -> int:
        read.append(hi - lo)
        return plain_until(messages, lo, hi, roles)

    with mock.patch.object(chat, "plain_until", counted):
        for n in (60, 62, 62, 64):  # (kept parsed from the second turn on)
            read.clear()
            req = _validate.parse_request(fmt, _turn(n), bodies=bodies, owner="c")
            assert len(req.messages) == n
    assert 0 < sum(read) <= 2 + 5  # the last turn's two messages, and the last few again


def test_a_bad_chat_message_a_body_repeats_is_refused_again() -> None:
    """A chat body that repeats a message the last body was refused for (a role no chat
    API knows) is refused too, however it goes on."""
    from tokenflex.formats.registry import get_format

    fmt = get_format("chat")
    bodies = ParsedBodies(1 << 22, min_bytes=0)
    for n in range(20, 24):
        messages = json.loads(_turn(n))["messages"]
        messages[3]["role"] = "robot"
        raw = json.dumps({"model": "gpt-4o", "messages": messages}).encode()
        try:
            _validate.parse_request(fmt, raw, bodies=bodies, owner="c")
        except ProxyError as exc:
            assert exc.param == "messages[3].role", exc.param
        else:
            raise AssertionError(f"a body of {n} messages with a bad role was not refused")


def test_a_plug_in_format_s_parse_is_called_as_it_was_written() -> None:
    """A registered format whose parse was written before ``checked`` (and does not say
    it takes it) is called without it, its bodies reused or not."""
    from tokenflex.formats.chat import Chat

    class Written(Chat):
        name = "chat-written-before"

        def parse(self, body: Any, *, model: str | None = None) -> Any:  # type: ignore[override]
            return super().parse(body, model=model)

    bodies = ParsedBodies(1 << 20, min_bytes=0)
    for n in (10, 12, 14, 14):  # (kept parsed from the second turn on: items reused)
        req = _validate.parse_request(Written(), _turn(n), bodies=bodies, owner="w")
        assert len(req.messages) == n
    assert bodies.reused


@settings(max_examples=200, deadline=None)
@given(st.lists(st.tuples(st.sampled_from("ab"), st.integers(8, 11)), min_size=1, max_size=12))
def test_a_body_sent_again_is_held_as_the_bytes_kept_for_it(sends: list[tuple[str, int]]) -> None:
    """``ChatRequest.raw`` (what the plan store keeps) is always the body's value, and
    the very object of the same body its owner sent before while that one is kept: a
    body sent again is held once. The reference: the bytes each owner sent last and the
    object they came as, kept until the owner sends other bytes (one body an owner, so
    nothing else evicts it)."""
    from tokenflex.formats.registry import get_format

    fmt = get_format("chat")
    bodies = ParsedBodies(1 << 22, per_owner=1, min_bytes=0)
    last: dict[str, bytes] = {}
    for owner, n in sends:
        raw = bytes(bytearray(_turn(n)))  # a new object every request, as a server reads it
        req = _validate.parse_request(fmt, raw, bodies=bodies, owner=owner)
        assert req.raw == raw and len(req.messages) == n
        before = last.get(owner)
        if before is not None and before == raw:
            assert req.raw is before  # the copy kept: this one is let go
        else:
            assert req.raw is raw
            last[owner] = raw


def test_the_plan_store_holds_a_body_sent_again_once() -> None:
    """Served (real HTTP: each request's body a new bytes object): the plans of the same
    body sent three times hold one bytes object, another body its own, the same body from
    another client its own; each plan is served as it was made."""
    from test_server import ServerThread
    from test_server_metrics import KEY, Upstream, conversation, discover

    from tokenflex.server import ServerConfig, create_app

    fake = Upstream()
    with ServerThread(fake.app()) as upstream:
        config = ServerConfig.load(upstream=upstream.url, proxy_key=KEY, cut_note=False)
        app = create_app(config, discover=discover)
        with ServerThread(app) as proxy, httpx.Client(timeout=60, trust_env=False) as client:
            sent = []
            for who, seed in (("a", 1), ("a", 1), ("a", 1), ("a", 2), ("b", 1)):
                body = {"model": "tiny", "messages": conversation(seed, 20)}
                headers = {"x-tokenflex-key": KEY, "authorization": f"Bearer sk-{who}"}
                r = client.post(f"{proxy.url}/v1/chat/completions", json=body, headers=headers)
                assert r.status_code == 200, r.text
                plan_id = r.headers["x-tokenflex-plan-id"]
                got = client.get(f"{proxy.url}/tokenflex/plans/{plan_id}", headers=headers)
                plan = got.json()  # (cut to tiny's window: a note, then the newest)
                assert plan["input_tokens"] == int(r.headers["x-tokenflex-input-tokens"])
                assert plan["messages"][-1] == body["messages"][-1]
                sent.append(plan_id)
            items = app.state.proxy.plans._items
            held = [items[plan_id][1].raw for plan_id in sent]
    assert held[0] is held[1] is held[2]
    assert held[3] is not held[0] and held[4] is not held[0] and held[4] == held[0]
