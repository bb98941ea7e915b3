"""The facts a summary must keep, found in the span it covers and looked for in it.

A summary that reads well can still lose the one number the conversation turns on. Before
a summary is used, :func:`extract_facts` lists what the span states that a later turn may
need verbatim: numbers with their units, money and percentages, dates and times, versions,
paths, file names and URLs, e-mail addresses, identifiers (``snake_case``, ``camelCase``,
``ABC-123``, hashes, anything in backticks), names, and the user's instructions and
decisions. :func:`missing_facts` looks for each in the summary after normalizing both
(case, thousands separators, the space between a number and its unit), and
:func:`keep_facts` appends the missing ones as a short ``Carried forward:`` line within the
summary's budget, the user's first. :func:`fact_report` says which were kept and which
are still missing (``plan.summary.facts_kept`` / ``facts_missing``).

No model and no I/O: regular expressions over the transcript, deterministic.
"""

from __future__ import annotations

import functools
import re
from collections.abc import Iterable, Sequence
from dataclasses import dataclass

from .._types import Message
from .format import SUMMARY_PREFIX, is_summary_message
from .sentences import Count, split_sentences, trim_to_tokens
from .transcript import message_line

__all__ = ["CARRIED_FORWARD", "Fact", "extract_facts", "fact_report", "keep_facts", "missing_facts"]

CARRIED_FORWARD = "Carried forward: "
"""How the line of facts a summary left out starts."""

_UNITS = (
    r"%|percent|ms|µs|us|ns|s|sec|secs|seconds?|min|mins|minutes?|h|hrs?|hours?|days?|weeks?|"
    r"months?|years?|[kmgtp]i?b|bytes?|kb|mb|gb|tb|kib|mib|gib|tokens?|req/s|rps|qps|"
    r"[km]?hz|[km]?g|[km]?m|cm|mm|km|kg|lbs?|°c|°f|usd|eur|gbp|dollars?|euros?|x|×"
)
_PATTERNS: tuple[tuple[str, re.Pattern[str]], ...] = (
    ("url", re.compile(r"\bhttps?://[^\s<>\"'`)\]]+[^\s<>\"'`)\].,;:!?]")),
    ("email", re.compile(r"\b[\w.+-]+@[\w-]+(?:\.[\w-]+)+\b")),
    ("date", re.compile(r"\b\d{4}-\d{2}-\d{2}(?:[T ]\d{2}:\d{2}(?::\d{2})?)?\b")),
    ("date", re.compile(r"\b\d{1,2}/\d{1,2}/\d{2,4}\b")),
    (
        "date",
        re.compile(
            r"\b(?:Jan|Feb|Mar|Apr|May|Jun|Jul|Aug|Sep|Sept|Oct|Nov|Dec)[a-z]*\.? \d{1,2}"
            r"(?:st|nd|rd|th)?(?:,? \d{4})?\b|\b\d{1,2} (?:Jan|Feb|Mar|Apr|May|Jun|Jul|Aug|Sep|"
            r"Sept|Oct|Nov|Dec)[a-z]*\.?(?: \d{4})?\b"
        ),
    ),
    ("time", re.compile(r"\b\d{1,2}:\d{2}(?:\s?[ap]\.?m\.?)?(?![\d:])", re.I)),
    ("path", re.compile(r"(?<![\w/])(?:~|\.{1,2})?(?:/[\w.@+-]+){2,}/?")),
    ("path", re.compile(r"\b[\w-]+(?:/[\w.-]+)+\.[a-z]{1,5}\b")),
    (
        "file",
        re.compile(
            r"\b[\w-]+\.(?:py|js|ts|tsx|jsx|md|json|ya?ml|toml|ini|cfg|txt|csv|sql|go|rs|"
            r"java|kt|c|h|cc|cpp|hpp|sh|log|html|css|lock|env|xml|proto|rb|php|swift)\b"
        ),
    ),
    ("version", re.compile(r"\bv?\d+\.\d+(?:\.\d+)+(?:[-+][\w.]+)?\b|\bv\d+(?:\.\d+)?\b")),
    ("money", re.compile(r"[$€£¥]\s?\d[\d,]*(?:\.\d+)?(?:\s?[kKmMbB]n?\b)?")),
    (
        "quantity",
        re.compile(rf"(?<![\w.$€£¥-])\d[\d,]*(?:\.\d+)?\s?(?:{_UNITS})(?![\w/])", re.I),
    ),
    ("id", re.compile(r"\b[A-Z][A-Z0-9]{1,9}-\d+\b")),
    ("id", re.compile(r"`([^`\n]{2,80})`")),
    ("id", re.compile(r"\b[a-z][a-z0-9]*(?:_[a-z0-9]+)+\b")),
    ("id", re.compile(r"\b[a-z]+(?:[A-Z][a-z0-9]+)+\b|\b[A-Z][a-z0-9]+(?:[A-Z][a-z0-9]+)+\b")),
    ("id", re.compile(r"\b(?=[0-9a-f]*\d)(?=[0-9a-f]*[a-f])[0-9a-f]{7,40}\b")),
    ("number", re.compile(r"(?<![\w.,$€£¥/:-])\d{2,}(?:[.,]\d+)*(?![\w/:-])")),
    ("name", re.compile(r"\b(?:Dr|Mr|Mrs|Ms|Prof)\.? [A-Z][a-z]+(?: [A-Z][a-z]+)*")),
    ("name", re.compile(r"(?<=[a-z0-9,;:)] )(?:[A-Z][a-z]+(?:[ -][A-Z][a-z]+)*)")),
)
_UNIT_SPACE = re.compile(rf"(?<=\d)\s+(?=(?:{_UNITS})(?![\w/]))", re.I)
_INSTRUCTION = re.compile(
    r"\b(decid\w*|agreed?|chose|choose|chosen|must|never|always|don'?t|do not|prefer\w*|"
    r"remember|important|deadline|make sure|instead of|only use|require[sd]?)\b",
    re.I,
)
_WORD = re.compile(r"[\w'-]{4,}")
_STOP = frozenset(
    [
        "that",
        "this",
        "with",
        "from",
        "have",
        "will",
        "your",
        "they",
        "them",
        "then",
        "than",
        "when",
        "what",
        "which",
        "there",
        "their",
        "about",
        "would",
        "should",
        "could",
        "into",
        "also",
        "just",
        "only",
        "make",
        "sure",
        "always",
        "never",
        "must",
        "please",
        "remember",
        "important",
        "instead",
        "prefer",
        "decided",
        "agreed",
        "chose",
        "choose",
        "chosen",
        "don't",
        "require",
        "required",
        "requires",
        "deadline",
    ]
)
_NAME_STOP = frozenset(
    [
        "I",
        "The",
        "A",
        "An",
        "And",
        "But",
        "Or",
        "If",
        "Then",
        "When",
        "While",
        "This",
        "That",
        "These",
        "Those",
        "It",
        "Its",
        "We",
        "You",
        "He",
        "She",
        "They",
        "User",
        "Assistant",
        "Tool",
        "Earlier",
        "Monday",
        "Tuesday",
        "Wednesday",
        "Thursday",
        "Friday",
        "Saturday",
        "Sunday",
        "OK",
        "Okay",
        "Yes",
        "No",
        "Sure",
        "Thanks",
        "Thank",
        "Please",
        "Note",
        "Also",
        "True",
        "False",
        "None",
        "Null",
    ]
)
_VAGUE = {"name": 1, "number": 2}
"""Kinds that are often not a fact (a capitalized word, a bare number): carried last."""


@dataclass(frozen=True)
class Fact:
    """One thing a span states that its summary should keep."""

    text: str
    """As written in the span (an instruction: its sentence)."""
    kind: str
    """``quantity`` (a number with its unit), ``money``, ``date``, ``time``, ``version``,
    ``path``, ``file``, ``url``, ``email``, ``id``, ``instruction``, ``name`` or ``number``
    (a bare number of two digits or more)."""
    role: str
    """Who stated it: ``user``, ``assistant``, ``tool`` or ``summary`` (an earlier one)."""


def _norm(text: str) -> str:
    """Case, thousands separators, the space between a number and its unit, and runs of
    whitespace normalized away; backticks and quotes dropped."""
    t = text.casefold().replace("`", "").replace('"', "")
    t = re.sub(r"(?<=\d),(?=\d{3}\b)|,(?=\s)", "", t)
    t = _UNIT_SPACE.sub("", t)
    return " ".join(t.split())


def _words(text: str) -> set[str]:
    return {w for w in (m.group().casefold() for m in _WORD.finditer(text)) if w not in _STOP}


_RECALL_ID = re.compile(r"\[?recall id: [0-9a-f]+\]?")
"""A recall id a cut note or summary names (:mod:`tokenflex.recall`): a pointer, not a fact."""


@functools.lru_cache(maxsize=8192)
def _facts_of(role: str, text: str) -> tuple[Fact, ...]:
    text = _RECALL_ID.sub("", text)
    found: list[tuple[int, Fact]] = []
    taken: list[tuple[int, int]] = []
    for kind, pattern in _PATTERNS:
        for m in pattern.finditer(text):
            start, end = m.span(m.lastindex or 0)
            if any(a <= start < b or a < end <= b for a, b in taken):
                continue  # inside a fact already found (a path's file name, a date's year)
            value = m.group(m.lastindex or 0).strip().rstrip(".")
            if kind == "name" and (value.split()[0] in _NAME_STOP or len(value) < 3):
                continue
            taken.append((start, end))
            found.append((start, Fact(value, kind, role)))
    if role == "user":
        for s in split_sentences(text):
            if _INSTRUCTION.search(s) and len(_words(s)) >= 2:
                words = s.split()
                sentence = " ".join(words[:40]) + (" …" if len(words) > 40 else "")
                found.append((text.find(words[0]), Fact(sentence, "instruction", role)))
    return tuple(f for _, f in sorted(found, key=lambda pair: pair[0]))


def _role(msg: Message) -> str:
    if is_summary_message(msg):
        return "summary"
    role = str(msg.get("role", "user"))
    return role if role in ("user", "assistant") else "tool"


def _texts(messages: Sequence[Message]) -> list[tuple[str, str]]:
    """(role, text) of each message a summary may stand for (system prompts are sent)."""
    out: list[tuple[str, str]] = []
    for msg in messages:
        if str(msg.get("role", "")) in ("system", "developer") and not is_summary_message(msg):
            continue
        role = _role(msg)
        line = message_line(msg)
        out.append(
            (role, line[len(SUMMARY_PREFIX) :] if role == "summary" else line.partition(": ")[2])
        )
    return out


def _facts(groups: Iterable[tuple[str, str]]) -> Iterable[Fact]:
    for role, text in groups:
        yield from _facts_of(role, text)


def extract_facts(
    messages: Sequence[Message],
    previous_summary: str | None = None,
    *,
    sent: Sequence[Message] = (),
) -> list[Fact]:
    """The facts of ``previous_summary`` and ``messages`` that ``sent`` (messages the
    model sees beside the summary) does not state, each once, most telling first:
    the user's and an earlier summary's, then the rest, with names and bare numbers (often
    not a fact at all) after every other kind; in order of appearance within a rank.

    >>> [f.text for f in extract_facts([{"role": "user", "content":
    ...     "Deploy api_gateway v2.3.1 to /srv/app/releases by 2026-03-14; budget $4,200."}])]
    ['api_gateway', 'v2.3.1', '/srv/app/releases', '2026-03-14', '$4,200']
    """
    groups = [("summary", previous_summary)] if previous_summary else []
    groups += _texts(messages)
    seen = {_norm(f.text) for f in _facts(_texts(sent))}  # said where the model sees it
    out: list[tuple[int, int, Fact]] = []
    for pos, (role, text) in enumerate(groups):
        for fact in _facts_of(role, text):
            key = _norm(fact.text)
            if key and key not in seen:
                seen.add(key)
                rank = (0 if role in ("user", "summary") else 1) + 2 * _VAGUE.get(fact.kind, 0)
                out.append((rank, pos, fact))
    return [f for _, _, f in sorted(out, key=lambda t: (t[0], t[1]))]


def _present(fact: Fact, summary: str, summary_words: set[str]) -> bool:
    if fact.kind == "instruction":
        words = _words(fact.text)
        return not words or len(words & summary_words) * 3 >= len(words) * 2
    key = re.escape(_norm(fact.text))
    return re.search(rf"(?<![0-9a-z]){key}(?![0-9a-z])", summary) is not None


def missing_facts(facts: Iterable[Fact], summary: str) -> list[Fact]:
    """The ``facts`` that ``summary`` does not state (normalized match; an instruction
    counts as kept when two thirds of its words are there).

    >>> facts = extract_facts([{"role": "user", "content": "Use port 8443 and 1,500 ms."}])
    >>> [f.text for f in missing_facts(facts, "User wants port 8443, 1500ms timeout.")]
    []
    >>> [f.text for f in missing_facts(facts, "User wants a port.")]
    ['1,500 ms', '8443']
    """
    norm = _norm(summary)
    words = _words(summary)
    return [f for f in facts if not _present(f, norm, words)]


def keep_facts(summary: str, facts: Sequence[Fact], max_tokens: int, count: Count) -> str:
    """``summary`` with the ``facts`` it misses appended as one ``Carried forward:`` line,
    in the order given (most telling first), as many as fit ``max_tokens`` in ``count``'s
    tokens. A missing fact is worth more than a sentence of prose: the line may take up
    to half the budget, the summary's last sentences giving way (the facts those stated
    become missing and compete for the line like the others).

    >>> facts = extract_facts([{"role": "user", "content": "Port 8443. Ship on 2026-05-01."}])
    >>> keep_facts("The user set a port.", facts, 50, lambda t: len(t.split()))
    'The user set a port.\\nCarried forward: 2026-05-01; 8443'
    """
    missing = missing_facts(facts, summary)
    if not missing:
        return summary

    def render(text: str, chosen: list[str]) -> str:
        return f"{text}\n{CARRIED_FORWARD}{'; '.join(chosen)}".strip()

    whole, reserve = summary, 0
    for _ in range(4):  # the room a trim makes can cost facts: make room for them too
        line = count(render("", [f.text for f in missing]))
        reserve = min(max(reserve, line), max_tokens // 2)
        if count(summary) + reserve <= max_tokens:
            break
        summary = trim_to_tokens(whole, max_tokens - reserve, count)
        missing = missing_facts(facts, summary)
    chosen: list[str] = []
    for fact in missing:
        if count(render(summary, [*chosen, fact.text])) <= max_tokens:
            chosen.append(fact.text)
    return render(summary, chosen) if chosen else summary


def fact_report(
    messages: Sequence[Message],
    previous_summary: str | None,
    summary: str,
    *,
    sent: Sequence[Message] = (),
) -> tuple[tuple[str, ...], tuple[str, ...]]:
    """``(kept, missing)``: the texts of the span's facts (those ``sent`` does not state)
    that ``summary`` states and those it does not."""
    facts = extract_facts(messages, previous_summary, sent=sent)
    missing = missing_facts(facts, summary)
    lost = {id(f) for f in missing}
    return tuple(f.text for f in facts if id(f) not in lost), tuple(f.text for f in missing)
