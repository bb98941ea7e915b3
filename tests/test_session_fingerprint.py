"""A message's fingerprint (what a state store keeps of a request's messages) is the
hash of its sorted JSON: the same text, so the same fingerprints, for every shape a
client sends, and a message's identity as a turn leaves out only ``cache_control``."""

from __future__ import annotations

import hashlib
import json
from typing import Any

from hypothesis import given, settings
from hypothesis import strategies as st

from tokenflex.session import StoreMemory, fingerprint
from tokenflex.state import MemoryStore

SCALARS = st.one_of(st.none(), st.booleans(), st.integers(), st.text(max_size=20))
PART = st.dictionaries(
    st.sampled_from(["type", "text", "cache_control", "image_url"]),
    st.one_of(SCALARS, st.fixed_dictionaries({"type": st.just("ephemeral")})),
    max_size=3,
)
MESSAGE = st.one_of(
    st.fixed_dictionaries(
        {"role": st.sampled_from(["user", "assistant", "system"]), "content": st.text()}
    ),
    st.dictionaries(
        st.sampled_from(["role", "content", "name", "cache_control", "tool_calls"]),
        st.one_of(SCALARS, st.lists(PART, max_size=3), st.lists(st.text(max_size=5))),
        max_size=4,
    ),
)


def _reference(message: Any) -> str:
    text = json.dumps(message, sort_keys=True, ensure_ascii=False, default=str)
    return hashlib.blake2b(text.encode("utf-8", "surrogatepass"), digest_size=12).hexdigest()


def _bare(message: dict[str, Any]) -> dict[str, Any]:
    out = {k: v for k, v in message.items() if k != "cache_control"}
    if isinstance(out.get("content"), list):
        out["content"] = [
            {k: v for k, v in p.items() if k != "cache_control"} if isinstance(p, dict) else p
            for p in out["content"]
        ]
    return out


@settings(max_examples=300, deadline=None)
@given(MESSAGE)
def test_a_fingerprint_is_the_hash_of_the_sorted_json(message: dict[str, Any]) -> None:
    assert fingerprint(message) == _reference(message)


# Any code point, lone surrogates and controls included (a client's JSON may carry them)
ANY_TEXT = st.text(st.characters(min_codepoint=0, max_codepoint=0x10FFFF, exclude_categories=()))


@settings(max_examples=300, deadline=None)
@given(ANY_TEXT, ANY_TEXT, st.booleans())
def test_a_plain_message_has_the_fingerprint_of_its_sorted_json(
    role: str, content: str, content_first: bool
) -> None:
    """A {"role", "content"} message is written without the encoder's call: its text must
    be the encoder's, whatever the text and the keys' order."""
    message = (
        {"content": content, "role": role} if content_first else {"role": role, "content": content}
    )
    assert fingerprint(message) == _reference(message)


@settings(max_examples=200, deadline=None)
@given(
    st.lists(
        st.tuples(st.sampled_from(["user", "assistant", "system", "tool"]), st.integers(0, 3)),
        min_size=1,
        max_size=12,
    ),
    st.lists(ANY_TEXT, min_size=4, max_size=4),
)
def test_a_plain_message_seen_again_has_the_same_fingerprint(
    picks: list[tuple[str, int]], texts: list[str]
) -> None:
    """Plain messages made again from copies of a few texts, under other roles too (a
    proxy parses every request afresh): each fingerprint is still its own JSON's hash,
    whatever was fingerprinted before (the texts' fingerprints are remembered)."""
    for role, k in picks:
        message = {"role": role, "content": "".join(list(texts[k]))}  # a copy of the text
        assert fingerprint(message) == _reference(message)


@settings(max_examples=200, deadline=None)
@given(st.lists(MESSAGE, min_size=1, max_size=6), st.data())
def test_a_stored_turn_is_known_by_its_json_without_cache_markers(
    messages: list[dict[str, Any]], data: st.DataObject
) -> None:
    """The probes a state keeps are the reference fingerprints of the messages as turns:
    a request that differs from it only in ``cache_control`` extends it, any other
    change at a probed place does not."""
    import tokenflex
    from tokenflex.session import HistoryCut

    store = MemoryStore()
    memory = StoreMemory(store, "gpt-4o", messages)
    counter = tokenflex.get_counter("gpt-4o")
    memory.remember(messages, HistoryCut(0, end=len(messages)), [], counter)
    state = json.loads(memory.store.get(memory.key))
    for i, h in state["probes"]:
        assert h == _reference(_bare(messages[i]))
    marked = [
        {**m, "cache_control": {"type": "ephemeral"}} if data.draw(st.booleans()) else m
        for m in messages
    ]
    assert StoreMemory(store, "gpt-4o", messages).previous_cut(marked) is not None


@settings(max_examples=300, deadline=None)
@given(ANY_TEXT, st.lists(MESSAGE, max_size=4), st.data())
def test_a_conversation_is_keyed_by_the_hash_of_its_json_and_stored_as_json(
    model: str, messages: list[dict[str, Any]], data: st.DataObject
) -> None:
    """A stateless conversation's key is the hash of ``json.dumps([model, lead])`` (its
    text written without the encoder: every version's keys are the same), whatever the
    model's name; its state is stored as JSON that the stdlib reads back as written."""
    import tokenflex
    from tokenflex.session import KEY_MESSAGES, HistoryCut

    lead = [fingerprint(m) for m in messages[:KEY_MESSAGES]]
    text = json.dumps([model, lead])
    memory = StoreMemory(MemoryStore(), model, messages)
    key = "cut:" + hashlib.blake2b(text.encode(), digest_size=16).hexdigest()
    assert memory.key == key
    cut = HistoryCut(
        data.draw(st.integers(0, len(messages))),
        end=len(messages),
        growth=data.draw(st.floats(0, 1e6)),
        grown=data.draw(st.integers(0, 20)),
        at=data.draw(st.floats(0, 2e9)),
        input_tokens=data.draw(st.integers(0, 10**7)),
    )
    memory.remember(messages, cut, [], tokenflex.get_counter("gpt-4o"))
    state = json.loads(memory.store.get(key))
    assert {name: state[name] for name in ("start", "end", "growth", "grown", "at")} == {
        "start": cut.start, "end": cut.end, "growth": cut.growth, "grown": cut.grown,
        "at": cut.at,
    }  # fmt: skip
    assert state["input_tokens"] == cut.input_tokens and state["n"] == len(messages)


@settings(max_examples=200, deadline=None)
@given(
    st.lists(ANY_TEXT, min_size=1, max_size=3),
    st.lists(st.lists(MESSAGE, max_size=4), min_size=1, max_size=3),
    st.lists(st.tuples(st.integers(0, 2), st.integers(0, 2)), min_size=1, max_size=10),
)
def test_a_conversation_asked_again_has_the_key_of_its_json(
    models: list[str], leads: list[list[dict[str, Any]]], asks: list[tuple[int, int]]
) -> None:
    """Keys asked again and again for a few models and openings, in any order (each is
    made once, then remembered): each is still the hash of its own JSON (red when the
    remembered key of another model or opening is answered)."""
    from tokenflex.session import KEY_MESSAGES

    for i, j in asks:
        model, messages = models[i % len(models)], leads[j % len(leads)]
        text = json.dumps([model, [fingerprint(m) for m in messages[:KEY_MESSAGES]]])
        key = "cut:" + hashlib.blake2b(text.encode(), digest_size=16).hexdigest()
        assert StoreMemory(MemoryStore(), model, messages).key == key


class _CopyingStore(MemoryStore):
    """A memory store that hands back a copy of the bytes it was given, as a store that
    serializes does (Redis, SQLite): a state is then always read from its JSON."""

    def get(self, key: str) -> bytes | None:
        raw = super().get(key)
        return None if raw is None else bytes(bytearray(raw))


TURN = st.fixed_dictionaries(
    {"role": st.sampled_from(["user", "assistant"]), "content": st.text(max_size=8)}
)


@settings(max_examples=200, deadline=None)
@given(st.lists(TURN, min_size=1, max_size=6), st.data())
def test_a_state_read_back_as_written_reads_as_its_json(
    opening: list[dict[str, Any]], data: st.DataObject
) -> None:
    """A state this process wrote is read back from what it was written from (no field
    checked or converted again): each request of a conversation (grown, repeated, edited,
    cut short) gets the same previous cut, the same stored state and the same shared
    prefix as when every state is read from its JSON (a store that copies its bytes)."""
    import tokenflex
    from tokenflex.session import HistoryCut

    counter = tokenflex.get_counter("gpt-4o")
    kept, copied = MemoryStore(), _CopyingStore()
    messages = list(opening)
    for _ in range(data.draw(st.integers(1, 6))):
        step = data.draw(st.sampled_from(["grow", "again", "edit", "shorten"]))
        if step == "grow":
            messages = messages + data.draw(st.lists(TURN, min_size=1, max_size=3))
        elif step == "edit":
            i = data.draw(st.integers(0, len(messages) - 1))
            messages = [*messages[:i], data.draw(TURN), *messages[i + 1 :]]
        elif step == "shorten" and len(messages) > 1:
            messages = messages[: data.draw(st.integers(1, len(messages) - 1))]
        else:
            messages = list(messages)  # the same objects again, in a new list
        n = len(messages)
        start = data.draw(st.integers(0, n))
        cut = HistoryCut(start, end=n, growth=1.5, grown=1, at=float(n), input_tokens=n)
        sent = messages[start:]
        answers = []
        for store in (kept, copied):
            memory = StoreMemory(store, "gpt-4o", messages)
            before = memory.previous_cut(messages)
            shared = memory.remember(messages, cut, sent, counter)
            answers.append((before, shared, json.loads(memory.store.get(memory.key))))
        assert answers[0] == answers[1]
