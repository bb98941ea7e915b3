from __future__ import annotations

import itertools
import json
import logging
import math

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from tokenflex import get_model
from tokenflex.documents import Chunk, pack_chunks
from tokenflex.documents.render import chunk_parts, context_frame, omitted_notice
from tokenflex.errors import InvalidInputError
from tokenflex.tokenizers import CountCache, get_tokenizer


class Chars:
    """One token per character: perfectly additive, so costs are easy to reason about."""

    name = "chars"
    exact = True

    def count(self, text: str) -> int:
        return len(text)


CHARS = CountCache(Chars())

# --- strategies ----------------------------------------------------------------------

_texts = st.text(alphabet=st.characters(blacklist_categories=("Cs",)), min_size=0, max_size=120)
_words = st.sampled_from(
    ["alpha", "beta", "gamma", "  ", "\n", "数据", "def f(x):", '{"k": 1}', "ü", "123"]
)
_prose = st.lists(_words, max_size=40).map(" ".join)
_chunk = st.builds(
    Chunk,
    text=st.one_of(_prose, _texts),
    source=st.one_of(st.just(""), st.sampled_from(["Wiki", "Docs", "Web"])),
    identifier=st.one_of(st.just(""), st.sampled_from(["https://a.org/1", "https://b.org/2"])),
    extras=st.dictionaries(st.sampled_from(["page", "lang", "t"]), st.integers(0, 999), max_size=2),
    score=st.one_of(st.none(), st.floats(-1, 1, allow_nan=False), st.sampled_from([0.5, 0.5])),
    id=st.one_of(st.none(), st.uuids().map(str)),
)
_chunks = st.lists(_chunk, max_size=25).flatmap(
    # Repeat some chunks to exercise duplicate handling.
    lambda cs: (
        st.lists(st.sampled_from(cs), max_size=5).map(lambda extra: cs + extra)
        if cs
        else st.just(cs)
    )
)


def rank_order(chunks: list[Chunk]) -> list[int]:
    return sorted(
        range(len(chunks)),
        key=lambda i: (chunks[i].score is None, -(chunks[i].score or 0.0), i),
    )


def reference_cost(chunk: Chunk, n_unique: int, fmt: str, tok: CountCache) -> int:
    wide = "9" * len(str(max(n_unique, 1)))
    return sum(tok.count(p) for p in chunk_parts(fmt, wide, chunk))


def check_invariants(chunks: list[Chunk], r, tok: CountCache) -> None:  # type: ignore[no-untyped-def]
    limit = r.budget - r.safety_buffer
    # The promise, checked independently: the whole rendered context, counted again.
    recount = tok.tokenizer.count(r.rendered) if r.rendered else 0
    assert recount == r.tokens <= limit
    assert r.admitted_tokens + r.safety_buffer <= r.budget
    # Nothing cut: every admitted chunk's text and citation appear whole.
    for c in r.admitted:
        assert c.text in r.rendered
        assert c.source in r.rendered and c.identifier in r.rendered
        if c.extras:
            meta = json.dumps(dict(c.extras), sort_keys=True, separators=(",", ":"))
            assert meta in r.rendered
    # Every input is accounted for exactly once.
    dropped_idx = [d.index for d in r.dropped]
    assert sorted([*r.admitted_indices, *dropped_idx]) == list(range(len(chunks)))
    assert dropped_idx == sorted(dropped_idx)
    assert r.dropped_count == len(r.dropped)
    assert r.dropped_tokens == sum(d.tokens or 0 for d in r.dropped)
    assert r.admitted_tokens == sum(r.admitted_costs)
    # Duplicates: exactly the chunks whose (text, identifier) a higher-ranked one has.
    seen: set[tuple[str, str]] = set()
    dup: set[int] = set()
    for i in rank_order(chunks):
        key = (chunks[i].text, chunks[i].identifier)
        if key in seen:
            dup.add(i)
        seen.add(key)
    assert {d.index for d in r.dropped if d.reason == "duplicate"} == dup
    n_unique = len(chunks) - len(dup)
    # Costs are exactly what the rendered envelope costs.
    for d in r.dropped:
        # policy "stop" counts only as far as it must: a stopped chunk may be uncounted
        if d.tokens is None:
            assert r.policy == "stop" and d.reason == "stopped"
            continue
        assert d.tokens == reference_cost(chunks[d.index], n_unique, r.format, tok)
        assert d.id == chunks[d.index].id and d.score == chunks[d.index].score
    for i, t in zip(r.admitted_indices, r.admitted_costs, strict=True):
        assert t == reference_cost(chunks[i], n_unique, r.format, tok)
    # Render order is rank order.
    ranks = {i: k for k, i in enumerate(rank_order(chunks))}
    assert [ranks[i] for i in r.admitted_indices] == sorted(ranks[i] for i in r.admitted_indices)
    # The model is told when the context is partial, with the exact numbers.
    omitted = r.omitted_count
    assert omitted == n_unique - len(r.admitted)
    notice = f"{omitted} of {n_unique} retrieved passages omitted to fit the budget."
    if omitted and r.rendered:
        assert r.rendered.count(notice) == 1 and r.partial
    if not omitted:
        assert not r.partial
        assert not r.rendered.startswith(("Note:", "<notice>"))


# --- the ADR property test -------------------------------------------------------------


@settings(max_examples=300, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(
    chunks=_chunks,
    budget=st.integers(0, 1500),
    buffer=st.integers(0, 100),
    policy=st.sampled_from(["skip", "stop", "optimal"]),
    fmt=st.sampled_from(["markdown", "xml"]),
)
def test_property_estimate(
    chunks: list[Chunk], budget: int, buffer: int, policy: str, fmt: str
) -> None:
    budget = max(budget, buffer)
    tok = get_tokenizer("estimate")
    r = pack_chunks(
        chunks, budget=budget, safety_buffer=buffer, policy=policy, format=fmt, tokenizer=tok
    )  # type: ignore[arg-type]
    check_invariants(chunks, r, tok)
    again = pack_chunks(
        chunks, budget=budget, safety_buffer=buffer, policy=policy, format=fmt, tokenizer=tok
    )  # type: ignore[arg-type]
    assert again.to_dict() == r.to_dict()


@settings(max_examples=120, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(
    chunks=_chunks,
    budget=st.integers(0, 1200),
    policy=st.sampled_from(["skip", "stop", "optimal"]),
    fmt=st.sampled_from(["markdown", "xml"]),
)
def test_property_o200k(chunks: list[Chunk], budget: int, policy: str, fmt: str) -> None:
    """With a real BPE tokenizer: the whole rendered context, recounted, fits."""
    budget = max(budget, 64)
    tok = get_tokenizer("o200k_base")
    r = pack_chunks(chunks, budget=budget, policy=policy, format=fmt, tokenizer=tok)  # type: ignore[arg-type]
    check_invariants(chunks, r, tok)


def test_skip_dropped_chunks_really_did_not_fit() -> None:
    tok = get_tokenizer("estimate")
    chunks = [
        Chunk(f"{i} " + "word " * (7 * i % 40 + 1), f"S{i}", score=(i * 13 % 17) / 17)
        for i in range(60)
    ]
    r = pack_chunks(chunks, budget=900, tokenizer=tok)
    n = len(chunks)
    room = (
        r.limit
        - sum(tok.count(p) for p in context_frame("markdown"))
        - tok.count(omitted_notice("markdown", n, n))
    )
    left = room - r.admitted_tokens
    assert r.dropped and all(d.reason == "budget" and d.tokens > left for d in r.dropped)


# --- policies as named -------------------------------------------------------------------


def _costs(chunks: list[Chunk], fmt: str = "markdown") -> list[int]:
    """Each chunk's cost, in input order."""
    r = pack_chunks(chunks, budget=10**9, tokenizer=CHARS, format=fmt)  # type: ignore[arg-type]
    by_index = dict(zip(r.admitted_indices, r.admitted_costs, strict=True))
    return [by_index[i] for i in range(len(chunks))]


def _room_budget(chunks: list[Chunk], room: int, fmt: str = "markdown") -> int:
    n = len(chunks)
    fixed = sum(CHARS.count(p) for p in context_frame(fmt)) + CHARS.count(omitted_notice(fmt, n, n))
    return room + fixed


@pytest.fixture
def three() -> list[Chunk]:
    # Costs (chars tokenizer, markdown) are text + 25: A=160, B=130, C=115.
    return [
        Chunk("a" * 135, score=0.9, id="A"),
        Chunk("b" * 105, score=0.8, id="B"),
        Chunk("c" * 90, score=0.75, id="C"),
    ]


def test_fixture_costs(three: list[Chunk]) -> None:
    assert _costs(three) == [160, 130, 115]


@pytest.mark.parametrize(
    ("policy", "admitted", "reasons"),
    [
        pytest.param("skip", ["A"], {"B": "budget", "C": "budget"}, id="skip-continues"),
        pytest.param("stop", ["A"], {"B": "budget", "C": "stopped"}, id="stop-at-first-miss"),
        pytest.param("optimal", ["B", "C"], {"A": "budget"}, id="optimal-max-score"),
    ],
)
def test_policies(
    three: list[Chunk], policy: str, admitted: list[str], reasons: dict[str, str]
) -> None:
    r = pack_chunks(
        three, budget=_room_budget(three, 250), safety_buffer=0, tokenizer=CHARS, policy=policy
    )  # type: ignore[arg-type]
    assert [c.id for c in r.admitted] == admitted
    assert {d.id: d.reason for d in r.dropped} == reasons


def test_skip_continues_past_a_miss() -> None:
    chunks = [
        Chunk("a" * 35, score=0.9, id="A"),
        Chunk("b" * 75, score=0.8, id="B"),
        Chunk("c" * 15, score=0.7, id="C"),
    ]
    kw = {"budget": _room_budget(chunks, 100), "safety_buffer": 0, "tokenizer": CHARS}
    assert [c.id for c in pack_chunks(chunks, **kw).admitted] == ["A", "C"]  # type: ignore[arg-type]
    stop = pack_chunks(chunks, policy="stop", **kw)  # type: ignore[arg-type]
    assert [c.id for c in stop.admitted] == ["A"]
    assert [d.reason for d in stop.dropped] == ["budget", "stopped"]


def test_rank_ties_keep_input_order_and_none_scores_last() -> None:
    chunks = [
        Chunk("x1", id="none"),
        Chunk("x2", score=0.5, id="first"),
        Chunk("x3", score=0.5, id="second"),
        Chunk("x4", score=0.9, id="best"),
    ]
    r = pack_chunks(chunks, budget=10_000, tokenizer=CHARS)
    assert [c.id for c in r.admitted] == ["best", "first", "second", "none"]
    assert r.rendered.index("[1] x4") < r.rendered.index("[4] x1")


def test_everything_fits_no_notice_and_all_scores_kept() -> None:
    chunks = [Chunk("neg", score=-3.0), Chunk("pos", score=1.0)]
    for policy in ("skip", "stop", "optimal"):
        r = pack_chunks(chunks, budget=10_000, policy=policy)  # type: ignore[arg-type]
        assert len(r.admitted) == 2 and not r.partial and "omitted" not in r.rendered


# --- optimal: knapsack against brute force ------------------------------------------------


def _brute_force(costs: list[int], values: list[float], room: int) -> float:
    best = 0.0
    for k in range(len(costs) + 1):
        for subset in itertools.combinations(range(len(costs)), k):
            if sum(costs[i] for i in subset) <= room:
                best = max(best, math.fsum(values[i] for i in subset))
    return best


@settings(max_examples=150, deadline=None)
@given(
    sizes=st.lists(st.integers(1, 60), min_size=1, max_size=12),
    scores=st.lists(st.floats(0, 1, allow_nan=False), min_size=12, max_size=12),
    room=st.integers(0, 300),
    fmt=st.sampled_from(["markdown", "xml"]),
)
def test_optimal_matches_brute_force(
    sizes: list[int], scores: list[float], room: int, fmt: str
) -> None:
    chunks = [Chunk("z" * s + str(i), score=scores[i], id=str(i)) for i, s in enumerate(sizes)]
    costs = _costs(chunks, fmt)
    budget = _room_budget(chunks, room, fmt)
    r = pack_chunks(
        chunks, budget=budget, safety_buffer=0, tokenizer=CHARS, policy="optimal", format=fmt
    )  # type: ignore[arg-type]
    got = math.fsum(c.score or 0.0 for c in r.admitted)
    if sum(costs) + sum(CHARS.count(p) for p in context_frame(fmt)) <= budget:
        assert len(r.admitted) == len(chunks)  # everything fits
    else:
        assert got == pytest.approx(_brute_force(costs, scores[: len(chunks)], room), abs=1e-9)
        assert r.knapsack == "exact"
    assert r.tokens <= budget


@pytest.mark.parametrize("pure", [False, True], ids=["numpy", "pure-python"])
def test_optimal_scaled_never_over_budget_and_beats_skip(
    monkeypatch: pytest.MonkeyPatch, pure: bool
) -> None:
    from tokenflex.documents import packing

    monkeypatch.setattr(packing, "_FORCE_PURE", pure)
    monkeypatch.setattr(packing, "_MAX_DP_CELLS", 2_000)
    monkeypatch.setattr(packing, "_MAX_DP_CELLS_PURE", 2_000)
    chunks = [
        Chunk("w" * ((i * 37) % 90 + 5), score=((i * 53) % 97) / 97, id=str(i)) for i in range(80)
    ]
    budget = 1_500
    opt = pack_chunks(chunks, budget=budget, tokenizer=CHARS, policy="optimal")
    skip = pack_chunks(chunks, budget=budget, tokenizer=CHARS, policy="skip")
    assert opt.knapsack.startswith("approximate")
    assert opt.tokens <= budget - 64
    assert math.fsum(c.score or 0 for c in opt.admitted) >= math.fsum(
        c.score or 0 for c in skip.admitted
    )


def test_pure_python_table_matches_numpy(monkeypatch: pytest.MonkeyPatch) -> None:
    from tokenflex.documents import packing

    chunks = [Chunk("q" * ((i * 29) % 50 + 3), score=((i * 7) % 11) / 11) for i in range(40)]
    a = pack_chunks(chunks, budget=700, tokenizer=CHARS, policy="optimal")
    monkeypatch.setattr(packing, "_FORCE_PURE", True)
    b = pack_chunks(chunks, budget=700, tokenizer=CHARS, policy="optimal")
    assert a.admitted_indices == b.admitted_indices


def test_optimal_unscored_fill_in_rank_order() -> None:
    chunks = [Chunk("a" * 70, id="a"), Chunk("b" * 70, id="b"), Chunk("c" * 70, id="c")]
    r = pack_chunks(
        chunks,
        budget=_room_budget(chunks, 200),
        safety_buffer=0,
        tokenizer=CHARS,
        policy="optimal",
    )
    assert [c.id for c in r.admitted] == ["a", "b"]


# --- ADR rows: 5 and 500 chunks ------------------------------------------------------------


@pytest.mark.parametrize(
    ("n", "words", "partial"),
    [
        pytest.param(5, 40, False, id="adr-5-chunks-all-fit"),
        pytest.param(500, 120, True, id="adr-500-chunks-budget-respected"),
    ],
)
@pytest.mark.parametrize("tokenizer", ["estimate", "o200k_base"])
def test_adr_rows(n: int, words: int, partial: bool, tokenizer: str) -> None:
    vocab = ["retrieval", "context", "budget", "token", "citation", "graph", "vector", "web"]
    chunks = [
        Chunk(
            " ".join(vocab[(i * 3 + k) % len(vocab)] for k in range(words)),
            source=f"provider-{i % 3}",
            identifier=f"https://example.org/doc/{i}",
            extras={"rank": i, "provider": ["graph", "vector", "web"][i % 3]},
            score=1 - i / n,
            id=f"chunk-{i}",
        )
        for i in range(n)
    ]
    tok = get_tokenizer(tokenizer)
    r = pack_chunks(chunks, budget=8_000, tokenizer=tok)  # ADR defaults: 8,000 and 64
    check_invariants(chunks, r, tok)
    assert r.partial is partial
    assert r.tokens <= 8_000 - 64
    if partial:
        assert r.dropped_count == n - len(r.admitted)
        assert f"{r.dropped_count} of {n} retrieved passages omitted to fit the budget." in (
            r.rendered
        )
        # Highest rank first: the admitted ones are exactly the top of the ranking.
        assert list(r.admitted_indices) == list(range(len(r.admitted)))
    assert pack_chunks(chunks, budget=8_000, tokenizer=tok).to_dict() == r.to_dict()


# --- duplicates, formats, notice, errors, logging ----------------------------------------


def test_duplicates_admitted_once() -> None:
    a = Chunk("same text", "S", "https://x/1", score=0.2, id="low")
    b = Chunk("same text", "other label", "https://x/1", score=0.9, id="high")
    c = Chunk("same text", "S", "https://x/2", score=0.1, id="other-url")
    r = pack_chunks([a, b, c], budget=10_000)
    assert [x.id for x in r.admitted] == ["high", "other-url"]
    assert [(d.id, d.index, d.reason) for d in r.dropped] == [("low", 0, "duplicate")]
    assert not r.partial and "omitted" not in r.rendered


def test_markdown_rendering_exact() -> None:
    chunks = [
        Chunk("Paris is the capital.", "Atlas", "https://a.org", {"page": 3, "b": "x"}, 0.9),
        Chunk("Lyon is big.", score=0.5),
        Chunk("x" * 5000, "Noise", score=0.1),
    ]
    r = pack_chunks(chunks, budget=300, safety_buffer=10)
    assert r.rendered == (
        "Note: 1 of 3 retrieved passages omitted to fit the budget.\n\n"
        "[1] Paris is the capital.\n\n"
        "[2] Lyon is big.\n\n"
        "Sources:\n"
        '[1] Atlas — https://a.org — {"b":"x","page":3}\n'
        "[2] unknown source\n"
    )


def test_xml_rendering_exact() -> None:
    chunks = [Chunk("Paris is the capital.", "Atlas", "https://a.org", {"page": 3}, 0.9)]
    r = pack_chunks(chunks, budget=300, format="xml")
    assert r.rendered == (
        "<documents>\n"
        '<document index="1">\n'
        "<source>Atlas</source>\n"
        "<identifier>https://a.org</identifier>\n"
        '<metadata>{"page":3}</metadata>\n'
        "<document_content>\nParis is the capital.\n</document_content>\n"
        "</document>\n"
        "</documents>\n"
    )


def test_notice_with_twelve_chunks() -> None:
    chunks = [Chunk(f"passage {i} " + "lorem " * 20, score=12 - i) for i in range(12)]
    r = pack_chunks(chunks, budget=9 * 60 + 64, tokenizer=CHARS, policy="stop")
    assert f"{r.omitted_count} of 12 retrieved passages omitted to fit the budget." in r.rendered
    assert r.omitted_count == 12 - len(r.admitted) > 0


def test_budget_too_small_for_notice_renders_nothing() -> None:
    r = pack_chunks([Chunk("hello world " * 10)], budget=70)
    assert r.rendered == "" and r.tokens == 0 and r.partial and r.dropped_count == 1


def test_empty_input() -> None:
    r = pack_chunks([], budget=64)
    assert r.rendered == "" and r.admitted == () and r.dropped == ()


@pytest.mark.parametrize(
    ("kwargs", "match"),
    [
        pytest.param({"budget": 10}, "safety buffer", id="budget-below-buffer"),
        pytest.param({"budget": -1}, "non-negative", id="negative-budget"),
        pytest.param({"budget": 100, "policy": "greedy"}, "policy", id="bad-policy"),
        pytest.param({"budget": 100, "format": "html"}, "format", id="bad-format"),
        pytest.param({"budget": 100, "safety_buffer": -1}, "safety_buffer", id="bad-buffer"),
        pytest.param({"budget": 100, "tokenizer": 3}, "tokenizer", id="bad-tokenizer"),
    ],
)
def test_bad_arguments(kwargs: dict[str, object], match: str) -> None:
    with pytest.raises(InvalidInputError, match=match):
        pack_chunks([Chunk("x")], **kwargs)  # type: ignore[arg-type]


@pytest.mark.parametrize(
    "make",
    [
        pytest.param(lambda: Chunk("x", score=float("nan")), id="nan-score"),
        pytest.param(lambda: Chunk("x", score="high"), id="str-score"),  # type: ignore[arg-type]
        pytest.param(lambda: Chunk(3), id="non-str-text"),  # type: ignore[arg-type]
        pytest.param(lambda: Chunk("x", extras=[1]), id="list-extras"),  # type: ignore[arg-type]
        pytest.param(lambda: Chunk("x", source=5), id="int-source"),  # type: ignore[arg-type]
        pytest.param(lambda: Chunk("x", identifier=b"u"), id="bytes-id"),  # type: ignore[arg-type]
        pytest.param(lambda: Chunk("x", id=["a"]), id="list-id"),  # type: ignore[arg-type]
        pytest.param(lambda: Chunk("x", extras={1: 2, "a": 3}), id="mixed-extras-keys"),
        pytest.param(lambda: Chunk("x", extras={"a": {1: 2, "b": 3}}), id="nested-mixed-keys"),
    ],
)
def test_bad_chunks(make) -> None:  # type: ignore[no-untyped-def]
    with pytest.raises(InvalidInputError):
        make()


@pytest.mark.parametrize("n", [2, 3, 5])
def test_optimal_with_scores_near_the_float_limit(n: int) -> None:
    """Scores near 1e308 used to overflow the knapsack's sum (OverflowError in fsum)."""
    chunks = [Chunk(f"x{i} " * 20, score=1.7e308) for i in range(n)]
    chunks.append(Chunk("big " * 300, score=1e308))
    for budget in (200, 400):
        r = pack_chunks(chunks, budget=budget, safety_buffer=0, policy="optimal")
        skip = pack_chunks(chunks, budget=budget, safety_buffer=0, policy="skip")
        assert r.tokens <= budget
        assert len(r.admitted) >= len(skip.admitted)  # never worse than skip: equal scores


def test_non_chunk_items_rejected() -> None:
    with pytest.raises(InvalidInputError, match=r"chunks\[0\]"):
        pack_chunks([{"text": "x"}], budget=100)  # type: ignore[list-item]


def test_tokenizer_from_model_and_object() -> None:
    chunks = [Chunk("Hello, world! " * 30, score=1.0)]
    by_model = pack_chunks(chunks, budget=500, tokenizer=get_model("gpt-4o"))
    assert by_model.tokenizer == "o200k_base" and by_model.exact
    by_obj = pack_chunks(chunks, budget=500, tokenizer=Chars())
    assert by_obj.tokenizer == "chars" and by_obj.tokens == len(by_obj.rendered)


def test_dropped_logged_at_info(caplog: pytest.LogCaptureFixture) -> None:
    chunks = [Chunk("a" * 400, id="big", score=0.1), Chunk("b", id="small", score=0.9)]
    with caplog.at_level(logging.INFO, logger="tokenflex"):
        pack_chunks(chunks, budget=150, tokenizer=CHARS)
    (rec,) = [r for r in caplog.records if "pack_chunks" in r.getMessage()]
    assert rec.levelno == logging.INFO and "big (budget, 4" in rec.getMessage()


def test_to_dict_is_json_and_repr_readable() -> None:
    r = pack_chunks([Chunk("a" * 400, id="big"), Chunk("b", id="s")], budget=200, tokenizer=CHARS)
    d = json.loads(json.dumps(r.to_dict()))
    assert d["dropped"][0]["id"] == "big" and d["admitted"][0]["id"] == "s"
    assert d["limit"] == 136 and d["tokens"] == r.tokens
    assert "admitted=1" in repr(r) and "policy='skip'" in repr(r)


class Quadratic:
    """A super-additive tokenizer: the whole costs more than the sum of its parts."""

    name = "quadratic"
    exact = False

    def count(self, text: str) -> int:
        return len(text) + len(text) ** 2 // 2_000


@pytest.mark.parametrize("policy", ["skip", "stop", "optimal"])
def test_whole_context_check_drops_lowest_ranked(policy: str) -> None:
    """Per-chunk costs under-count here; the final whole-context count keeps the promise."""
    tok = CountCache(Quadratic())
    chunks = [Chunk(f"{i}:" + "t" * 90, score=1 - i / 100, id=str(i)) for i in range(40)]
    r = pack_chunks(chunks, budget=1_200, tokenizer=tok, policy=policy)  # type: ignore[arg-type]
    assert tok.tokenizer.count(r.rendered) == r.tokens <= 1_200 - 64
    parts_fit = (
        1_200 - 64 - 9 - tok.count(omitted_notice("markdown", 40, 40))
    ) // r.admitted_costs[0]
    assert 0 < len(r.admitted) < parts_fit  # the whole-context step dropped some
    assert list(r.admitted_indices) == list(range(len(r.admitted)))  # lowest ranked went
    assert {d.reason for d in r.dropped} <= {"budget", "stopped"}


def test_chunks_are_hashable_and_comparable() -> None:
    a = Chunk("t", "s", "u", {"k": [1]}, 0.5, "x")
    b = Chunk("t", "s", "u", {"k": [1]}, 0.5, "x")
    assert a == b and hash(a) == hash(b) and len({a, b}) == 1
    assert a != Chunk("t", "s", "u", {"k": [2]}, 0.5, "x")


def test_numpy_only_imported_for_optimal() -> None:
    import subprocess
    import sys

    code = (
        "import sys; from tokenflex.documents import Chunk, pack_chunks; "
        "cs = [Chunk(str(i) + 'x' * 300, score=i / 9) for i in range(9)]; "
        "pack_chunks(cs, budget=300, policy='skip'); assert 'numpy' not in sys.modules; "
        "pack_chunks(cs, budget=300, policy='optimal'); print('numpy' in sys.modules)"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert out.stdout.strip() == "True"


def test_stop_counts_only_as_far_as_needed() -> None:
    """10,000 chunks under policy "stop": packing counts the chunks up to the first miss
    (and while all-fit is possible), not every chunk."""
    counted: list[str] = []

    class Counting:
        name, exact = "counting", True

        def count(self, text: str) -> int:
            counted.append(text)
            return len(text.split()) + 1

    chunks = [
        Chunk(f"passage {i} " + "word " * 50, f"src{i}", score=1 - i / 10_000)
        for i in range(10_000)
    ]
    r = pack_chunks(chunks, budget=2_000, tokenizer=Counting(), policy="stop", safety_buffer=0)
    assert 0 < len(r.admitted) < 100
    assert sum(1 for d in r.dropped if d.tokens is None) > 9_000
    # a handful of frame/notice texts plus the counted chunks' parts: far below 10,000
    assert len({t for t in counted if t.startswith("passage ")}) <= len(r.admitted) + 2
