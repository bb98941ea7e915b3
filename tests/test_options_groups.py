"""Option groups (issue 23 item 6): a group gives the plan its flat names give, checks
its own fields, and the settings and the proxy config read the same names."""

from __future__ import annotations

import asyncio
import json
from pathlib import Path
from typing import Any

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

import tokenflex
from tokenflex import (
    CacheStable,
    Chunk,
    Conversation,
    Documents,
    ExtractiveSummarizer,
    Fallback,
    History,
    InvalidInputError,
    Prompt,
    Shrink,
    Summarize,
)
from tokenflex.errors import ConfigError
from tokenflex.options import GROUPS, FitOptions
from tokenflex.server.config import ServerConfig
from tokenflex.settings import get_settings
from tokenflex.state import MemoryStore

MODEL = tokenflex.Model("groups-2k", 2048, tokenizer="o200k_base", chat_format="openai")


def words(n: int, seed: int) -> str:
    return " ".join(f"w{(seed * 31 + i) % 97}" for i in range(n))


def agent(turns: int) -> list[dict[str, Any]]:
    """A system prompt, a task, then tool rounds (with reasoning) and chat turns."""
    msgs: list[dict[str, Any]] = [
        {"role": "system", "content": "You are an agent."},
        {"role": "user", "content": "Do the task. " + words(20, 0)},
    ]
    for t in range(turns):
        call = {"id": f"c{t}", "type": "function"}
        call["function"] = {"name": "read_file" if t % 3 else "grep", "arguments": "{}"}
        msgs.append(
            {
                "role": "assistant",
                "content": "",
                "tool_calls": [call],
                "reasoning_content": words(9, t),
            }
        )
        msgs.append({"role": "tool", "tool_call_id": f"c{t}", "content": words(60 + 13 * t, t)})
        if t % 4 == 3:
            msgs.append({"role": "user", "content": "Go on. " + words(10, t)})
    return msgs


def shape(plan: tokenflex.Plan) -> tuple[Any, ...]:
    """What a plan sends and what it says it left out (not its timing)."""
    dropped = [(d.section, d.index, d.tokens, d.reason) for d in plan.dropped]
    summary = None if plan.summary is None else plan.summary.text
    return (plan.messages, plan.max_tokens, plan.input_tokens, plan.model.name, dropped, summary)


# -- each group's fields, with values to draw ------------------------------------------------

FIELDS: dict[type[Any], dict[str, st.SearchStrategy[Any]]] = {
    History: {
        "share": st.sampled_from([0.3, 0.6, 1.0]),
        "min_messages": st.integers(0, 3),
        "max_messages": st.none() | st.integers(1, 8),
        "pin": st.integers(0, 2),
        "cut_note": st.booleans(),
    },
    Shrink: {
        "clear_tool_results": st.booleans(),
        "keep_tool_results": st.integers(0, 4),
        "keep_tools": st.sampled_from([(), ("read_file",), ["grep"]]),
        "drop_reasoning": st.booleans(),
        "truncate_tool_results": st.booleans(),
        "steps": st.none() | st.sampled_from([(), ("reasoning", "clear"), ["truncate"]]),
    },
    Documents: {
        "cap": st.none() | st.integers(0, 400),
        "policy": st.sampled_from(["skip", "stop", "optimal"]),
        "format": st.sampled_from(["markdown", "xml"]),
        "safety_buffer": st.integers(0, 80),
    },
    Summarize: {
        "keep_recent": st.integers(0, 6),
        "max_tokens": st.integers(16, 200),
        "facts": st.booleans(),
    },
    CacheStable: {"low_water": st.sampled_from(["auto", 0.4, 0.9])},
    Fallback: {"input_share": st.none() | st.sampled_from([0.5, 0.95])},
}


FLAT = {
    ("History", "share"): "history_share",
    ("History", "min_messages"): "min_messages",
    ("History", "max_messages"): "max_messages",
    ("History", "pin"): "pin",
    ("History", "cut_note"): "cut_note",
    ("Shrink", "clear_tool_results"): "clear_tool_results",
    ("Shrink", "keep_tool_results"): "keep_tool_results",
    ("Shrink", "keep_tools"): "keep_tools",
    ("Shrink", "drop_reasoning"): "drop_reasoning",
    ("Shrink", "truncate_tool_results"): "truncate_tool_results",
    ("Shrink", "steps"): "shrink_steps",
    ("Documents", "cap"): "documents_cap",
    ("Documents", "policy"): "documents_policy",
    ("Documents", "format"): "documents_format",
    ("Documents", "safety_buffer"): "documents_safety_buffer",
    ("Summarize", "keep_recent"): "keep_recent",
    ("Summarize", "max_tokens"): "summary_max_tokens",
    ("Summarize", "facts"): "summary_facts",
    ("CacheStable", "low_water"): "low_water",
    ("Fallback", "input_share"): "fallback_input_share",
}
"""The flat name of each group field, as the docs give it (the reference's spelling)."""


@st.composite
def group_calls(draw: st.DrawFn) -> tuple[dict[str, Any], dict[str, Any]]:
    """fit() keywords with groups, and the same call with flat names (the reference)."""
    grouped: dict[str, Any] = {}
    flat: dict[str, Any] = {}
    for group, fields in FIELDS.items():
        if not draw(st.booleans()):
            continue
        chosen = draw(st.sets(st.sampled_from(sorted(fields))))
        values = {f: draw(fields[f]) for f in sorted(chosen)}
        args: list[Any] = []
        if group is Documents:
            chunks = [Chunk(words(30 + 20 * i, i), source=f"doc{i}") for i in range(4)]
            args, flat["documents"] = [chunks], chunks
        elif group is Summarize:
            s = ExtractiveSummarizer()
            args, flat["summarizer"] = [s], s
        elif group is Fallback:
            args, flat["fallback_models"] = [["gpt-4o-mini"]], ("gpt-4o-mini",)
        elif group is CacheStable:
            flat["cache_stable"] = True
        grouped[group.keyword] = group(*args, **values)
        # the reference spells every field by its FitOptions name, written out here
        flat.update((FLAT[group.__name__, f], v) for f, v in values.items())
    return grouped, flat


@settings(max_examples=40, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(calls=group_calls(), turns=st.integers(2, 16), max_tokens=st.sampled_from([None, 300]))
def test_a_group_gives_the_plan_of_its_flat_names(
    calls: tuple[dict[str, Any], dict[str, Any]], turns: int, max_tokens: int | None
) -> None:
    grouped, flat = calls
    msgs = agent(turns)

    def plan(**kw: Any) -> Any:
        try:
            return shape(
                tokenflex.fit(msgs, model=MODEL, max_tokens=max_tokens, state=MemoryStore(), **kw)
            )
        except tokenflex.ContextOverflowError as exc:
            return str(exc)

    assert plan(**grouped) == plan(**flat)


def test_the_plain_forms_are_the_groups() -> None:
    msgs = agent(10)
    chunks = [Chunk(words(50, i), source=f"d{i}") for i in range(3)]
    s = ExtractiveSummarizer()
    pairs = [
        ({"documents": chunks}, {"documents": Documents(chunks)}),
        ({"summarize": s}, {"summarize": Summarize(s)}),
        ({"summarizer": s}, {"summarize": Summarize(s)}),
        ({"cache": True}, {"cache": CacheStable()}),
        ({"cache": False}, {"cache_stable": False}),
        ({"fallback": ["gpt-4o-mini"]}, {"fallback": Fallback(["gpt-4o-mini"])}),
        ({"history": History(msgs[2:])}, {"history": msgs[2:]}),
    ]
    for plain, group in pairs:
        base = msgs[:2] if "history" in plain else msgs
        a = tokenflex.fit(base, model=MODEL, max_tokens=300, state=MemoryStore(), **plain)
        b = tokenflex.fit(base, model=MODEL, max_tokens=300, state=MemoryStore(), **group)
        assert shape(a) == shape(b), plain


def test_conversation_and_prompt_take_the_groups() -> None:
    msgs = agent(12)
    by_group = Conversation(msgs, model=MODEL, shrink=Shrink(clear_tool_results=True), cache=False)
    by_name = Conversation(msgs, model=MODEL, clear_tool_results=True, cache_stable=False)
    assert shape(by_group.fit(max_tokens=300)) == shape(by_name.fit(max_tokens=300))
    assert by_group.options == by_name.options
    # a group given to fit() sets the fields it was given, over the Conversation's own
    over = by_group.fit(max_tokens=300, shrink=Shrink(drop_reasoning=True))
    assert shape(over) == shape(by_name.fit(max_tokens=300, drop_reasoning=True))
    assert Conversation(model=MODEL).options["cache_stable"] is True  # its default stays

    # a Conversation's summarizer is used by every fit that gives none
    s = ExtractiveSummarizer()
    kept = Conversation(msgs, model=MODEL, summarize=Summarize(s, keep_recent=2), cache=False)
    given = Conversation(msgs, model=MODEL, keep_recent=2, cache_stable=False)
    plan = kept.fit(max_tokens=300)
    assert plan.summary is not None
    assert shape(plan) == shape(given.fit(max_tokens=300, summarizer=s))

    def prompt(**kw: Any) -> Any:
        p = Prompt(MODEL, max_tokens=300, **kw)
        p.add("history", msgs[1:], shrink="summarize")
        return shape(p.fit())

    assert prompt(summarize=Summarize(s, keep_recent=2)) == shape(
        Prompt(MODEL, max_tokens=300, keep_recent=2)
        .add("history", msgs[1:], shrink="summarize")
        .fit(summarizer=s)
    )


def test_afit_takes_the_groups() -> None:
    msgs = agent(12)
    kw: dict[str, Any] = {"model": MODEL, "max_tokens": 300}
    grouped = asyncio.run(
        tokenflex.afit(msgs, shrink=Shrink(clear_tool_results=True), fallback=["gpt-4o"], **kw)
    )
    flat = tokenflex.fit(msgs, clear_tool_results=True, fallback_models=["gpt-4o"], **kw)
    assert shape(grouped) == shape(flat)


@pytest.mark.parametrize(
    ("make", "needle"),
    [
        pytest.param(
            lambda: Shrink(keep_tool_results=-1),
            "Shrink(keep_tool_results=-1) is not valid: keep_tool_results must be an int >= 0",
            id="shrink-negative",
        ),
        pytest.param(
            lambda: History(share=2.0),
            "History(share=2.0) is not valid: share must be a number in (0, 1]",
            id="history-share",
        ),
        pytest.param(
            lambda: Documents(policy="best"),
            "Documents(policy='best') is not valid: policy must be one of 'skip', 'stop', "
            "'optimal'",
            id="documents-policy",
        ),
        pytest.param(
            lambda: Documents("not chunks"),
            "chunks must be a list of tokenflex.Chunk",
            id="documents-str",
        ),
        pytest.param(
            lambda: Fallback("gpt-4o-mini"),
            "Fallback(models='gpt-4o-mini') is not valid: models must be a list of model names",
            id="fallback-str",
        ),
        pytest.param(
            lambda: CacheStable(low_water=0),
            'CacheStable(low_water=0) is not valid: low_water must be "auto" or a number',
            id="low-water",
        ),
        pytest.param(
            lambda: Summarize(max_tokens=0),
            "Summarize(max_tokens=0) is not valid: max_tokens must be a positive int",
            id="summary-tokens",
        ),
        pytest.param(
            lambda: Summarize(object()),
            "summarizer must have a summarize(messages, previous_summary=, max_tokens=) method",
            id="summarizer-object",
        ),
        pytest.param(
            lambda: Shrink(keep_tools=["read_file", ""]),
            "keep_tools must be a list of tool names",
            id="keep-tools-empty",
        ),
    ],
)
def test_a_bad_group_value_names_the_group_the_field_and_the_fix(make: Any, needle: str) -> None:
    with pytest.raises(InvalidInputError) as info:
        make()
    assert needle in str(info.value)


MSGS = [{"role": "user", "content": "hi"}]


@pytest.mark.parametrize(
    ("kw", "needles"),
    [
        pytest.param(
            {"shrink": Shrink(drop_reasoning=True), "drop_reasoning": False},
            ["drop_reasoning=False", "Shrink(drop_reasoning=...)"],
            id="flat-and-group",
        ),
        pytest.param(
            {"cache": True, "cache_stable": False}, ["cache_stable=False", "cache=True"], id="cache"
        ),
        pytest.param(
            {"history": History(share=0.5), "history_share": 0.5},
            ["history_share=0.5", "History(share=...)"],
            id="same-value",
        ),
        pytest.param(
            {"summarize": Summarize(ExtractiveSummarizer()), "summarizer": ExtractiveSummarizer()},
            ["summarizer=", "Summarize(summarizer=...)"],
            id="two-summarizers",
        ),
        pytest.param(
            {"shrink": {"clear_tool_results": True}}, ["shrink=", "tokenflex.Shrink("], id="dict"
        ),
        pytest.param({"fallback": "gpt-4o-mini"}, ["fallback=['gpt-4o-mini']"], id="fallback-str"),
        pytest.param({"cache": "yes"}, ["cache='yes'", "True / False"], id="cache-str"),
        pytest.param({"history": Shrink()}, ["history=Shrink()", "History"], id="wrong-group"),
    ],
)
def test_a_flat_name_beside_its_group_or_a_wrong_group_is_refused(
    kw: dict[str, Any], needles: list[str]
) -> None:
    with pytest.raises(InvalidInputError) as info:
        tokenflex.fit(MSGS, model=MODEL, **kw)
    assert all(n in str(info.value) for n in needles), str(info.value)


def test_only_fit_reads_a_history_source() -> None:
    with pytest.raises(InvalidInputError, match=r"History\(source=\.\.\.\)"):
        Conversation(model=MODEL, history=History(MSGS))
    with pytest.raises(InvalidInputError, match=r"Shrink\(truncate_tool_results=\.\.\.\)"):
        Prompt(MODEL, shrink=Shrink(truncate_tool_results=False))


def test_the_groups_cover_fit_options_once() -> None:
    """Each FitOptions field belongs to at most one group; the ones in none are the
    budget's own (and max_tokens, a keyword)."""
    owned = [n for g in GROUPS for n in g.flat.values()] + ["cache_stable"]
    assert len(owned) == len(set(owned))
    names = {f for f in FitOptions.__dataclass_fields__}
    rest = names - set(owned)
    assert rest == {
        "max_tokens",
        "policy",
        "min_output_tokens",
        "safety_margin",
        "max_input_tokens",
        "strict",
    }
    for g in GROUPS:  # a group's default is its FitOptions field's
        for field, name in g.flat.items():
            assert (
                g.__dataclass_fields__[field].default
                == FitOptions.__dataclass_fields__[name].default
            )


# -- settings and the proxy config: the same names ---------------------------------------------

VALUES: list[tuple[str, str, Any]] = [
    ("history", "min_messages", 2),
    ("history", "max_messages", 7),
    ("history", "pin", 0),
    ("history", "page_size", 20),
    ("history", "cut_note", True),
    ("documents", "cap", 900),
    ("documents", "policy", "optimal"),
    ("documents", "format", "xml"),
    ("documents", "safety_buffer", 10),
    ("summarize", "facts", False),
    ("shrink", "clear_tool_results", True),
    ("shrink", "keep_tool_results", 1),
    ("shrink", "keep_tools", ["read_file", "grep"]),
    ("shrink", "drop_reasoning", True),
    ("shrink", "truncate_tool_results", False),
    ("shrink", "steps", ["reasoning", "clear"]),
    ("cache", "low_water", 0.5),
    ("fallback", "models", ["gpt-4o-mini"]),
    ("fallback", "input_share", 0.9),
]


def _group(keyword: str) -> Any:
    return next(g for g in GROUPS if g.keyword == keyword)


def _as_option(value: Any) -> Any:
    return tuple(value) if isinstance(value, list) else value


def test_every_group_is_a_setting_and_every_field_is_drawn() -> None:
    from tokenflex.settings import Settings

    assert {g.keyword for g in GROUPS} <= set(Settings.model_fields)
    drawn = {(k, f) for k, f, _ in VALUES} | {
        ("history", "share"),  # (the older flat settings, tested below)
        ("summarize", "keep_recent"),
        ("summarize", "max_tokens"),
    }
    assert drawn == {(g.keyword, f) for g in GROUPS for f in g.flat}
    assert repr(Shrink(keep_tools=["a"])) == "Shrink(keep_tools=('a',))"


@pytest.mark.parametrize(("keyword", "field", "value"), VALUES)
def test_settings_read_each_group_field_from_env_and_code(
    monkeypatch: pytest.MonkeyPatch, keyword: str, field: str, value: Any
) -> None:
    name = _group(keyword).flat[field]
    raw = value if isinstance(value, str) else json.dumps(value)
    monkeypatch.setenv(f"TOKENFLEX_{keyword.upper()}__{field.upper()}", raw)
    from_env = get_settings().fit_options()
    assert from_env[name] == _as_option(value)
    monkeypatch.delenv(f"TOKENFLEX_{keyword.upper()}__{field.upper()}")
    from_code = get_settings(**{keyword: {field: value}}).fit_options()
    assert from_code == from_env
    if keyword == "cache":
        assert from_env["cache_stable"] is True
    if keyword == "documents":
        return  # (settings carry no chunks)
    # the settings' options are fit()'s: the same plan as the group and the rest flat
    rest = {k: v for k, v in from_env.items() if k not in (name, "cache_stable")}
    by_group = {keyword: _group(keyword)(**{field: value})}
    a = tokenflex.fit(agent(6), model=MODEL, state=MemoryStore(), **from_env)
    b = tokenflex.fit(agent(6), model=MODEL, state=MemoryStore(), **rest, **by_group)
    assert shape(a) == shape(b)


def test_settings_keep_the_older_flat_names(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("TOKENFLEX_HISTORY__SHARE", "0.5")
    monkeypatch.setenv("TOKENFLEX_SUMMARIZE__KEEP_RECENT", "3")
    s = get_settings(summarize={"max_tokens": 100})
    assert (s.history_share, s.keep_recent_messages, s.summary_max_tokens) == (0.5, 3, 100)
    monkeypatch.setenv("TOKENFLEX_KEEP_RECENT_MESSAGES", "4")
    with pytest.raises(ConfigError, match=r"summarize\.keep_recent and keep_recent_messages"):
        get_settings()
    monkeypatch.delenv("TOKENFLEX_KEEP_RECENT_MESSAGES")
    monkeypatch.setenv("TOKENFLEX_CACHE", "false")
    assert get_settings().fit_options()["cache_stable"] is False


@pytest.mark.parametrize(
    ("env", "needle"),
    [
        pytest.param(
            ("TOKENFLEX_SHRINK__KEEP_TOOL_RESULTS", "-1"),
            "Shrink(keep_tool_results=-1) is not valid",
            id="bad-value",
        ),
        pytest.param(
            ("TOKENFLEX_SHRINK__CLEAR_TOOL_RESULT", "true"),
            "'clear_tool_result' (did you mean 'clear_tool_results'?)",
            id="unknown-field",
        ),
        pytest.param(
            ("TOKENFLEX_HISTORY__SHARE", "2"),
            "history_share='2': Input should be less than or equal to 1",
            id="old-name",
        ),
    ],
)
def test_settings_errors_name_the_group_and_field(
    monkeypatch: pytest.MonkeyPatch, env: tuple[str, str], needle: str
) -> None:
    monkeypatch.setenv(*env)
    with pytest.raises(ConfigError) as info:
        get_settings()
    assert needle in str(info.value)


def test_proxy_config_takes_group_tables(tmp_path: Path) -> None:
    toml = tmp_path / "proxy.toml"
    lines = ['upstream = "http://127.0.0.1:1"', "[fit]", "safety_margin = 64"]
    for keyword, field, value in VALUES:
        if keyword not in ("documents", "fallback"):
            lines.append(f"{keyword}.{field} = {json.dumps(value)}")
    lines += ['[models."m".fallback]', 'models = ["gpt-4o-mini"]', "input_share = 0.9"]
    lines += ["[routes.r.summarize]", "keep_recent = 2"]
    toml.write_text("\n".join(lines) + "\n")
    config = ServerConfig.load(toml)
    merged = config.options_for("m", "r")
    for keyword, field, value in VALUES:
        if keyword != "documents":
            assert merged[_group(keyword).flat[field]] == _as_option(value), field
    assert merged["cache_stable"] is True and merged["summarize"] is True
    assert merged["keep_recent"] == 2 and merged["safety_margin"] == 64
    FitOptions.from_kwargs(
        {k: v for k, v in merged.items() if k in FitOptions.__dataclass_fields__}
    )


@pytest.mark.parametrize(
    ("table", "needle"),
    [
        pytest.param(
            "clear_tool_results = false\n[fit.shrink]\nclear_tool_results = true",
            "clear_tool_results and shrink.clear_tool_results set the same option",
            id="both",
        ),
        pytest.param(
            "[fit.shrink]\nkeep_tool_results = -1", "Shrink(keep_tool_results=-1)", id="bad"
        ),
        pytest.param("[fit.history]\nshares = 0.5", "did you mean 'share'?", id="unknown"),
        pytest.param("cache = 3", "cache must be a table of CacheStable fields", id="cache"),
    ],
)
def test_proxy_config_group_errors(tmp_path: Path, table: str, needle: str) -> None:
    toml = tmp_path / "proxy.toml"
    toml.write_text('upstream = "http://127.0.0.1:1"\n[fit]\n' + table + "\n")
    with pytest.raises(ConfigError) as info:
        ServerConfig.load(toml)
    assert needle in str(info.value)


def test_a_calls_groups_are_named_as_the_registry_names_them() -> None:
    # fit(), afit() and Conversation read their group keywords through given_groups: its
    # names and order are GROUPS', and a call that gives none builds nothing
    from tokenflex.options import GROUPS, given_groups

    assert given_groups(None, None, None, None, None, None) is None
    given = given_groups(*range(1, 7))
    assert given is not None
    assert list(given) == [g.keyword for g in GROUPS]
    assert list(given.values()) == list(range(1, 7))
    for i in range(6):  # any one group given is enough
        args: list[object] = [None] * 6
        args[i] = True
        assert given_groups(*args) is not None
