"""The estimator's native cut of ASCII text (``tokenizers/_fastcut.c``) against its references:
the piece pattern run by ``regex`` (the pieces) and the pure-Python path (the estimates)."""

from __future__ import annotations

import shutil
import string
from collections.abc import Iterator

import pytest
import regex
from hypothesis import example, given, settings
from hypothesis import strategies as st
from test_estimate import SPLIT_TEXTS

from tokenflex.tokenizers import estimate
from tokenflex.tokenizers.estimate import PATTERN, estimate_tokens, estimate_tokens_range

REFERENCE_SPLIT = regex.compile(PATTERN).findall
NATIVE = estimate._NATIVE
needs_native = pytest.mark.skipif(NATIVE is None, reason="the native cut was not built here")

# ASCII, dense in what the scanner decides on: every kind of space and line break, the
# characters around contractions, "/" after punctuation and line breaks, case changes
ASCII_TRICKY = [*" \t\n\r\v\f\x00\x1c\x1f/'sStTdDmMlLrReEvVaZ09.,;!(-_", "'ll", "'RE", "\r\n"]
ASCII_TEXTS = st.one_of(
    st.text(st.characters(max_codepoint=127), max_size=300),
    st.text(alphabet=string.printable, max_size=300),
    st.lists(st.sampled_from(ASCII_TRICKY), min_size=1, max_size=6).flatmap(
        lambda alphabet: st.lists(st.sampled_from(alphabet), max_size=80).map("".join)
    ),
)


def test_the_native_cut_is_built_where_a_compiler_is() -> None:
    # setup.py builds it optionally; a compiler that is there but fails must not go unseen
    if shutil.which("cc") or shutil.which("gcc"):
        assert NATIVE is not None, "tokenizers/_fastcut.c did not build: pip install -e . -v"


@needs_native
@settings(max_examples=2000, deadline=None)
@given(ASCII_TEXTS)
@example("x;\n/y")
@example("  \x1c")
@example("a  \n  \n\tb\n c")
@example("It'S 'll\r\n\r\n  /x")
@example("HTTPServer's 1234567 \t\tfoo  ")
def test_native_split_is_the_pattern_split(text: str) -> None:
    assert NATIVE is not None
    split, count = NATIVE
    pieces = REFERENCE_SPLIT(text)
    assert split(text) == pieces
    table = estimate._load().table
    assert count(text, table) == (
        sum(p in table for p in pieces),
        [p for p in pieces if p not in table],
    )


@needs_native
def test_native_cut_takes_ascii_only() -> None:
    assert NATIVE is not None
    with pytest.raises(ValueError, match="ASCII"):
        NATIVE[0]("héllo")
    with pytest.raises(TypeError):
        NATIVE[1]("hello", ["hello"])  # type: ignore[arg-type]


@pytest.fixture
def python_path() -> Iterator[None]:
    saved = estimate._NATIVE
    estimate._NATIVE = None
    estimate.clear_caches()
    try:
        yield
    finally:
        estimate._NATIVE = saved
        estimate.clear_caches()


def estimates(text: str) -> tuple[int, tuple[int, int], list[str]]:
    return estimate_tokens(text), estimate_tokens_range(text), estimate.split_text(text)


@needs_native
@settings(max_examples=500, deadline=None)
@given(st.one_of(SPLIT_TEXTS, ASCII_TEXTS))
def test_native_and_python_paths_give_the_same_estimates(text: str) -> None:
    estimate.clear_caches()
    native = estimates(text)
    saved = estimate._NATIVE
    estimate._NATIVE = None
    try:
        estimate.clear_caches()
        assert estimates(text) == native
    finally:
        estimate._NATIVE = saved


def test_the_python_path_is_the_pattern_split(python_path: None) -> None:
    # where the package was installed without a compiler
    for text in ("Hello, world! It's 2024.", "a  \n  \n\tb\n c", "x;\n/y  "):
        assert estimate.split_text(text) == REFERENCE_SPLIT(text)


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


@needs_native
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


@needs_native
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
