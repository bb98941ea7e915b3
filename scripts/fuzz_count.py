"""Fuzz count over the three request formats: fresh random draws, every promise checked.

Reuses the test suite's generators (``tests/test_formats.py``: chat, Anthropic Messages
and Responses requests with every part and block kind; ``tests/test_fuzz.py``: near-valid
junk) and its independent checks, with new random draws on every run (hypothesis's
explore mode, no example database), for as long as the time budget allows. Per format,
each case fits a generated request into a window that holds 5-105% of it, with random
options (``clear_tool_results``, ``cache_stable``, ``policy``, message limits, tools),
and counts:

- **broken promises**: ``input_tokens + max_tokens + safety_margin > window``, or the
  fitted request recounted independently costs more than ``input_tokens``;
- **required dropped**: the system prompt or the current turn not sent, or a
  ``ContextOverflowError`` whose own numbers say the required part fits;
- **invalid**: a fitted request the API would reject (a tool result without its call, an
  Anthropic history that opens with the assistant, ...), checked from each API's rules;
- **mutations** of the caller's messages, system or tools;
- **foreign exceptions**: anything raised that is not a ``TokenflexError``;
- **SDK rejects**: ``plan.request(api=...)`` bodies (the plan's own API and one other)
  that the official SDK's ``*CreateParamsNonStreaming`` type rejects or changes.

Then the near-valid junk of ``tests/test_fuzz.py`` (``fit`` and ``fit_formats``: all
formats, junk tools and state) on fresh seeds: foreign exceptions and broken promises.
Prints a table and exits 1 on any violation; the first cases of each kind are written
to ``--failures`` to reproduce.

    .venv/bin/python scripts/fuzz_count.py --minutes 20
    .venv/bin/python scripts/fuzz_count.py --minutes 1 --failures /tmp/fuzz.jsonl
"""

from __future__ import annotations

import argparse
import copy
import json
import logging
import random
import sys
import time
import traceback
import warnings
from collections import Counter
from pathlib import Path
from typing import Any

from hypothesis import HealthCheck, Phase, given, settings
from hypothesis import strategies as st
from rich.console import Console
from rich.table import Table

# the generators and checks live with the tests
sys.path.insert(0, str(Path(__file__).resolve().parent.parent / "tests"))

import test_formats as tf
import test_fuzz
from test_formats_request import check_body

import tokenflex
from tokenflex import ContextOverflowError, TokenflexError

FORMATS = ("chat", "anthropic", "responses")
KINDS = (
    "broken promise",
    "required dropped",
    "invalid",
    "mutation",
    "foreign exception",
    "SDK rejects",
)
BATCH = 200  # hypothesis examples per call of the property (each call is a fresh draw)
KEEP = 5  # failing cases written per kind and format
JUNK = ("fit", "fit_formats")  # tests/test_fuzz.py's entry points that fit

options = st.fixed_dictionaries(
    {},
    optional={
        "clear_tool_results": st.booleans(),
        "keep_tool_results": st.integers(0, 3),
        "cache_stable": st.booleans(),
        "policy": st.sampled_from(["reserve", "flex"]),
        "history_share": st.sampled_from([0.3, 0.8, 1.0]),
        "min_messages": st.sampled_from([0, 2]),
        "max_messages": st.sampled_from([None, 0, 3]),
        "keep_reasoning": st.booleans(),
        "drop_reasoning": st.booleans(),
        "truncate_tool_results": st.booleans(),
    },
)
shape = st.fixed_dictionaries(
    {
        "share": st.floats(0.05, 1.05),
        "max_tokens": st.sampled_from([16, 64, 500]),
        "min_output_tokens": st.sampled_from([0, 16]),
        "safety_margin": st.sampled_from([0, 8, 100]),
        "tools": st.booleans(),
        "other_api": st.sampled_from(FORMATS),
    }
)


class Tally:
    """Cases run and violations found, per format."""

    def __init__(self, failures: Path | None) -> None:
        self.cases: Counter[str] = Counter()
        self.found: dict[str, Counter[str]] = {f: Counter() for f in (*FORMATS, "junk")}
        self.outcomes: dict[str, Counter[str]] = {f: Counter() for f in (*FORMATS, "junk")}
        self.failures = failures

    def violation(self, fmt: str, kind: str, case: Any, detail: str) -> None:
        self.found[fmt][kind] += 1
        if self.failures is not None and self.found[fmt][kind] <= KEEP:
            with self.failures.open("a") as f:
                row = {"format": fmt, "kind": kind, "detail": detail[-3000:], "case": repr(case)}
                f.write(json.dumps(row) + "\n")


def one_case(tally: Tally, fmt: str, req: Any, opts: dict[str, Any], s: dict[str, Any]) -> None:
    """Fit one generated request and count what it breaks (never raises)."""
    system, msgs = req if fmt != "chat" else (None, req)
    tools = tf.TOOLS[fmt] if s["tools"] else None
    case = {"format": fmt, "system": system, "messages": msgs, "options": opts, **s}
    before = copy.deepcopy((system, msgs, tools))
    try:
        full = tokenflex.fit(msgs, model="gpt-4o", max_tokens=64, system=system, format=fmt)
        margin, out = s["safety_margin"], s["max_tokens"]
        window = max(100, int(full.input_tokens * s["share"]) + out + margin)
        model = tf.MODEL.replace(
            name=f"gpt-4o-w{window}", context_window=window, max_output_tokens=4096
        )
        plan = tokenflex.fit(
            msgs,
            model=model,
            max_tokens=out,
            system=system,
            format=fmt,
            tools=tools,
            min_output_tokens=s["min_output_tokens"],
            safety_margin=margin,
            **opts,
        )
    except ContextOverflowError as exc:
        tally.outcomes[fmt]["overflow"] += 1
        if exc.required_tokens + s["min_output_tokens"] + s["safety_margin"] <= window:
            detail = f"refused, yet required {exc.required_tokens} fits {window}: {exc}"
            tally.violation(fmt, "required dropped", case, detail)
        _mutation(tally, fmt, case, before, (system, msgs, tools))
        return
    except TokenflexError as exc:
        tally.outcomes[fmt][type(exc).__name__] += 1
        _mutation(tally, fmt, case, before, (system, msgs, tools))
        return
    except Exception:
        tally.violation(fmt, "foreign exception", case, traceback.format_exc())
        return
    tally.outcomes[fmt]["fitted" if plan.dropped else "unchanged"] += 1
    _mutation(tally, fmt, case, before, (system, msgs, tools))
    checks = [
        ("broken promise", lambda: _promise(plan, window)),
        ("required dropped", lambda: _required(plan, fmt, system, msgs)),
        ("invalid", lambda: _valid(plan, fmt, msgs)),
        ("SDK rejects", lambda: _sdk(plan, fmt, s["other_api"])),
    ]
    for kind, check in checks:
        try:
            check()
        except Exception:
            tally.violation(fmt, kind, case, traceback.format_exc())


def _mutation(tally: Tally, fmt: str, case: Any, before: Any, after: Any) -> None:
    if before != after:
        tally.violation(fmt, "mutation", case, "the caller's input changed")


def _promise(plan: tokenflex.Plan, window: int) -> None:
    assert plan.context_window == window
    assert plan.input_tokens + plan.max_tokens + plan.safety_margin <= window, (
        plan.input_tokens,
        plan.max_tokens,
        plan.safety_margin,
        window,
    )
    got = tf.recount(plan)
    assert got <= plan.input_tokens, f"recounted {got} > input_tokens {plan.input_tokens}"


def _required(plan: tokenflex.Plan, fmt: str, system: Any, msgs: list[Any]) -> None:
    """The system prompt and the current turn are sent (the current turn as given, or
    with its over-long tool results truncated, listed as such)."""
    if fmt == "chat":
        if msgs[0]["role"] == "system":
            assert plan.messages[0]["content"] == msgs[0]["content"], "system dropped"
    else:
        assert plan.system == system, "system changed"
    last, given = plan.messages[-1], msgs[-1]
    strip = ("reasoning_content",)
    same = {k: v for k, v in last.items() if k not in strip} == {
        k: v for k, v in given.items() if k not in strip
    }
    truncated = {d.index for d in plan.dropped if d.reason == "truncated"}
    assert same or len(msgs) - 1 in truncated, "the current turn is not sent"


def _valid(plan: tokenflex.Plan, fmt: str, msgs: list[Any]) -> None:
    if fmt == "chat":
        tf.check_chat_valid(plan.messages)
    elif fmt == "anthropic":
        tf.check_anthropic_valid(plan.messages)
    else:
        _responses_pairs(plan.messages, msgs)


def _responses_pairs(items: list[dict[str, Any]], given: list[dict[str, Any]]) -> None:
    """Every function_call_output after its call, every answered call with its output
    (tests/test_formats.py's check, without its identity test for reasoning items: with
    tool results cleared, items are copies)."""
    calls = [it["call_id"] for it in items if it.get("type") == "function_call"]
    outputs = [it["call_id"] for it in items if it.get("type") == "function_call_output"]
    answered = {it["call_id"] for it in given if it.get("type") == "function_call_output"}
    seen: set[str] = set()
    for it in items:
        if it.get("type") == "function_call":
            seen.add(it["call_id"])
        if it.get("type") == "function_call_output":
            assert it["call_id"] in seen, f"output {it['call_id']} without its call before it"
    assert set(outputs) == set(calls) & answered, (calls, outputs)


def _sdk(plan: tokenflex.Plan, fmt: str, other: str) -> None:
    for api in dict.fromkeys((fmt, other)):
        try:
            body = plan.request(api=api)
        except TokenflexError:
            assert api != fmt, "the plan's own API refused"
            continue  # e.g. input_audio has no Anthropic or Responses form: refused
        if api == "chat" == fmt:  # keep_reasoning=True sends the caller's own
            body = {**body, "messages": [_no_reasoning(m) for m in body["messages"]]}
        check_body(api, body)


def _no_reasoning(m: dict[str, Any]) -> dict[str, Any]:
    """A chat message without ``reasoning_content``: a field the caller sent (a DeepSeek
    and vLLM extension the openai SDK's types do not know), kept on request."""
    return {k: v for k, v in m.items() if k != "reasoning_content"}


def run_format(tally: Tally, fmt: str, seconds: float) -> None:
    strategy = {
        "chat": tf.chat_requests(),
        "anthropic": tf.anthropic_requests(),
        "responses": tf.responses_requests(),
    }[fmt]

    @settings(
        max_examples=BATCH,
        database=None,
        deadline=None,
        derandomize=False,
        phases=[Phase.generate],
        suppress_health_check=list(HealthCheck),
    )
    @given(strategy, options, shape)
    def prop(req: Any, opts: dict[str, Any], s: dict[str, Any]) -> None:
        tally.cases[fmt] += 1
        one_case(tally, fmt, req, opts, s)

    end = time.monotonic() + seconds
    while time.monotonic() < end:
        prop()


def run_junk(tally: Tally, seconds: float) -> None:
    """tests/test_fuzz.py's near-valid junk for fit() (chat, junk tools and state too)
    and fit() in every format with plan.request(), in turn, on fresh seeds."""
    start = random.SystemRandom().randrange(10**6, 10**12)
    end = time.monotonic() + seconds
    seed = start
    while time.monotonic() < end:
        entry = JUNK[seed % len(JUNK)]
        tally.cases["junk"] += 1
        try:
            got = test_fuzz.run(entry, seed)
            tally.outcomes["junk"][got] += 1
        except AssertionError as exc:
            kind = "broken promise" if "broke its promise" in str(exc) else "foreign exception"
            case = {"entry": entry, "seed": seed}
            tally.violation("junk", kind, case, f"{exc}\n{traceback.format_exc()}")
        seed += 1


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--minutes", type=float, default=20.0, help="wall clock in all (20)")
    ap.add_argument("--junk-share", type=float, default=0.15, help="share of time for junk")
    ap.add_argument("--failures", type=Path, help="write failing cases here (JSON lines)")
    ap.add_argument("--json", action="store_true", help="print the counts as JSON too")
    args = ap.parse_args()
    warnings.simplefilter("ignore")  # the junk's 1e308 arithmetic
    logging.getLogger("tokenflex").addHandler(logging.NullHandler())  # unknown-model notes
    tally = Tally(args.failures)
    total = args.minutes * 60
    started = time.monotonic()
    for fmt in FORMATS:
        run_format(tally, fmt, total * (1 - args.junk_share) / len(FORMATS))
    run_junk(tally, total * args.junk_share)
    elapsed = time.monotonic() - started

    table = Table(title=f"tokenflex fuzz count: fresh random draws, {elapsed / 60:.1f} min")
    for col in ("format", "cases", *KINDS, "outcomes"):
        table.add_column(col, justify="left" if col in ("format", "outcomes") else "right")
    for fmt in (*FORMATS, "junk"):
        outcomes = ", ".join(f"{k} {v:,}" for k, v in tally.outcomes[fmt].most_common())
        name = "near-valid junk (fit, fit_formats)" if fmt == "junk" else fmt
        row = [f"{tally.found[fmt][k]:,}" for k in KINDS]
        table.add_row(name, f"{tally.cases[fmt]:,}", *row, outcomes)
    Console(width=200).print(table)
    violations = sum(sum(c.values()) for c in tally.found.values())
    print(f"{sum(tally.cases.values()):,} cases, {violations} violations")
    if args.json:
        print(json.dumps({"cases": tally.cases, "found": tally.found, "outcomes": tally.outcomes}))
    return 1 if violations else 0


if __name__ == "__main__":
    sys.exit(main())
