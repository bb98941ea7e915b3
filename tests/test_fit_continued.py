"""A conversation's next turn, parsed by the proxy, is read only where it is new.

The proxy parses a body that repeats the last turn's bytes with the last turn's objects
(:class:`~tokenflex.server._validate.ParsedBodies`), so fit() finds the read of that turn's
list by its objects (``roundtrip._Memo.continued``) and converts, checks and counts only
the items added. The reference is the same request read afresh: a deep copy of the list,
which fit() has never seen. Turns go on from the latest one, repeat it, go on from an
older one (two turns from one read: the second must not take the first's counts), or
from the latest one's first items, its last ones sent otherwise (an agent's cache
breakpoint moves to the newest message).
"""

from __future__ import annotations

import copy
import json
from typing import Any

from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

import tokenflex
from tokenflex import roundtrip
from tokenflex.formats.registry import get_format
from tokenflex.roundtrip import forget
from tokenflex.server._validate import ParsedBodies, parse_request

MODEL = tokenflex.get_model("gpt-4o").replace(name="gpt-4o-continued", context_window=1500)
WORDS = ["pump", "valve", "東京", "код", "42", "naïve", "print(x)", "—", "the", "a"]


def _text(draw: Any) -> str:
    return " ".join(draw(st.lists(st.sampled_from(WORDS), min_size=1, max_size=40)))


@st.composite
def _turn(draw: Any, fmt: str, k: int) -> list[Any]:
    """A user turn and the answer, or a tool round that ends with the tool's result (as an
    agent sends it: the model's answer is the next turn; ``test_fit_reuse``'s turns end
    with an answer, where a cut and a moved breakpoint fall on other items)."""
    q, a = _text(draw), _text(draw)
    if fmt == "anthropic":
        user = {"role": "user", "content": [{"type": "text", "text": q}]}
        if draw(st.booleans()):
            call = {"type": "tool_use", "id": f"t{k}", "name": "f", "input": {"q": q[:20]}}
            result = {"type": "tool_result", "tool_use_id": f"t{k}", "content": a}
            return [
                user,
                {"role": "assistant", "content": [call]},
                {"role": "user", "content": [result]},
            ]
        return [user, {"role": "assistant", "content": a}]
    return [{"role": "user", "content": q}, {"role": "assistant", "content": a}]


def _body(fmt: str, items: list[Any]) -> bytes:
    if fmt == "anthropic":
        body = {"model": "gpt-4o", "system": "Be brief.", "messages": items, "max_tokens": 200}
    else:
        body = {"model": "gpt-4o", "messages": items, "max_tokens": 200}
    return json.dumps(body, ensure_ascii=False).encode()


def _fit(msgs: list[Any], fmt: str, system: Any) -> Any:
    form = None if fmt == "chat" else fmt
    return tokenflex.fit(msgs, model=MODEL, max_tokens=200, format=form, system=system)


@settings(max_examples=80, deadline=None, suppress_health_check=list(HealthCheck))
@given(st.sampled_from(["chat", "anthropic"]), st.data())
def test_a_turn_that_goes_on_from_a_read_gets_the_plan_a_fresh_read_gets(
    fmt: str, data: st.DataObject
) -> None:
    forget()
    bodies = ParsedBodies(1 << 24, min_bytes=0)
    k = 0
    opening: list[Any] = []
    while len(opening) < 34:
        opening += data.draw(_turn(fmt, k))
        k += 1
    turns = [opening]  # the conversations sent so far, newest last
    for _ in range(2):  # (the proxy keeps a body parsed from its conversation's second turn)
        req = parse_request(get_format(fmt), _body(fmt, opening), bodies=bodies, owner="o")
        _fit(req.messages, fmt, req.system)
    for _ in range(data.draw(st.integers(2, 8))):
        op = data.draw(st.sampled_from(["append", "again", "branch", "shorter", "moved"]))
        if op == "append":
            items = turns[-1] + data.draw(_turn(fmt, k))
        elif op == "moved":  # the last items sent again otherwise (a cache breakpoint
            # moved on), then a turn
            cut = max(1, len(turns[-1]) - data.draw(st.integers(1, 3)))
            items = turns[-1][:cut] + data.draw(_turn(fmt, k + 300)) + data.draw(_turn(fmt, k))
        elif op == "again":
            items = list(turns[-1])
        elif op == "branch":  # from an older turn, other turns (the newest one's counts
            # are not theirs: another turn went on from that read first)
            items = turns[max(0, len(turns) - 2)] + data.draw(_turn(fmt, k + 100))
            items += data.draw(_turn(fmt, k + 200))
        else:
            items = turns[-1][: max(2, len(turns[-1]) - 2)]
        k += 1
        turns.append(items)
        req = parse_request(get_format(fmt), _body(fmt, items), bodies=bodies, owner="o")
        plan = _fit(req.messages, fmt, req.system)
        ref = _fit(copy.deepcopy(req.messages), fmt, copy.deepcopy(req.system))
        assert plan.messages == ref.messages
        assert plan.input_tokens == ref.input_tokens
        assert plan.dropped.runs() == ref.dropped.runs()


def test_the_next_turn_reads_the_last_one_s_objects() -> None:
    """The read is found: the list of a turn that repeats the last one's bytes opens with
    its objects (the property above holds without it too)."""
    forget()
    bodies = ParsedBodies(1 << 24, min_bytes=0)
    items = [
        {"role": "user" if i % 2 == 0 else "assistant", "content": f"turn {i}"} for i in range(41)
    ]
    for turn in range(2):  # (a body is kept parsed from its conversation's second turn)
        first = parse_request(get_format("chat"), _body("chat", items), bodies=bodies, owner="o")
        _fit(first.messages, "chat", None)
        kept = roundtrip._MEMO.continued(first.messages, (None, False))
        assert (kept is not None) == (turn == 1)  # a request seen once: its read not kept
    items.append({"role": "assistant", "content": "more"})
    items.append({"role": "user", "content": "and then?"})
    second = parse_request(get_format("chat"), _body("chat", items), bodies=bodies, owner="o")
    assert all(a is b for a, b in zip(first.messages, second.messages[:41], strict=True))
    assert roundtrip._MEMO.continued(second.messages, (None, False)) is not None


def _parsed_conversation(n: int, name: str) -> tuple[Any, ParsedBodies, list[Any]]:
    """A fresh start (nothing read before), a model of its own named ``name``, the bodies
    the proxy keeps parsed, and a conversation of a system prompt and ``n`` messages."""
    forget()
    model = tokenflex.get_model("gpt-4o").replace(name=name)
    items: list[Any] = [{"role": "system", "content": "Be brief."}]
    items += [
        {"role": "user" if i % 2 == 0 else "assistant", "content": f"turn {i} of {n}"}
        for i in range(n)
    ]
    return model, ParsedBodies(1 << 24, min_bytes=0), items


def _counted_next_turn(n: int, monkeypatch: Any) -> int:
    """How many messages fit() counts (one by one or summed) for the next turn of an
    ``n``-message conversation the proxy parsed, fitted cache-stable (as the proxy fits
    it): the turn adds an answer and a question, and all of it fits."""
    from tokenflex.counting import messages as counting

    model, bodies, items = _parsed_conversation(n, "gpt-4o-short-history")
    read: list[int] = []
    total, message = counting.EnvelopeCounter.total, counting.EnvelopeCounter.message

    def counted_total(self: Any, msgs: Any) -> int:
        read.append(len(msgs))
        return total(self, msgs)

    def counted_message(self: Any, msg: Any) -> int:
        read.append(1)
        return message(self, msg)

    monkeypatch.setattr(counting.EnvelopeCounter, "total", counted_total)
    monkeypatch.setattr(counting.EnvelopeCounter, "message", counted_message)
    for turn in range(3):  # (a body is kept parsed from its conversation's second turn)
        if turn == 2:
            items = [*items, {"role": "assistant", "content": "more"}]
            items.append({"role": "user", "content": "and then?"})
        req = parse_request(get_format("chat"), _body("chat", items), bodies=bodies, owner="o")
        read.clear()
        plan = tokenflex.fit(req.messages, model=model, max_tokens=200, cache_stable=True)
        assert not plan.dropped.runs() and len(plan.messages) == len(items)
        ref = tokenflex.fit(copy.deepcopy(req.messages), model=model, max_tokens=200)
        assert plan.input_tokens == ref.input_tokens
    monkeypatch.undo()
    return sum(read)


def test_a_short_history_that_goes_on_is_counted_only_where_it_is_new(
    monkeypatch: Any,
) -> None:
    """A request's read keeps its history's running counts whatever the history's length
    (under the block a long one is counted in): the next turn counts its new messages and
    the few the plan reads outside the history (system, the current turn), as many for a
    conversation of 40 messages as for one of 200, not the older ones again."""
    small = _counted_next_turn(40, monkeypatch)
    assert small == _counted_next_turn(200, monkeypatch)
    assert small < 40


def _counted_edited_turn(n: int, monkeypatch: Any) -> int:
    """How many messages the running counts count (in native runs or one by one) for a
    turn of an ``n``-message conversation the proxy parsed that repeats the last turn's
    messages but its last, said otherwise (a retry), fitted cache-stable."""
    from tokenflex.counting import messages as counting

    model, bodies, items = _parsed_conversation(n, "gpt-4o-edited-turn")
    read: list[int] = []
    run, message = counting.EnvelopeCounter.plain_run, counting.EnvelopeCounter.message

    def counted_run(self: Any, *args: Any) -> Any:
        out = run(self, *args)
        read.append(len(out[0]) if out is not None else 0)
        return out

    def counted_message(self: Any, msg: Any) -> int:
        read.append(1)
        return message(self, msg)

    monkeypatch.setattr(counting.EnvelopeCounter, "plain_run", counted_run)
    monkeypatch.setattr(counting.EnvelopeCounter, "message", counted_message)
    counted = 0
    for turn in range(3):  # (a body is kept parsed from its conversation's second turn)
        if turn == 2:
            last = {**items[-1], "content": f"turn {n - 1} of {n}, said otherwise"}
            items = [*items[:-1], last]
        req = parse_request(get_format("chat"), _body("chat", items), bodies=bodies, owner="o")
        read.clear()
        plan = tokenflex.fit(req.messages, model=model, max_tokens=200, cache_stable=True)
        counted = sum(read)
        assert not plan.dropped.runs() and len(plan.messages) == len(items)
        ref = tokenflex.fit(copy.deepcopy(req.messages), model=model, max_tokens=200)
        assert plan.input_tokens == ref.input_tokens
    monkeypatch.undo()
    return counted


def test_a_turn_said_otherwise_counts_only_what_it_changed(monkeypatch: Any) -> None:
    """A request that repeats the last one's messages but its last (a retry said
    otherwise) keeps the running counts of the messages it repeats: as few counted for a
    conversation of 300 messages as for one of 30."""
    small = _counted_edited_turn(30, monkeypatch)
    assert small == _counted_edited_turn(300, monkeypatch)
    assert small < 30


def test_only_a_conversation_that_goes_on_keeps_its_fingerprints() -> None:
    """The fingerprints of what a cut leaves out are kept by the messages' identity for
    a conversation the proxy parsed as going on (its next turn repeats those objects),
    and not for a request read once and done (held, its objects would only burden the
    garbage collector)."""
    import importlib

    recall_module = importlib.import_module("tokenflex.recall")  # (not the function)
    forget()
    model = tokenflex.get_model("gpt-4o").replace(name="gpt-4o-kept-prints", context_window=3000)
    bodies = ParsedBodies(1 << 24, min_bytes=0)
    items = [
        {"role": "user" if i % 2 == 0 else "assistant", "content": f"turn {i} " + "w " * 40}
        for i in range(201)
    ]
    held: list[int] = []
    for _ in range(3):  # the first body is read once; the same again goes on
        req = parse_request(get_format("chat"), _body("chat", items), bodies=bodies, owner="k")
        before = len(recall_module._STABLE._items)
        plan = tokenflex.fit(req.messages, model=model, max_tokens=200, recall=True)
        assert plan.dropped.runs()
        held.append(len(recall_module._STABLE._items) - before)
    assert held[0] == 0 and held[1] > 100


def test_a_request_read_once_is_not_read_again_for_edits(monkeypatch: Any) -> None:
    """fit() looks over the messages a plan keeps for one edited in place since it read
    the list: never for a request read once (a parse's list: no one edits its items), so
    the same long body again, or its next turn, is not walked message by message; a
    caller's own list still is."""
    model, bodies, items = _parsed_conversation(200, "gpt-4o-read-once")
    walked: list[int] = []
    plain = roundtrip.is_plain_chat

    def counted(messages: Any) -> bool:
        walked.append(len(messages))
        return plain(messages)

    monkeypatch.setattr(roundtrip, "is_plain_chat", counted)
    for turn in range(4):  # (kept parsed from the second turn on: read from the memo)
        if turn == 3:
            items = [*items, {"role": "assistant", "content": "more"}]
        req = parse_request(get_format("chat"), _body("chat", items), bodies=bodies, owner="o")
        walked.clear()
        plan = tokenflex.fit(req.messages, model=model, max_tokens=200, cache_stable=True)
        assert len(plan.messages) == len(items)
        if turn >= 2:  # (the first two reads are a first read of new objects: walked)
            assert sum(walked) < 10, walked
    own = [dict(m) for m in items]  # a caller's list: read, then looked over after its fit
    walked.clear()
    tokenflex.fit(own, model=model, max_tokens=200)
    assert sum(walked) >= 2 * len(own)
