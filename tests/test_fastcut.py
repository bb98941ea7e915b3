"""The estimator's native ASCII cut (the optional C extension ``_fastcut``) against the
regex it replaces: the same pieces, the same table count, the same estimates."""

from __future__ import annotations

import itertools
from typing import Any

import pytest
import regex
from hypothesis import event, example, given, settings
from hypothesis import strategies as st

from tokenflex.tokenizers import estimate
from tokenflex.tokenizers.estimate import PATTERN, clear_caches, estimate_tokens

fastcut = pytest.importorskip(
    "tokenflex.tokenizers._fastcut",
    reason="the C extension is not built (no C compiler): the estimator cuts with re",
)

# the characters where the pattern's branches meet, weighted by repetition
TRICKY = list(" \t\n\r\v\f'/.,!-_\"\x00\x1c\x7f") + list("sStTrReEvVlLmMdD") + list("aZ09")
ASCII_TEXT = st.one_of(
    st.text(st.characters(max_codepoint=127), max_size=300),
    st.lists(st.sampled_from(TRICKY), min_size=1, max_size=6).flatmap(
        lambda alphabet: st.lists(st.sampled_from(alphabet), max_size=80).map("".join)
    ),
    st.lists(st.sampled_from(TRICKY), max_size=120).map("".join),
)
SPLIT = regex.compile(PATTERN).findall


@given(ASCII_TEXT)
@example("it's  a\r\n \r\nB'RE x/\r\n/ !!\t\tx 1234 \x0b\n")
@example("  \t\fword\r")
def test_native_cut_is_the_pattern_cut(text: str) -> None:
    assert fastcut.split(text) == SPLIT(text)


@settings(deadline=None)  # the first example loads the table
@given(ASCII_TEXT)
def test_native_count_is_the_table_count(text: str) -> None:
    table = estimate._load().table
    pieces = SPLIT(text)
    rest = [p for p in pieces if p not in table]
    assert fastcut.count(text, table) == (len(pieces) - len(rest), rest)


def test_native_count_follows_the_table() -> None:
    # a new table is looked up, not the one before it
    assert fastcut.count("ab cd ab", frozenset({"ab", "é"})) == (1, [" cd", " ab"])
    assert fastcut.count("ab cd ab", frozenset({" cd"})) == (1, ["ab", " ab"])


def test_native_takes_ascii_only() -> None:
    with pytest.raises(ValueError, match="ASCII"):
        fastcut.split("café")
    with pytest.raises(ValueError, match="ASCII"):
        fastcut.count("café", frozenset())


@settings(deadline=None)  # the first example loads the table
@given(st.one_of(ASCII_TEXT, st.text(max_size=300)))
def test_estimate_is_the_same_with_and_without_the_native_cut(text: str) -> None:
    clear_caches()
    native = estimate_tokens(text)
    with pytest.MonkeyPatch.context() as mp:
        mp.setattr(estimate, "_count_ascii", estimate._count_cut)
        mp.setattr(estimate, "_split_ascii", estimate._ASCII_SPLIT)
        clear_caches()
        assert estimate_tokens(text) == native
    clear_caches()


# -- the count cache's bulk look-up of a plain chat history (CountCache.plain_total) --------

ROLES = ["system", "user", "assistant", "developer", "tool", "narrator"]
PLAIN_MESSAGES = st.lists(
    st.one_of(
        st.fixed_dictionaries({"role": st.sampled_from(ROLES), "content": st.text(max_size=40)}),
        # other shapes: the whole list is counted message by message
        st.fixed_dictionaries(
            {"role": st.just("user"), "content": st.text(max_size=20), "name": st.just("ann")}
        ),
        st.fixed_dictionaries(
            {"role": st.just("user"), "content": st.lists(st.just({"type": "text", "text": "hi"}))}
        ),
    ),
    max_size=30,
)


@settings(max_examples=300, deadline=None)
@given(PLAIN_MESSAGES, st.sampled_from(["gpt-4o", "gpt-4", "some-unknown-model"]), st.data())
def test_a_history_counted_at_once_is_the_sum_of_its_messages(
    messages: list[dict[str, object]], model: str, data: st.DataObject
) -> None:
    from tokenflex.counting import get_counter
    from tokenflex.counting.messages import MessageCounter

    counter = get_counter(model)
    counter.tokenizer.clear()
    # some texts cached, some not (the loop's misses are counted one by one)
    for m in data.draw(st.lists(st.sampled_from(messages), max_size=10)) if messages else []:
        if isinstance(m["content"], str):
            counter.tokenizer.count(m["content"])
    try:
        got = counter.count(messages)  # first: with the misses
    except Exception as exc:  # a role the counter refuses: refused the same way one by one
        with pytest.raises(type(exc)):
            sum(map(counter.message, messages))
        return
    expected = counter.base() + sum(map(counter.message, messages))
    assert got == expected
    assert MessageCounter.count(counter, messages) == expected  # the one-by-one path
    assert counter.count(messages) == expected  # again, every text cached


def test_the_bulk_look_up_declines_other_shapes() -> None:
    from tokenflex.counting import get_counter

    counter = get_counter("gpt-4o")
    envelopes = {"user": 4, "assistant": 4}
    plain = [{"role": "user", "content": "hi"}, {"role": "assistant", "content": "yo"}]
    assert counter.tokenizer.plain_total(plain, envelopes) is not None

    class Sub(dict):  # type: ignore[type-arg]
        pass

    for other in (
        {"role": "user", "content": "hi", "name": "x"},
        {"role": "tool", "content": "hi"},
        {"role": "user", "content": ["hi"]},
        {"role": "user", "text": "hi"},
        Sub(role="user", content="hi"),
    ):
        assert counter.tokenizer.plain_total([*plain, other], envelopes) is None, other


# -- the count cache's run of plain messages, newest first (CountCache.plain_run) ---------


def _plain_run_reference(
    counter: Any, messages: list[Any], hi: int, lo: int, total: int, bound: int, limit: int
) -> tuple[list[int], int]:
    """What ``plain_run`` promises, message by message: counts newest first while each is
    a plain dict of a role with an envelope whose text the cache holds, past ``bound`` or
    ``limit`` included."""
    counts: list[int] = []
    envelopes = {"system", "user", "assistant", "developer"}
    for i in range(min(hi, len(messages)) - 1, max(lo, 0) - 1, -1):
        if len(counts) >= limit:
            break
        m = messages[i]
        plain = (
            type(m) is dict
            and set(m) == {"role", "content"}
            and type(m["role"]) is str
            and m["role"] in envelopes
            and type(m["content"]) is str
            and m["content"] in counter.tokenizer
        )
        if not plain:
            break
        counts.append(counter.message(m))
        total += counts[-1]
        if total > bound:
            break
    return counts, total


_PLAIN = st.fixed_dictionaries(
    {"role": st.sampled_from(["system", "user", "assistant"]), "content": st.text(max_size=40)}
)
RUNS = st.lists(  # mostly plain messages, so that runs are long
    st.one_of(_PLAIN, _PLAIN, _PLAIN, PLAIN_MESSAGES.map(lambda ms: ms[0] if ms else {})),
    max_size=30,
)


@settings(max_examples=300, deadline=None)
@given(RUNS, st.data())
def test_a_run_of_plain_messages_is_counted_as_each_message_is(
    messages: list[dict[str, object]], data: st.DataObject
) -> None:
    from tokenflex.counting import get_counter

    counter = get_counter("gpt-4o")
    counter.tokenizer.clear()
    n = len(messages)
    uncached = data.draw(st.sets(st.integers(0, max(n - 1, 0))))  # the native loop stops there
    for i, m in enumerate(messages):
        content = m.get("content")
        if isinstance(content, str) and i not in uncached:
            counter.tokenizer.count(content)
    hi = data.draw(st.one_of(st.just(n), st.integers(0, n + 2)))
    lo = data.draw(st.one_of(st.just(0), st.integers(-1, max(hi, 0))))
    total = data.draw(st.integers(0, 50))
    limit = data.draw(st.one_of(st.just(n + 1), st.integers(0, n + 1)))
    whole, _ = _plain_run_reference(counter, messages, hi, lo, total, 10**9, limit)
    sums = list(itertools.accumulate(whole, initial=total))  # a bound at a sum: not past it
    bound = data.draw(st.one_of(st.integers(0, 400), st.sampled_from(sums)))
    expected = _plain_run_reference(counter, messages, hi, lo, total, bound, limit)
    got = counter.plain_run(messages, hi, lo, total, bound, limit)
    assert got == expected
    assert counter.plain_run(tuple(messages), hi, lo, total, bound, limit) is None  # a list only


@settings(max_examples=200, deadline=None)
@given(PLAIN_MESSAGES, st.data())
def test_a_history_counted_in_a_count_scope_leaves_the_cache_as_it_was(
    messages: list[dict[str, object]], data: st.DataObject
) -> None:
    """The C loop inside a count scope (the proxy's, per request): the same total as
    message by message, and a discarded scope's new counts never reach the cache."""
    from tokenflex.counting import get_counter
    from tokenflex.counting.messages import MessageCounter
    from tokenflex.tokenizers.base import count_scope

    counter = get_counter("gpt-4o")
    counter.tokenizer.clear()
    for m in data.draw(st.lists(st.sampled_from(messages), max_size=10)) if messages else []:
        if isinstance(m["content"], str):
            counter.tokenizer.count(m["content"])

    def cached() -> set[object]:
        return {m["content"] for m in messages if m["content"] in counter.tokenizer}

    before = cached()
    with count_scope() as scope:
        try:
            expected = MessageCounter.total(counter, messages)  # message by message
        except Exception:
            return  # a role the counter refuses (the test above holds both ways to it)
        scope.discard()
    assert cached() == before
    with count_scope() as scope:
        assert counter.total(messages) == expected
        assert counter.total(messages) == expected  # the scope's own counts found again
        scope.discard()
    assert cached() == before


def _agent_message() -> st.SearchStrategy[dict[str, Any]]:
    """Chat messages of every shape ``message_total`` reads and some it declines: tool
    calls and results, names, None and empty fields, odd fields, malformed ones."""
    text = st.sampled_from(["", "ok", "read f1.py", '{"path": "a"}', "toolu_1", "x " * 40])
    call = st.fixed_dictionaries(
        {"id": st.one_of(text, st.none(), st.integers()), "type": st.just("function")},
        optional={
            "function": st.one_of(
                st.fixed_dictionaries(
                    {"name": st.one_of(text, st.integers())},
                    optional={"arguments": st.one_of(text, st.none(), st.just({"a": 1}))},
                ),
                st.just("not a dict"),
            )
        },
    )
    value = st.one_of(text, st.none(), st.just([]), st.just({}), st.just(()), st.integers())
    good_call = st.fixed_dictionaries(
        {
            "id": text,
            "type": st.just("function"),
            "function": st.fixed_dictionaries({"name": text, "arguments": text}),
        }
    )
    part = st.one_of(
        st.builds(lambda t: {"type": "text", "text": t}, text),
        st.builds(lambda t: {"type": "input_text", "text": t}, text),
        st.builds(lambda t: {"type": "refusal", "refusal": t}, text),
        st.just({"type": "text", "text": 3}),
        st.just({"type": "image_url", "image_url": {"url": "https://x/y.png"}}),
    )
    # texts whose join costs less than the parts, and more (o200k: "  " + "1")
    seam = st.sampled_from(
        [["ab", "cd"], [" ", " "], ["x", "y", "z"], ["  ", "1"], ["  ", "4", "x"]]
    )
    content = st.one_of(
        text,
        st.lists(part, max_size=4),
        seam.map(lambda ts: [{"type": "text", "text": t} for t in ts]),
    )
    agent = st.one_of(
        st.fixed_dictionaries({"role": st.sampled_from(["user", "system"]), "content": content}),
        st.fixed_dictionaries(
            {
                "role": st.just("assistant"),
                "content": st.one_of(st.none(), content),
                "tool_calls": st.lists(good_call, min_size=1, max_size=3),
            },
            optional={"name": text, "extra": value},
        ),
        st.fixed_dictionaries(
            {"role": st.sampled_from(["tool", "function"]), "content": content},
            optional={"tool_call_id": text, "name": text},
        ),
    )
    return agent | st.fixed_dictionaries(
        {"role": st.sampled_from(["user", "assistant", "tool", "function", "system", "bot", 3])},
        optional={
            "content": st.one_of(text, st.none(), st.just([{"type": "text", "text": "hi"}])),
            "tool_calls": st.one_of(st.lists(call, max_size=3), st.tuples(call), st.just("x")),
            "tool_call_id": text,
            "name": text,
            "function_call": st.just({"name": "f", "arguments": "{}"}),
            "extra": value,
        },
    )


@settings(max_examples=400, deadline=None)
@given(_agent_message(), st.booleans(), st.booleans())
def test_one_message_counted_in_c_is_counted_as_in_python(
    message: dict[str, Any], native: bool, warm: bool
) -> None:
    """``message_total`` (one C call for an agent's message: tool calls, tool results,
    names, a converted request's dict subclass) gives what ``EnvelopeCounter._message``
    counts, or declines (None) and the Python count stands: for every shape, with the
    cache holding the texts or not; a malformed message raises as before."""
    from tokenflex.counting import get_counter
    from tokenflex.formats.native import NativeMessage
    from tokenflex.message.checks import ROLES, TEXT_PARTS, BadMessage

    counter = get_counter("gpt-4o")
    msg: Any = NativeMessage(message, native=[message], start=0) if native else message
    try:
        expected = counter._message(dict(message))
    except BadMessage:
        with pytest.raises(BadMessage):
            counter.message(msg)
        return
    if not warm:
        counter.tokenizer.clear()
    read = counter.tokenizer.message_total(msg, frozenset(ROLES), TEXT_PARTS, counter._envelope)
    assert read is None or read == expected
    assert counter.message(msg) == expected
    assert counter.message(msg) == expected  # and again from the cache
    event(f"read in C: {read is not None}")


_POOL = [{"n": i} for i in range(4)]  # equal values are not the same objects
_OBJECTS = st.lists(st.sampled_from(_POOL) | st.builds(dict, n=st.integers(0, 3)), max_size=12)


@given(_OBJECTS, st.sampled_from(_POOL) | st.builds(dict), st.integers(-2, 14))
def test_find_same_finds_the_object_itself(items: list[Any], obj: Any, lo: int) -> None:
    expected = next((i for i in range(max(lo, 0), len(items)) if items[i] is obj), -1)
    assert fastcut.find_same(items, obj, lo) == expected


@given(_OBJECTS, st.integers(-1, 13), _OBJECTS, st.integers(-1, 13), st.booleans())
def test_same_run_counts_the_same_objects(
    a: list[Any], i: int, b: list[Any], j: int, shared: bool
) -> None:
    if shared:  # a run worth finding: b holds a piece of a
        b = b[: max(j, 0)] + a[max(i, 0) :] + b[max(j, 0) :]
    k = 0
    if i >= 0 and j >= 0:
        while i + k < len(a) and j + k < len(b) and a[i + k] is b[j + k]:
            k += 1
    assert fastcut.same_run(a, i, b, j) == k


@given(st.binary(max_size=9000), st.binary(max_size=9000), st.integers(0, 9000))
def test_common_prefix_counts_the_shared_bytes(a: bytes, b: bytes, cut: int) -> None:
    b = a[:cut] + b  # shared bytes on both sides of a 4 KiB block
    n = 0
    while n < min(len(a), len(b)) and a[n] == b[n]:
        n += 1
    assert fastcut.common_prefix(a, b) == n
