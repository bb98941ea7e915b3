"""Calibration from the wire: the factor logic against an independent reference, and the
real proxy in front of the real llama.cpp server with a deliberately under-counting entry."""

from __future__ import annotations

import copy
import itertools
import logging
import math
from collections.abc import Iterator
from types import SimpleNamespace
from typing import Any

import anyio
import httpx
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from llama_server import LlamaCppServer
from test_server import ServerThread

from tokenflex import fit
from tokenflex.calibration import (
    MAX_FACTOR,
    MAX_STEP,
    MIN_FACTOR,
    Calibration,
    factor_of,
    scaled_tokenizer,
)
from tokenflex.counting import get_counter
from tokenflex.models import Model, get_model, register_model
from tokenflex.server import ServerConfig, create_app
from tokenflex.server._calibration import UsageTap, reported_input
from tokenflex.tokenizers import get_tokenizer, prefer_fast_backend, register_tokenizer

# -- the factor -------------------------------------------------------------------------------


@settings(max_examples=300, deadline=None)
@given(
    pairs=st.lists(st.tuples(st.integers(1, 100_000), st.floats(0.2, 6.0)), min_size=1, max_size=30)
)
def test_factor_moves_one_bounded_step_and_never_below_the_largest_ratio(
    pairs: list[tuple[int, float]],
) -> None:
    cal = Calibration()
    previous, largest, eligible = 1.0, 0.0, 0
    for predicted, ratio in pairs:
        reported = max(0, round(predicted * ratio))
        used = cal.factor("m")
        obs = cal.observe("m", predicted, reported)
        factor = cal.factor("m")
        assert obs.factor == factor and obs.factor_before == used == previous
        assert MIN_FACTOR <= factor <= MAX_FACTOR
        # one answer moves the factor one bounded step, whatever it reports
        assert factor <= max(previous * MAX_STEP, previous + 0.01) + 1e-9
        assert factor >= previous * 0.95 - 0.01
        if predicted < 16:  # too little text to learn from
            assert obs.ignored and factor == previous
        else:
            eligible += 1
            needed = used * reported / predicted  # the reference: what this answer needed
            largest = max(largest, needed)
            if reported > predicted:  # under: it rises toward what it needs, one step
                assert factor >= min(needed * 1.02, previous * MAX_STEP - 0.01, MAX_FACTOR)
            if factor < previous:  # falls only after many answers, never below any of them
                assert eligible >= 8
                assert factor >= min(largest * 1.02, MAX_FACTOR) - 1e-9
        assert obs.under == (reported > predicted)
        previous = factor
    figures = cal.snapshot()["m"]
    assert figures["observations"] == len(pairs)
    assert figures["predicted_tokens"] == sum(p for p, _ in pairs)


@pytest.mark.parametrize("ratio", [0.6, 0.8, 1.3, 3.0])
def test_many_answers_converge_on_what_the_upstream_counts(ratio: float) -> None:
    cal = Calibration()
    for _ in range(60):
        used = cal.factor("m")
        cal.observe("m", 1000, round(1000 * ratio / used), factor_used=used)
        assert cal.factor("m") >= min(ratio * 1.02, 1.0)  # never under while learning down
    # within the headroom of what it needs: the bound holds and wastes at most 2%
    assert ratio - 0.011 <= cal.factor("m") <= max(ratio * 1.02, MIN_FACTOR) + 0.011


def test_one_answer_never_lowers_a_factor() -> None:
    cal = Calibration()
    for _ in range(7):
        cal.observe("m", 1000, 500)
    assert cal.factor("m") == 1.0  # seven answers are not many
    cal.observe("m", 1000, 500)
    assert cal.factor("m") < 1.0


@settings(max_examples=100, deadline=None)
@given(text=st.text(max_size=300), factor=st.floats(1.01, 4.0))
def test_scaled_tokenizer_is_the_base_times_the_factor_rounded_up(text: str, factor: float) -> None:
    factor = round(factor, 2)
    name = scaled_tokenizer("o200k_base", factor)
    assert factor_of(name) == factor
    base = get_tokenizer("o200k_base").count(text)
    assert get_tokenizer(name).count(text) == math.ceil(base * factor)
    assert not get_tokenizer(name).exact


def test_apply_scales_the_models_counts() -> None:
    cal = Calibration()
    model = get_model("gpt-4o")
    assert cal.apply(model) is model
    cal.observe("gpt-4o", 100, 150)
    assert cal.factor("gpt-4o") == MAX_STEP  # one step of the 1.53 it needs
    cal.observe("gpt-4o", 100, 150, factor_used=1.0)
    scaled = cal.apply(model)
    assert scaled.tokenizer == f"o200k_base#x{cal.factor('gpt-4o'):g}"
    messages = [{"role": "user", "content": "word " * 500}]
    assert get_counter(scaled).count(messages) >= 1.5 * get_counter(model).count(messages) - 10
    # a plan made with the scaled model is judged with the factor it used
    assert cal.factor("gpt-4o") == 1.53  # 1.5, and 2% headroom
    cal.observe("gpt-4o", 100, 100, factor_used=1.0)
    assert cal.factor("gpt-4o") == 1.53  # one answer never lowers it
    cal.observe("gpt-4o", 100, 110, factor_used=1.53)
    assert cal.factor("gpt-4o") == pytest.approx(math.ceil(1.53 * 1.1 * 1.02 * 100) / 100)
    assert cal.apply(model, "http://other:8080") is model  # per upstream


def test_the_fixed_envelope_is_not_scaled_so_the_text_covers_it() -> None:
    cal = Calibration(headroom=1.0, max_step=4.0)
    # 100 predicted = 60 text + 40 envelope; the upstream counted 200: the text must
    # carry 160, a factor of 160 / 60, not 200 / 100
    cal.observe("m", 100, 200, text_tokens=60, scaled_text_tokens=60)
    assert cal.factor("m") == pytest.approx(math.ceil(160 / 60 * 100) / 100)
    assert 60 * cal.factor("m") + 40 >= 200


def test_bounded_in_models_and_factor(caplog: pytest.LogCaptureFixture) -> None:
    cal = Calibration(max_models=2)
    for name in ("a", "b", "c"):
        cal.observe(name, 100, 100)
    assert list(cal.snapshot()) == ["b", "c"]
    with caplog.at_level(logging.WARNING, logger="tokenflex"):
        for _ in range(8):
            obs = cal.observe("c", 100, 10_000)
    assert obs.capped and cal.factor("c") == MAX_FACTOR
    assert "capped" in caplog.text and "tokenflex models --check" in caplog.text
    with pytest.raises(ValueError, match="max_factor"):
        Calibration(max_factor=0.5)


# -- poisoning (issue 25 item 2, 3) ------------------------------------------------------------


def test_one_answer_on_a_one_word_request_teaches_nothing() -> None:
    # the attack: 8 predicted, 11 reported on a one-word request set gpt-4o to 4x
    cal = Calibration()
    plan = fit([{"role": "user", "content": "Hi"}], model="gpt-4o", max_tokens=10)
    obs = cal.observe_plan(plan, plan.input_tokens + 3)
    assert obs.under and obs.ignored and "text" in obs.message()
    assert cal.factor("gpt-4o") == 1.0
    long = [{"role": "user", "content": "word " * 60}] * 61
    model = cal.apply(get_model("gpt-4o"))
    assert get_counter(model).count(long) == get_counter(get_model("gpt-4o")).count(long)


def test_tool_schemas_with_a_short_text_teach_nothing() -> None:
    tools = [
        {
            "type": "function",
            "function": {
                "name": f"tool_{i}",
                "description": "Looks up a record by its id and returns it " * 3,
                "parameters": {"type": "object", "properties": {"id": {"type": "string"}}},
            },
        }
        for i in range(20)
    ]
    cal = Calibration()
    plan = fit(
        [{"role": "user", "content": "Find record 42 for me, please. " * 8}],
        model="gpt-4o",
        tools=tools,
        max_tokens=10,
    )
    obs = cal.observe_plan(plan, math.ceil(plan.input_tokens * 1.05))
    assert obs.ignored and "text is" in obs.ignored
    assert cal.factor("gpt-4o") == 1.0


@settings(max_examples=50, deadline=None)
@given(reported=st.integers(0, 10**9))
def test_no_single_answer_moves_a_factor_more_than_one_step(reported: int) -> None:
    cal = Calibration()
    cal.observe("gpt-4o", 1000, reported)
    assert 1.0 <= cal.factor("gpt-4o") <= MAX_STEP


def test_made_up_names_cannot_evict_a_learned_factor() -> None:
    cal = Calibration()  # 256 entries
    for _ in range(3):
        cal.observe("gpt-4o", 1000, 1300, factor_used=1.0)
    learned = cal.factor("gpt-4o")
    assert learned > 1.0
    for i in range(300):  # the attack: 260 requests with junk model names
        cal.observe(f"junk-{i}", 1000, 1000)
    assert cal.factor("gpt-4o") == learned
    assert cal.totals()["models"] == 256


def test_long_names_are_not_kept() -> None:
    cal = Calibration()
    name = "m" * 3_000_000
    obs = cal.observe(name, 1000, 2000)
    assert obs.ignored and cal.factor(name) == 1.0
    assert cal.snapshot() == {} and cal.totals() == {"models": 0, "observations": 0}
    assert len(obs.message()) < 1000  # the warning does not carry the name either


def test_keyed_per_upstream_and_listed_per_tenant() -> None:
    cal = Calibration()
    cal.observe("m", 1000, 1200, upstream="http://a", owner="alice")
    cal.observe("m", 1000, 1000, upstream="http://b", owner="bob")
    cal.observe("secret-model", 1000, 1000, upstream="http://a", owner="bob")
    assert cal.factor("m", "http://a") > 1.0 == cal.factor("m", "http://b")
    alice = cal.snapshot(owner="alice", upstream="http://a")
    assert list(alice) == ["m"] and alice["m"]["observations"] == 1
    assert alice["m"]["reported_tokens"] == 1200
    bob = cal.snapshot(owner="bob", upstream="http://a")
    assert list(bob) == ["secret-model"]
    assert cal.snapshot(owner="carol") == {}
    assert cal.totals() == {"models": 3, "observations": 3}


# -- through the real proxy --------------------------------------------------------------------


class UnderCounter:
    """A deliberately wrong tokenizer: a third of the words."""

    name, exact = "undercount", False

    def count(self, text: str) -> int:
        return len(text.split()) // 3


@pytest.fixture(scope="module")
def proxy(llama_cpp_server: LlamaCppServer) -> Iterator[ServerThread]:
    # switch already loaded encodings now: done by the app's startup, it can take longer
    # than ServerThread waits for a start on a loaded machine
    prefer_fast_backend()
    config = ServerConfig.load(upstream=llama_cpp_server.base_url, discover=False)
    with ServerThread(create_app(config)) as p:
        yield p


@pytest.fixture
def fresh(proxy: ServerThread, llama_cpp_server: LlamaCppServer) -> ServerThread:
    """The proxy with an under-counting entry, its calibration forgotten (each test
    starts from nothing learned; the registry is reset after each test)."""
    register_tokenizer("undercount", UnderCounter, replace=True)
    register_model(
        Model(
            name="smol-under",
            context_window=llama_cpp_server.n_ctx,
            tokenizer="undercount",
            chat_format="generic",
        )
    )
    proxy.app.state.proxy.calibration.reset()
    return proxy


WORDS = "the budget window token model answer question context " * 20
ALICE = {"authorization": "Bearer sk-alice"}
BOB = {"authorization": "Bearer sk-bob"}


def _figures(client: httpx.Client, proxy: ServerThread, headers: dict[str, str]) -> Any:
    answer = client.get(f"{proxy.url}/tokenflex/calibration", headers=headers)
    assert answer.status_code == 200, answer.text
    return answer.json()


@pytest.mark.server
def test_an_undercount_raises_the_factor_step_by_step_until_the_plan_holds(
    fresh: ServerThread, caplog: pytest.LogCaptureFixture
) -> None:
    proxy = fresh
    body = {
        "model": "smol-under",
        "messages": [
            {"role": "system", "content": "You are terse."},
            {"role": "user", "content": WORDS},
        ],
        "max_tokens": 4,
        "temperature": 0,
    }
    with httpx.Client(timeout=120, trust_env=False, headers=ALICE) as client:
        with caplog.at_level(logging.WARNING, logger="tokenflex"):
            first = client.post(f"{proxy.url}/v1/chat/completions", json=body)
        assert first.status_code == 200, first.text
        predicted = int(first.headers["x-tokenflex-input-tokens"])
        reported = first.json()["usage"]["prompt_tokens"]
        assert reported > predicted  # the entry under-counts: the bound did not hold
        assert "undercount" in first.headers["x-tokenflex-calibration"]
        assert f"{reported:,}" in first.headers["x-tokenflex-calibration"]
        assert "undercount: predicted" in caplog.text
        figures = _figures(client, proxy, ALICE)["models"]["smol-under"]
        assert figures["factor"] == MAX_STEP  # one answer: one step, not the 3x it needs
        assert figures["under"] == figures["observations"] == 1

        answers = 1
        for answers in range(2, 12):  # noqa: B007 - step by step, the plan comes to hold
            again = client.post(f"{proxy.url}/v1/chat/completions", json=body)
            assert again.status_code == 200, again.text
            if again.json()["usage"]["prompt_tokens"] <= int(
                again.headers["x-tokenflex-input-tokens"]
            ):
                break
        else:
            raise AssertionError("the factor never came to cover the upstream's count")
        assert answers > 2
        assert "x-tokenflex-calibration" not in again.headers
        mine = _figures(client, proxy, ALICE)
        assert mine["models"]["smol-under"]["observations"] == answers
        # another tenant sees neither the model name nor the volumes, only the totals
        theirs = _figures(client, proxy, BOB)
        assert theirs["models"] == {} and theirs["total"]["models"] == 1


def _stream(client: httpx.Client, url: str, body: dict[str, Any]) -> str:
    with client.stream("POST", url, json=body) as answer:
        assert answer.status_code == 200, answer.read()
        return "".join(answer.iter_text())


@pytest.mark.server
@pytest.mark.parametrize(
    ("path", "body", "stream"),
    [
        pytest.param(
            "/v1/chat/completions",
            {"messages": [{"role": "user", "content": WORDS}], "max_tokens": 4},
            False,
            id="chat",
        ),
        pytest.param(
            "/v1/chat/completions",
            {
                "messages": [{"role": "user", "content": WORDS}],
                "max_tokens": 4,
                "stream_options": {"include_usage": True},
            },
            True,
            id="chat-stream-include-usage",
        ),
        pytest.param(
            "/v1/messages",
            {"messages": [{"role": "user", "content": WORDS}], "max_tokens": 4},
            False,
            id="anthropic",
        ),
        pytest.param(
            "/v1/messages",
            {"messages": [{"role": "user", "content": WORDS}], "max_tokens": 4},
            True,
            id="anthropic-stream",
        ),
        pytest.param(
            "/v1/responses", {"input": WORDS, "max_output_tokens": 16}, False, id="responses"
        ),
        pytest.param(
            "/v1/responses", {"input": WORDS, "max_output_tokens": 16}, True, id="responses-stream"
        ),
    ],
)
def test_usage_is_learned_from_every_route_streamed_or_not(
    fresh: ServerThread, path: str, body: dict[str, Any], stream: bool
) -> None:
    proxy = fresh
    body = {"model": "smol-under", "temperature": 0, **body}
    with httpx.Client(timeout=120, trust_env=False, headers=ALICE) as client:
        if stream:
            text = _stream(client, proxy.url + path, {**body, "stream": True})
            assert '"usage"' in text
        else:
            answer = client.post(proxy.url + path, json=body)
            assert answer.status_code == 200, answer.text
            assert "undercount" in answer.headers["x-tokenflex-calibration"]
        figures = _figures(client, proxy, ALICE)["models"]["smol-under"]
    assert figures["observations"] == figures["under"] == 1
    assert figures["last_reported"] > figures["last_predicted"] > 0
    assert figures["factor"] == MAX_STEP


@pytest.mark.server
def test_a_stream_without_usage_is_not_observed(fresh: ServerThread) -> None:
    proxy = fresh
    body = {
        "model": "smol-under",
        "messages": [{"role": "user", "content": WORDS}],
        "max_tokens": 4,
        "stream": True,
    }
    with httpx.Client(timeout=120, trust_env=False, headers=ALICE) as client:
        _stream(client, proxy.url + "/v1/chat/completions", body)
        assert _figures(client, proxy, ALICE)["models"] == {}


def test_calibration_can_be_turned_off() -> None:
    on = create_app(ServerConfig.load(upstream="http://127.0.0.1:9"))
    off = create_app(ServerConfig.load(upstream="http://127.0.0.1:9", calibrate=False))
    assert on.state.proxy.fitter.calibration is on.state.proxy.calibration
    assert off.state.proxy.fitter.calibration is None


# -- reading usage off the wire ----------------------------------------------------------------


@pytest.mark.parametrize(
    "usage",
    [
        pytest.param({"prompt_tokens": 1e308}, id="huge"),
        pytest.param({"prompt_tokens": float("inf")}, id="infinity"),
        pytest.param({"prompt_tokens": float("nan")}, id="nan"),
        pytest.param({"prompt_tokens": -1}, id="negative"),
        pytest.param({"prompt_tokens": 1.5}, id="fraction"),
        pytest.param({"prompt_tokens": True}, id="bool"),
        pytest.param({"prompt_tokens": "12"}, id="string"),
        pytest.param({"input_tokens": 5, "cache_read_input_tokens": -3}, id="negative-cache"),
    ],
)
def test_usage_that_is_not_a_count_is_ignored(usage: dict[str, Any]) -> None:
    assert reported_input({"usage": usage}) is None


SSE = [
    b'event: message_start\ndata: {"type":"message_start","message":{"usage":'
    b'{"input_tokens":40,"cache_read_input_tokens":2,"output_tokens":1}}}\n\n',
    b'event: content_block_delta\ndata: {"type":"content_block_delta","delta":{"text":"x"}}\n\n',
    b'event: message_delta\ndata: {"type":"message_delta","usage":{"output_tokens":3}}\n\n',
    b'data: {"type":"response.completed","response":{"usage":{"input_tokens":50}}}\n\n',
    b'data: {"choices":[],"usage":{"prompt_tokens":60,"completion_tokens":2}}\n\ndata: [DONE]\n\n',
]


@settings(max_examples=100, deadline=None)
@given(events=st.integers(1, len(SSE)), cuts=st.lists(st.integers(0, 400), max_size=8))
def test_a_streams_usage_is_read_wherever_its_chunks_are_cut(events: int, cuts: list[int]) -> None:
    stream = b"".join(SSE[:events])
    expected = {1: 42, 2: 42, 3: 42, 4: 50, 5: 60}[events]  # the reference: the last usage seen
    tap = UsageTap(Calibration(), None, upstream="", owner="", limiter=anyio.CapacityLimiter(1))
    bounds = sorted({c for c in cuts if c < len(stream)} | {0, len(stream)})
    for start, stop in itertools.pairwise(bounds):
        tap.feed(stream[start:stop])
    assert tap.reported == expected


def test_an_exact_count_is_never_learned_below_itself() -> None:
    cal = Calibration()
    plan = fit([{"role": "user", "content": "word " * 200}], model="gpt-4o", max_tokens=10)
    for _ in range(30):  # an upstream that keeps reporting 40% less than o200k counts
        cal.observe_plan(plan, plan.input_tokens * 6 // 10)
    assert cal.factor("gpt-4o") == 1.0
    for _ in range(30):  # an estimate is: toward what the upstream counts, one step each
        cal.observe("estimated", 1000, 600)
    assert 0.61 <= cal.factor("estimated") < 1.0


def _spied_calibration() -> tuple[Calibration, dict[str, Any]]:
    """A calibration, and the keywords its last ``observe`` was called with."""
    seen: dict[str, Any] = {}
    cal = Calibration()
    real = cal.observe

    def spy(*args: Any, **kwargs: Any) -> Any:
        seen.update(kwargs)
        return real(*args, **kwargs)

    cal.observe = spy  # type: ignore[method-assign]
    return cal, seen


def _text_parts(messages: list[dict[str, Any]]) -> list[str]:
    """The text parts of chat messages, in order."""
    return [
        t
        for m in messages
        for t in (
            [m["content"]] if isinstance(m["content"], str) else [p["text"] for p in m["content"]]
        )
    ]


@settings(max_examples=100, deadline=None)
@given(
    st.lists(
        st.one_of(
            st.fixed_dictionaries(
                {"role": st.sampled_from(["user", "assistant"]), "content": st.text(max_size=30)}
            ),
            st.fixed_dictionaries(
                {
                    "role": st.just("user"),
                    "content": st.lists(
                        st.fixed_dictionaries({"type": st.just("text"), "text": st.text()}),
                        min_size=1,
                        max_size=2,
                    ),
                }
            ),
        ),
        min_size=1,
        max_size=8,
    ),
    st.sampled_from([1.0, 1.25]),
)
def test_a_plans_text_is_counted_part_by_part(messages: list[Any], used: float) -> None:
    """The text an observation weighs: each kept message's text parts counted by the base
    tokenizer (scaled by the factor the plan carried), whichever loop counts them."""
    from tokenflex.tokenizers import get_tokenizer

    model = get_model("gpt-4o").replace(name="cal-text")
    if used != 1.0:
        model = model.replace(tokenizer=scaled_tokenizer("o200k_base", used))
    plan = fit(messages, model=model, max_tokens=10)
    base = get_tokenizer("o200k_base")
    parts = _text_parts(plan.messages)
    cal, seen = _spied_calibration()
    cal.observe_plan(plan, plan.input_tokens)
    assert seen["text_tokens"] == sum(base.count(t) for t in parts)
    assert seen["scaled_text_tokens"] == sum(math.ceil(base.count(t) * used) for t in parts)


def _turn(i: int, rich: bool) -> list[dict[str, Any]]:
    """A turn of a conversation: a user message and an answer (with ``rich``: text parts
    and a tool's answer, counted part by part)."""
    if not rich:
        return [
            {"role": "user", "content": f"question {i}: " + "how does it go " * (i % 5 + 1)},
            {"role": "assistant", "content": f"answer {i}: " + "it goes well " * (i % 3 + 1)},
        ]
    return [
        {"role": "user", "content": [{"type": "text", "text": f"look up record {i}"}]},
        {"role": "tool", "tool_call_id": f"call_{i}", "content": f"record {i}: " + "field " * i},
    ]


@settings(max_examples=60, deadline=None)
@given(
    steps=st.lists(
        st.tuples(st.sampled_from(["again", "grow", "edit", "remade", "other"]), st.integers(1, 3)),
        min_size=1,
        max_size=10,
    ),
    rich=st.booleans(),
    used=st.sampled_from([1.0, 1.3]),
)
def test_a_conversation_s_text_is_counted_for_what_it_adds(
    steps: list[tuple[str, int]], rich: bool, used: float
) -> None:
    """A proxy's plans (``read_once``: their messages are never edited) weigh the same
    text as a plan counted afresh, part by part, and count only the parts of messages
    that are not the very objects of a plan observed before: the same conversation again
    reads nothing, a turn reads what it adds, another conversation in between does not
    make the first one count again, a message the plan made again (a new object, equal:
    a cut note made on every fit) is not a change, and an edited message counts afresh."""
    model = get_model("gpt-4o").replace(name="cal-kept")
    if used != 1.0:
        model = model.replace(tokenizer=scaled_tokenizer("o200k_base", used))
    base = get_tokenizer("o200k_base")
    cal, seen = _spied_calibration()

    main: list[dict[str, Any]] = [{"role": "system", "content": "You are terse."}]
    other: list[dict[str, Any]] = [{"role": "system", "content": "You are another app."}]
    observed: dict[int, list[dict[str, Any]]] = {}  # by the first message: the last list
    for i, (kind, k) in enumerate(steps):
        if kind == "grow":
            for j in range(k):
                main = main + _turn(10 * i + j, rich)
        elif kind == "edit":
            main = [*main[:-1], {"role": "user", "content": f"said otherwise {i}"}]
        elif kind == "remade":  # (never the first: the kept counts are found by it)
            at = 1 + k % (len(main) - 1) if len(main) > 1 else 0
            main = [*main[:at], copy.deepcopy(main[at]), *main[at + 1 :]]
        elif kind == "other":
            other = other + _turn(100 + i, rich)
        messages = other if kind == "other" else main
        last = observed.get(id(messages[0]), [])
        repeated = len(last) <= len(messages) and all(
            a is b or a == b for a, b in zip(last, messages, strict=False)
        )
        new = messages[len(last) :] if repeated else messages
        plan = SimpleNamespace(model=model, messages=list(messages), input_tokens=10_000)
        before = base.hits + base.misses
        cal.observe_plan(plan, 10_000, read_once=True)
        read = base.hits + base.misses - before
        observed[id(messages[0])] = messages
        assert read == len(_text_parts(new))
        counts = [base.count(t) for t in _text_parts(messages)]
        assert seen["text_tokens"] == sum(counts)
        assert seen["scaled_text_tokens"] == sum(math.ceil(n * used) for n in counts)


def test_a_conversation_observed_again_keeps_its_counts_while_others_come() -> None:
    """The kept text counts go least recently observed first: a conversation seen
    again between others that fill the bound is still counted for nothing."""
    from tokenflex.calibration import TEXT_LISTS

    model = get_model("gpt-4o").replace(name="cal-recent")
    base = get_tokenizer("o200k_base")
    cal = Calibration()
    main = [{"role": "system", "content": "You are terse."}, *_turn(0, False)]
    plan = SimpleNamespace(model=model, messages=list(main), input_tokens=1_000)
    cal.observe_plan(plan, 1_000, read_once=True)
    for i in range(2 * TEXT_LISTS):
        other = [{"role": "system", "content": f"app {i}"}, *_turn(i, False)]
        cal.observe_plan(
            SimpleNamespace(model=model, messages=other, input_tokens=1_000), 1_000, read_once=True
        )
        before = base.hits + base.misses
        cal.observe_plan(plan, 1_000, read_once=True)
        assert base.hits + base.misses == before, f"recounted after {i + 1} others"
