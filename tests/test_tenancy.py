"""A held cut belongs to one conversation of one client (issue 22 item 3, issue 25 item 1).

A stateless conversation's state (where its last cut fell, what it cleared, what it sent)
is kept under a key that names its tenant, and it is held only for a request that extends
the one it was made for. The reference is independent of the state: the same request
fitted with a fresh store (no previous plan). In the proxy the tenant is the client's
credentials and the route; the proxy runs against a loopback fake upstream that records
what it was sent.
"""

from __future__ import annotations

import copy
from collections.abc import Iterator
from typing import Any

import httpx
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from test_cache_stable import SYSTEM, model, sessions, text
from test_server import Fake, ServerThread, fake_discover, fake_upstream

import tokenflex
from tokenflex.server import create_app
from tokenflex.server.config import ServerConfig
from tokenflex.state import MemoryStore, StateStore, TenantStore

SETTINGS = settings(max_examples=40, deadline=None, suppress_health_check=[HealthCheck.too_slow])


def flat(turns: list[list[dict[str, Any]]]) -> list[dict[str, Any]]:
    return [SYSTEM] + [m for t in turns for m in t]


def branched(turns: list[list[dict[str, Any]]], tag: str) -> list[list[dict[str, Any]]]:
    """Other turns in the same shape, as an edit branch or another session has them:
    every text edited, every tool-call id new."""
    out = copy.deepcopy(turns)
    for turn in out:
        for m in turn:
            if isinstance(m.get("content"), str):
                m["content"] = f"{tag} {m['content']}"
            for call in m.get("tool_calls") or ():
                call["id"] = f"{tag}_{call['id']}"
            if "tool_call_id" in m:
                m["tool_call_id"] = f"{tag}_{m['tool_call_id']}"
    return out


def shape(plan: tokenflex.Plan) -> tuple[Any, ...]:
    """What a plan sends and leaves out (not what it shares with a previous plan)."""
    return (
        plan.messages,
        plan.max_tokens,
        plan.input_tokens,
        [(d.section, d.index, d.reason) for d in plan.dropped],
    )


def stateless(messages: list[dict[str, Any]], **options: Any) -> tokenflex.Plan:
    """The reference: the same request with no previous plan."""
    return tokenflex.fit(messages, state=MemoryStore(), **options)


# -- the library ----------------------------------------------------------------------


@SETTINGS
@given(turns=sessions(), data=st.data())
def test_a_held_cut_applies_only_to_an_extension_by_its_tenant(
    turns: list[list[dict[str, Any]]], data: st.DataObject
) -> None:
    """After a session's plans are kept in a store, a request that is shorter than the
    last one, diverges from it, or comes from another tenant is fitted exactly as with no
    state; an extension by the same tenant may hold the cut."""
    options: dict[str, Any] = {
        "model": model(data.draw(st.sampled_from([1500, 2500, 4000]), label="window")),
        "max_tokens": 300,
        "cache_stable": True,
        "clear_tool_results": data.draw(st.booleans(), label="clear"),
        "low_water": data.draw(st.sampled_from([0.4, 0.6, "auto"]), label="low_water"),
    }
    store = MemoryStore()
    alice = TenantStore(store, "alice")
    for k in range(1, len(turns) + 1):
        tokenflex.fit(flat(turns[:k]), state=alice, **options)
    last = flat(turns)
    kind = data.draw(st.sampled_from(["shorter", "branch", "other-tenant"]), label="kind")
    state: StateStore = alice
    if kind == "shorter":  # a regenerate or an edit of an earlier turn
        request = flat(turns[: data.draw(st.integers(1, len(turns) - 1), label="turns")])
    elif kind == "branch":  # the conversation forked at a turn, as long as it likes
        at = data.draw(st.integers(1, len(turns) - 1), label="fork")
        more = data.draw(st.integers(1, 2 * len(turns)), label="branch turns")
        request = flat(turns[:at] + branched((turns[at:] * 2)[:more], "edited"))
    else:  # the same conversation, or its next turn, under another tenant
        request = last + (flat(turns[:1])[1:] if data.draw(st.booleans(), label="next") else [])
        state = TenantStore(store, "bob")
    plan = tokenflex.fit(request, state=state, **options)
    assert shape(plan) == shape(stateless(request, **options))


def test_an_extension_holds_the_cut() -> None:
    """The control for the property above: the same tenant's next requests do get the
    previous cut (they differ from a fit with no state once the history is cut)."""
    options: dict[str, Any] = {"model": model(2500), "max_tokens": 300, "cache_stable": True}
    store = TenantStore(MemoryStore(), "alice")
    msgs: list[dict[str, Any]] = [SYSTEM]
    differs = 0
    for t in range(40):
        msgs.append({"role": "user", "content": text(40, t)})
        plan = tokenflex.fit(list(msgs), state=store, **options)
        differs += shape(plan) != shape(stateless(list(msgs), **options))
        msgs.append({"role": "assistant", "content": text(40, t + 1)})
    assert differs >= 10


def long_session(turns: int, words: int = 40) -> list[dict[str, Any]]:
    """A system prompt and ``turns`` user/assistant pairs, ending with a user turn."""
    msgs: list[dict[str, Any]] = [SYSTEM]
    for t in range(turns):
        msgs.append({"role": "user", "content": f"question {t}: " + text(words, t)})
        msgs.append({"role": "assistant", "content": f"answer {t}: " + text(words, t + 1)})
    msgs.append({"role": "user", "content": "and now?"})
    return msgs


def first_kept(plan: tokenflex.Plan, msgs: list[dict[str, Any]]) -> int:
    """Index of the first history message ``plan`` sent (past every one it dropped)."""
    return 1 + max((d.index for d in plan.dropped if d.reason != "cleared"), default=0)


def grown(msgs: list[dict[str, Any]], store: StateStore, **options: Any) -> tokenflex.Plan:
    """Fit ``msgs`` as a stateless client sends them turn by turn (each user turn a
    request); the last plan."""
    plan = None
    for k in range(1, len(msgs) + 1):
        if msgs[k - 1]["role"] == "user":
            plan = tokenflex.fit(msgs[:k], state=store, **options)
    assert plan is not None
    return plan


def test_a_regenerate_that_fits_goes_out_whole() -> None:
    """The issue's reproduction: after a long request was cut, a shorter request with the
    same first messages (a regenerate of an earlier answer) that fits is sent whole, not
    with the long request's cut."""
    options: dict[str, Any] = {"model": model(4000), "max_tokens": 300, "cache_stable": True}
    store = MemoryStore()
    msgs = long_session(40)
    long = grown(msgs, store, **options)
    cut = first_kept(long, msgs)
    assert 20 < cut < len(msgs) - 10
    fits = [
        k
        for k in range(cut + 2, len(msgs), 2)
        if stateless(msgs[:k], **options).messages == msgs[:k]
    ]
    assert fits  # shorter requests, past the cut, that fit as they are
    for k in fits:
        plan = tokenflex.fit(msgs[:k], state=store, **options)
        assert plan.messages == msgs[:k], k
        grown(msgs, store, **options)  # the long one again, for the next regenerate


def test_an_edit_branch_does_not_get_the_cut_of_the_branch_it_left() -> None:
    """A conversation forked after the cut and grown past the old branch (more messages,
    short ones) is fitted as a conversation with no previous cut."""
    options: dict[str, Any] = {"model": model(4000), "max_tokens": 300, "cache_stable": True}
    store = MemoryStore()
    msgs = long_session(40)
    cut = first_kept(grown(msgs, store, **options), msgs)
    fork = [
        {"role": "user" if i % 2 == 0 else "assistant", "content": f"edited turn {i}"}
        for i in range(len(msgs) - cut)
    ]
    branch = msgs[: cut + 4] + fork  # the same up to the cut and past it, then other turns
    assert len(branch) > len(msgs) and branch[-1]["role"] == "user"
    plan = tokenflex.fit(branch, state=store, **options)
    assert shape(plan) == shape(stateless(branch, **options))


def tool_session(rounds: int, size: int) -> list[dict[str, Any]]:
    """One task, then ``rounds`` tool calls with results of ``size`` words, each followed
    by a user nudge (so each round can be a request)."""
    msgs: list[dict[str, Any]] = [SYSTEM, {"role": "user", "content": "Find the leak."}]
    for r in range(rounds):
        call = {
            "id": f"call_{r}",
            "type": "function",
            "function": {"name": "read", "arguments": "{}"},
        }
        msgs.append({"role": "assistant", "content": None, "tool_calls": [call]})
        msgs.append({"role": "tool", "tool_call_id": f"call_{r}", "content": text(size, r)})
        msgs.append({"role": "user", "content": f"go on {r}"})
    return msgs


def test_a_shorter_request_keeps_its_tool_results() -> None:
    """With clear_tool_results, the cut of a request with a large output, which cleared
    old tool results, neither cuts nor clears a shorter request of the conversation with a
    small output that fits."""
    options: dict[str, Any] = {
        "model": model(2500),
        "cache_stable": True,
        "clear_tool_results": True,
    }
    store = MemoryStore()
    msgs = tool_session(30, 60)
    long = grown(msgs, store, max_tokens=600, **options)
    assert long.dropped.by_reason().get("cleared")
    fits = [
        k
        for k in range(3, len(msgs), 3)
        if stateless(msgs[:k], max_tokens=300, **options).messages == msgs[:k]
    ]
    assert fits
    for k in fits:
        plan = tokenflex.fit(msgs[:k], state=store, max_tokens=300, **options)
        assert plan.messages == msgs[:k] and not plan.dropped, k
        grown(msgs, store, max_tokens=600, **options)


def test_sessions_that_open_the_same_way_do_not_share_a_cut() -> None:
    """A templated app's sessions (one tenant, the same long few-shot opening) grown
    side by side: each request is fitted as with no state, since neither extends the
    other's."""
    options: dict[str, Any] = {"model": model(2500), "max_tokens": 300, "cache_stable": True}
    store = MemoryStore()
    opening = long_session(16)[:-1]
    one = opening + long_session(20)[1:]
    two = opening + [{**m, "content": f"other {m['content']}"} for m in long_session(20)[1:]]
    for k in range(len(opening) + 1, len(one), 2):
        for msgs in (one, two):
            plan = tokenflex.fit(msgs[:k], state=store, **options)
            assert shape(plan) == shape(stateless(msgs[:k], **options)), k


def test_every_key_names_its_tenant() -> None:
    """What a cache-stable fit with a summarizer writes lands under the tenant's prefix,
    and a plain store is the tenant ''."""

    class Keys(MemoryStore):
        def __init__(self) -> None:
            super().__init__()
            self.written: list[str] = []

        def set(self, key: str, value: bytes, *, ttl_s: float | None = None) -> None:
            self.written.append(key)
            super().set(key, value, ttl_s=ttl_s)

    options: dict[str, Any] = {
        "model": model(2500),
        "max_tokens": 300,
        "cache_stable": True,
        "summarizer": tokenflex.ExtractiveSummarizer("o200k_base"),
    }
    store = Keys()
    msgs = long_session(30)
    tokenflex.fit(msgs, state=TenantStore(store, "alice"), **options)
    tokenflex.fit(msgs, state=store, **options)
    alice, anyone = TenantStore(store, "alice").prefix, TenantStore(store, "").prefix
    assert {k.split(":", 2)[2].split(":")[0] for k in store.written} == {"cut", "summary"}
    assert all(k.startswith((alice, anyone)) for k in store.written), store.written
    assert sum(k.startswith(alice) for k in store.written) == len(store.written) // 2


# -- the proxy ------------------------------------------------------------------------


@pytest.fixture(scope="module")
def upstream() -> Iterator[tuple[Fake, ServerThread]]:
    fake = Fake()
    with ServerThread(fake_upstream(fake)) as server:
        yield fake, server


def proxy(upstream_url: str, **settings: Any) -> ServerThread:
    config = ServerConfig.load(upstream=upstream_url, **settings)
    return ServerThread(create_app(config, discover=fake_discover))


def ask(
    client: httpx.Client,
    url: str,
    key: str,
    messages: list[dict[str, Any]],
    max_tokens: int = 200,
    route: str = "",
) -> httpx.Response:
    r = client.post(
        f"{url}{route}/v1/chat/completions",
        json={"model": "tiny", "messages": messages, "max_tokens": max_tokens},
        headers={"authorization": f"Bearer {key}"},
    )
    assert r.status_code == 200, r.text
    return r


def session(turns: int, tag: str = "") -> list[dict[str, Any]]:
    msgs: list[dict[str, Any]] = [{"role": "system", "content": "You are terse."}]
    for i in range(turns):
        msgs.append({"role": "user", "content": f"{tag}question {i}: " + "lorem ipsum " * 12})
        msgs.append({"role": "assistant", "content": f"{tag}answer {i}: " + "dolor sit " * 12})
    return msgs


def test_another_credential_learns_nothing_from_the_prefix_headers(
    upstream: tuple[Fake, ServerThread],
) -> None:
    """Issue 25's oracle: a client B sends A's first messages and a guess of A's next
    one; the headers are the same for a right and a wrong guess, with no shared prefix."""
    _, up = upstream
    with (
        proxy(up.url, routes={"team": {}}) as server,
        httpx.Client(timeout=10, trust_env=False) as client,
    ):
        msgs = session(8)
        for k in range(2, len(msgs), 2):
            ask(client, server.url, "sk-alice", msgs[:k])
        answers = []
        wrong = {"role": "user", "content": "question 1: something else"}
        for n, guess in enumerate((msgs[3], wrong)):  # each B's first request
            probe = [*msgs[:3], guess, {"role": "user", "content": "hi"}]
            h = ask(client, server.url, f"sk-bob-{n}", probe).headers
            answers.append({k: v for k, v in h.items() if k.startswith("x-tokenflex-")})
            assert "x-tokenflex-prefix-tokens" not in h
            assert "x-tokenflex-cached-tokens" not in h
        for a in answers:
            a.pop("x-tokenflex-plan-id"), a.pop("x-tokenflex-request-id")
            a.pop("x-tokenflex-input-tokens")  # the guesses differ in length
        assert answers[0] == answers[1]
        # A's own next request does share a prefix; on another route A is another tenant
        msgs.append({"role": "user", "content": "next"})
        assert "x-tokenflex-prefix-tokens" in ask(client, server.url, "sk-alice", msgs).headers
        other = ask(client, server.url, "sk-alice", msgs, route="/team").headers
        assert "x-tokenflex-prefix-tokens" not in other


def test_another_credential_does_not_move_a_cut(upstream: tuple[Fake, ServerThread]) -> None:
    """Issue 25's interleaving: B replays A's conversation with a larger output (so it
    is cut deeper) between A's requests; what A's requests send upstream is what they
    send with B away."""
    fake, up = upstream

    def alice_run(with_bob: bool) -> list[list[dict[str, Any]]]:
        sent = []
        with proxy(up.url) as server, httpx.Client(timeout=10, trust_env=False) as client:
            msgs = session(30)
            for k in range(2, len(msgs), 2):
                ask(client, server.url, "sk-alice", msgs[:k])
                sent.append(fake.last()["body"]["messages"])
                if with_bob:
                    ask(client, server.url, "sk-bob", msgs[:k], max_tokens=600)
        return sent

    alone, interleaved = alice_run(False), alice_run(True)
    assert alone == interleaved
    assert sum(len(s) for s in alone) < sum(k + 1 for k in range(2, 61, 2))  # cuts happened


def test_another_credentials_cut_clears_no_tool_results(
    upstream: tuple[Fake, ServerThread],
) -> None:
    """Issue 25's clear_tool_results case: B's request (with a large output) was cut and
    its old tool results cleared; A's request, the same conversation one turn on with a
    small output, fits and goes out whole."""
    fake, up = upstream
    with (
        proxy(up.url, fit={"clear_tool_results": True, "keep_tool_results": 1}) as server,
        httpx.Client(timeout=10, trust_env=False) as client,
    ):
        msgs = [{"role": "system", "content": "You are terse."}]
        msgs.append({"role": "user", "content": "Find the leak."})
        for r in range(6):
            call = {
                "id": f"call_{r}",
                "type": "function",
                "function": {"name": "read", "arguments": "{}"},
            }
            msgs.append({"role": "assistant", "content": None, "tool_calls": [call]})
            msgs.append({"role": "tool", "tool_call_id": f"call_{r}", "content": "ok " * 60})
        msgs.append({"role": "user", "content": "go on"})
        r = ask(client, server.url, "sk-bob", msgs, max_tokens=700)
        assert fake.last()["body"]["messages"] != msgs  # B's was cut or cleared
        assert int(r.headers["x-tokenflex-dropped"]) > 0
        more = [*msgs, {"role": "assistant", "content": "ok"}, {"role": "user", "content": "?"}]
        ask(client, server.url, "sk-alice", more, max_tokens=50)
        assert fake.last()["body"]["messages"] == more


@pytest.mark.parametrize("fmt", ["chat", "anthropic"])
def test_a_moving_cache_control_marker_keeps_the_hold(fmt: str) -> None:
    """Clients put ``cache_control`` on the newest message and take it off the one before
    every request (Claude Code does); the request still extends the previous one, so the
    cut is held as it is without markers."""

    def marked(msgs: list[dict[str, Any]]) -> list[dict[str, Any]]:
        out = [
            {**m, "content": [{"type": "text", "text": m["content"]}]}
            for m in msgs
            if m["role"] != "system"
        ]
        out[-1]["content"][0]["cache_control"] = {"type": "ephemeral"}
        return out if fmt == "anthropic" else [SYSTEM, *out]

    options: dict[str, Any] = {"model": model(2500), "max_tokens": 300, "cache_stable": True}
    if fmt == "anthropic":
        options.update(format="anthropic", system=SYSTEM["content"])
    plain, with_markers = MemoryStore(), MemoryStore()
    msgs = long_session(40)
    held = 0
    for k in range(1, len(msgs), 2):
        bare = marked(msgs[: k + 1])
        for part in bare[-1]["content"]:
            part.pop("cache_control")
        a = tokenflex.fit(bare, state=plain, **options)
        b = tokenflex.fit(marked(msgs[: k + 1]), state=with_markers, **options)
        assert [(d.index, d.reason) for d in a.dropped] == [(d.index, d.reason) for d in b.dropped]
        held += any(d.reason == "held" for d in b.dropped)
    assert held >= 5


def test_a_background_summary_is_one_tenants_job() -> None:
    """The background runner makes one job per summary key at a time; another tenant's
    job for the same span neither stands in for this one nor tells of it."""
    import threading

    from tokenflex.summarize.background import BackgroundSummaries

    store, gate = MemoryStore(), threading.Event()
    alice, bob = TenantStore(store, "alice"), TenantStore(store, "bob")

    def held(text: str) -> Any:
        return lambda: (gate.wait(10), text)[1]

    runner = BackgroundSummaries()
    try:
        assert runner.submit("summary:k", held("a"), alice, ttl_s=60)
        assert not runner.submit("summary:k", held("a2"), alice, ttl_s=60)  # in flight
        assert runner.submit("summary:k", held("b"), bob, ttl_s=60)
        gate.set()
        assert runner.wait(10)
    finally:
        gate.set()
        runner.close()
    assert (alice.get("summary:k"), bob.get("summary:k")) == (b"a", b"b")
