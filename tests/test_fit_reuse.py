"""fit() reads a list it has read before only where it is new (issue 24, item 1).

The reference for every property is the same request read afresh: a new list holding the
same items (a list fit() has never seen is converted and checked whole). A list fitted,
grown by appending, edited (an item replaced, a kept message given a new field value in
place) and fitted again gives the plan a fresh read gives, or the error a fresh read
raises, naming the same index.
"""

from __future__ import annotations

import copy
import logging
from typing import Any

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

import tokenflex
from tokenflex import InvalidMessagesError
from tokenflex.roundtrip import forget

SETTINGS = settings(max_examples=25, deadline=None, suppress_health_check=list(HealthCheck))
MODEL = tokenflex.get_model("gpt-4o").replace(name="gpt-4o-reuse", context_window=1500)
WORDS = ["pump", "valve", "東京", "код", "42", "naïve", "print(x)", "—", "the", "a"]
FORMATS = ("chat", "chat-reasoning", "anthropic", "responses")


def _text(draw: Any) -> str:
    return " ".join(draw(st.lists(st.sampled_from(WORDS), min_size=1, max_size=60)))


@st.composite
def _turn(draw: Any, fmt: str, k: int) -> list[Any]:
    """One user turn and the assistant's answer (a tool round in some) in ``fmt``."""
    q, a = _text(draw), _text(draw)
    tool = draw(st.booleans())
    if fmt == "anthropic":
        user = {"role": "user", "content": [{"type": "text", "text": q}]}
        if tool:
            call = {"type": "tool_use", "id": f"t{k}", "name": "f", "input": {"q": q[:20]}}
            result = {"type": "tool_result", "tool_use_id": f"t{k}", "content": a}
            return [
                user,
                {"role": "assistant", "content": [call]},
                {"role": "user", "content": [result]},
                {"role": "assistant", "content": a},
            ]
        return [user, {"role": "assistant", "content": a}]
    if fmt == "responses":
        user = {"role": "user", "content": q}
        if tool:
            return [
                user,
                {
                    "type": "reasoning",
                    "id": f"r{k}",
                    "summary": [{"type": "summary_text", "text": q}],
                },
                {"type": "function_call", "call_id": f"c{k}", "name": "f", "arguments": "{}"},
                {"type": "function_call_output", "call_id": f"c{k}", "output": a},
                {
                    "type": "message",
                    "role": "assistant",
                    "content": [{"type": "output_text", "text": a}],
                },
            ]
        return [user, {"role": "assistant", "content": a}]
    answer: dict[str, Any] = {"role": "assistant", "content": a}
    if fmt == "chat-reasoning" and tool:
        answer["reasoning_content"] = q
    return [{"role": "user", "content": q}, answer]


@st.composite
def _story(draw: Any) -> tuple[str, list[Any], list[tuple[str, int, Any]]]:
    """A format, an opening of 32+ items, and steps: append a turn, fit, replace an item
    by an equal copy or by a copy with a new content, give a message a new content in
    place."""
    fmt = draw(st.sampled_from(FORMATS))
    opening: list[Any] = [{"role": "system", "content": "Be brief."}] if fmt != "anthropic" else []
    k = 0
    while len(opening) < 34:
        opening += draw(_turn(fmt, k))
        k += 1
    steps: list[tuple[str, int, Any]] = []
    for _ in range(draw(st.integers(2, 6))):
        op = draw(st.sampled_from(["append", "fit", "copy", "replace", "edit"]))
        steps.append((op, draw(st.integers(0, 10_000)), draw(_turn(fmt, k))))
        k += 1
    return fmt, opening, steps


def _fit(msgs: list[Any], fmt: str) -> Any:
    system = "Be brief." if fmt == "anthropic" else None
    form = None if fmt.startswith("chat") else fmt
    return tokenflex.fit(msgs, model=MODEL, max_tokens=200, format=form, system=system)


def _own(plan: Any, msgs: list[Any]) -> None:
    """A kept item is the caller's own object (an equal copy put in is the copy)."""
    ids = {id(x) for x in msgs}
    for x in plan.messages:
        if x in msgs:
            assert id(x) in ids, x


def _same(plan: Any, ref: Any) -> None:
    assert plan.messages == ref.messages
    assert plan.input_tokens == ref.input_tokens
    assert plan.max_tokens == ref.max_tokens
    assert plan.dropped.runs() == ref.dropped.runs()


def _edit(msgs: list[Any], at: int, text: str) -> None:
    """A new content for one message, in place (the same dict)."""
    m = msgs[at]
    if "content" in m and "role" in m:
        m["content"] = text if isinstance(m["content"], str) else [{"type": "text", "text": text}]
        if m.get("role") == "user" and isinstance(m["content"], list) and "type" in m:
            m["content"] = [{"type": "input_text", "text": text}]
    elif "output" in m:
        m["output"] = text


@SETTINGS
@given(_story())
def test_a_list_fitted_again_gives_the_plan_a_fresh_read_gives(
    story: tuple[str, list[Any], list[tuple[str, int, Any]]],
) -> None:
    fmt, opening, steps = story
    forget()
    msgs = copy.deepcopy(opening)
    _same(_fit(msgs, fmt), _fit(list(msgs), fmt))
    for op, at, turn in steps:
        if op == "append":
            msgs += turn
        elif op == "copy":
            i = at % len(msgs)
            msgs[i] = copy.deepcopy(msgs[i])
        elif op == "replace":
            # anywhere, read or not: another object, another content (then a turn may
            # be appended: the grown list's read must see it)
            i = at % len(msgs)
            msgs[i] = copy.deepcopy(msgs[i])
            _edit(msgs, i, " ".join(reversed(WORDS)))
            if at % 2:
                msgs += turn
        elif op == "edit":
            # the newest messages: the ones a fit reads (and keeps)
            _edit(msgs, len(msgs) - 1 - at % 4, " ".join(WORDS) * (1 + at % 3))
        plan = _fit(msgs, fmt)
        _same(plan, _fit(list(msgs), fmt))
        if fmt != "chat-reasoning":  # (there the plan sends copies without reasoning)
            _own(plan, msgs)


@pytest.mark.parametrize("fmt", FORMATS)
def test_a_bad_item_appended_to_a_list_read_before_is_named_by_its_index(fmt: str) -> None:
    forget()
    msgs: list[Any] = [{"role": "system", "content": "Be brief."}] if fmt != "anthropic" else []
    _grown_to(msgs, fmt, 40)
    _fit(msgs, fmt)
    n = len(msgs)
    msgs += [{"role": "user", "content": "q"}, {"role": "wizard", "content": "x"}]
    with pytest.raises(InvalidMessagesError, match=rf"^messages\[{n + 1}\] "):
        _fit(msgs, fmt)
    with pytest.raises(InvalidMessagesError, match=rf"^messages\[{n + 1}\] "):
        _fit(list(msgs), fmt)


def test_a_kept_message_edited_in_place_is_read_again() -> None:
    """An Anthropic message given a bad content in place, after the list was read."""
    forget()
    msgs: list[Any] = []
    for k in range(20):
        msgs += _fixed_turn("anthropic", k)
    assert _fit(msgs, "anthropic").format == "anthropic"
    msgs[-1]["content"] = [{"type": "text", "text": 5}]
    with pytest.raises(InvalidMessagesError, match=rf"messages\[{len(msgs) - 1}\]"):
        _fit(msgs, "anthropic")


def test_a_plan_discarded_for_an_edit_in_place_is_said_so_in_the_log(
    caplog: pytest.LogCaptureFixture,
) -> None:
    """A kept message edited in place after the list was read: the plan made from the read
    is discarded and the list fitted afresh. Its drops were logged when it was made, so
    the log says it was discarded before the drops of the plan returned."""
    forget()
    msgs: list[Any] = []
    for k in range(200):
        msgs += _fixed_turn("anthropic", k)
    _fit(msgs, "anthropic")
    msgs[-1]["content"] = "answer edited"  # kept, converted when read: read again
    with caplog.at_level(logging.INFO, logger="tokenflex"):
        plan = _fit(msgs, "anthropic")
    lines = [r.getMessage() for r in caplog.records if r.name == "tokenflex"]
    drops = [i for i, line in enumerate(lines) if line.startswith("tokenflex: dropped ")]
    discarded = [i for i, line in enumerate(lines) if "discarding the plan" in line]
    runs = len({(d.section, d.reason) for d in plan.dropped})
    assert plan.dropped and len(discarded) == 1 and len(drops) == 2 * runs
    # the discarded plan's drops, the line, then the drops of the plan returned
    assert drops[runs - 1] < discarded[0] < drops[runs]
    assert "gpt-4o-reuse" in lines[discarded[0]]


def test_items_of_another_format_appended_are_detected_afresh() -> None:
    forget()
    msgs: list[Any] = []
    for k in range(20):
        msgs += _fixed_turn("anthropic", k)
    msgs[1:1] = [
        {
            "role": "assistant",
            "content": [{"type": "tool_use", "id": "t", "name": "f", "input": {}}],
        },
        {"role": "user", "content": [{"type": "tool_result", "tool_use_id": "t", "content": "r"}]},
    ]
    assert tokenflex.fit(msgs, model=MODEL, max_tokens=200).format == "anthropic"
    msgs.append({"type": "function_call_output", "call_id": "c", "output": "r"})
    with pytest.raises(InvalidMessagesError, match="mix formats"):
        tokenflex.fit(msgs, model=MODEL, max_tokens=200)


def _grown_to(msgs: list[Any], fmt: str, size: int) -> int:
    """``msgs`` with :func:`_fixed_turn` s appended until it holds ``size`` items; the
    number of the next turn."""
    k = 0
    while len(msgs) < size:
        msgs += _fixed_turn(fmt, k)
        k += 1
    return k


def _fixed_turn(fmt: str, k: int) -> list[Any]:
    if fmt == "anthropic":
        return [
            {"role": "user", "content": [{"type": "text", "text": f"question {k}"}]},
            {"role": "assistant", "content": f"answer {k}"},
        ]
    if fmt == "responses":
        return [
            {"role": "user", "content": f"question {k}"},
            {"type": "function_call", "call_id": f"c{k}", "name": "f", "arguments": "{}"},
            {"type": "function_call_output", "call_id": f"c{k}", "output": f"answer {k}"},
        ]
    answer: dict[str, Any] = {"role": "assistant", "content": f"answer {k}"}
    if fmt == "chat-reasoning":
        answer["reasoning_content"] = "thinking"
    return [{"role": "user", "content": f"question {k}"}, answer]


@pytest.mark.parametrize("fmt", ["chat", "chat-reasoning"])
def test_an_item_replaced_before_a_turn_is_appended_is_read_again(fmt: str) -> None:
    # a list read before, one of its items replaced by another message, then a turn
    # appended: the grown list's read compares what it read before, and reads it afresh
    forget()
    msgs: list[Any] = [{"role": "system", "content": "Be brief."}]
    for k in range(20):  # (a list long enough to be remembered at its first read)
        answer: dict[str, Any] = {"role": "assistant", "content": f"answer {k}"}
        if fmt == "chat-reasoning":
            answer["reasoning_content"] = f"thinking {k}"
        msgs += [{"role": "user", "content": f"question {k}"}, answer]
    _fit(msgs, fmt)
    msgs[1] = {"role": "user", "content": " ".join(WORDS * 5)}
    msgs += [{"role": "user", "content": "and now?"}]
    plan = _fit(msgs, fmt)
    _same(plan, _fit(list(msgs), fmt))
    assert plan.messages[1] is msgs[1]


def test_a_model_that_cannot_be_hashed_fits_a_list_turn_after_turn() -> None:
    # aliases given as a list: the model is no dict key; the checks a remembered list
    # keeps per model (by identity) still read each new message, and name a bad one
    model = MODEL.replace(name="gpt-4o-listed", aliases=["listed"])  # type: ignore[arg-type]
    with pytest.raises(TypeError):
        hash(model)
    forget()
    msgs: list[Any] = [{"role": "system", "content": "Be brief."}]
    for k in range(20):
        msgs += [{"role": "user", "content": f"q {k}"}, {"role": "assistant", "content": "a"}]
        msgs.append({"role": "user", "content": "next"})
        plan = tokenflex.fit(msgs, model=model, max_tokens=200)
        again = tokenflex.fit(list(msgs), model=model, max_tokens=200)
        assert (plan.messages, plan.input_tokens) == (again.messages, again.input_tokens)
        msgs.pop()
    msgs.append({"role": "user", "content": 7})
    with pytest.raises(tokenflex.InvalidMessagesError, match=r"messages\[41\]"):
        tokenflex.fit(msgs, model=model, max_tokens=200)


def _fit_at_once(msgs: list[Any], fmt: str, threads: int = 4) -> list[Any]:
    """The plans of ``threads`` threads fitting ``msgs`` at the same moment."""
    import threading

    start = threading.Barrier(threads)
    plans: list[Any] = []
    errors: list[BaseException] = []

    def one() -> None:
        try:
            start.wait()
            plans.append(_fit(msgs, fmt))
        except BaseException as exc:  # reported below
            errors.append(exc)

    running = [threading.Thread(target=one) for _ in range(threads)]
    for t in running:
        t.start()
    for t in running:
        t.join()
    assert not errors, errors
    return plans


@pytest.mark.parametrize("fmt", ["chat", "responses"])
def test_threads_fitting_one_grown_list_at_once_get_the_plan_of_a_fresh_read(fmt: str) -> None:
    # the list grows between rounds; each round, four threads fit it at the same moment:
    # one of them extends the record kept of it, the others keep records of their own,
    # and every plan is the one a fresh read gives
    forget()
    msgs: list[Any] = [{"role": "system", "content": "Be brief."}]
    for k in range(20):
        msgs += [{"role": "user", "content": f"q {k}"}, {"role": "assistant", "content": "a"}]
    _fit(msgs, fmt)
    for k in range(12):
        msgs += [{"role": "user", "content": f"next {k} " + " ".join(WORDS * (k % 3))}]
        ref = _fit(list(msgs), fmt)
        plans = _fit_at_once(msgs, fmt)
        assert len(plans) == 4
        for plan in plans:
            _same(plan, ref)
        msgs.append({"role": "assistant", "content": f"answer {k}"})


@pytest.mark.parametrize("fmt", ["anthropic", "responses"])
@pytest.mark.parametrize("turns", [1, 3])
@pytest.mark.parametrize("which", [0, 1, 2])
def test_an_item_of_a_grown_turn_edited_in_place_is_read_again(
    fmt: str, turns: int, which: int
) -> None:
    """A list read, grown by a few turns and fitted again (its new items read), then one
    of those new items given a new content in place: the next fit reads it again and
    gives the plan a fresh read gives, whichever of them it was."""
    forget()
    msgs: list[Any] = []
    k = _grown_to(msgs, fmt, 40)
    _fit(msgs, fmt)
    start = len(msgs)
    for _ in range(turns):
        msgs += _fixed_turn(fmt, k)
        k += 1
    _fit(msgs, fmt)
    _edit(msgs, start + which % (len(msgs) - start), "edited " + " ".join(WORDS))
    plan = _fit(msgs, fmt)
    _same(plan, _fit(copy.deepcopy(msgs), fmt))
