"""Summary text in sentences and token budgets: split, trim and cut at sentence ends.

Every cut a summarizer makes lands on a sentence end when one fits, else on a word
boundary, so a summary or a piece of a long message never stops mid-word. Budgets are in
the tokens of a :data:`Count` resolved by :func:`counter_fn`.
"""

from __future__ import annotations

import re
from collections.abc import Callable
from typing import Any

__all__ = [
    "SENTENCE_END",
    "Count",
    "counter_fn",
    "split_sentences",
    "split_text",
    "trim_to_tokens",
]

Count = Callable[[str], int]

SENTENCE_END = re.compile(r"(?<=[.!?。！？])[\"')\]]*\s+")
"""The whitespace after a sentence end (closing quotes and brackets stay with the sentence)."""
_BOUNDARY = re.compile(r"(?<=[.!?。！？])[\"')\]]*\s+|\n+")
_CODE_FENCE = re.compile(r"```.*?(```|\Z)", re.S)


def counter_fn(counter: Any) -> Count:
    """A text counter from a MessageCounter (``.tokenizer.count``), a tokenizer
    (``.count``), a callable, a tokenizer name, or None (the conservative estimator)."""
    if counter is None:
        from ..tokenizers import get_tokenizer

        return get_tokenizer("estimate").count
    if isinstance(counter, str):
        from ..tokenizers import get_tokenizer

        return get_tokenizer(counter).count
    tok = getattr(counter, "tokenizer", None)
    if tok is not None and callable(getattr(tok, "count", None)):
        fn: Count = tok.count
        return fn
    if callable(getattr(counter, "count", None)):
        fn = counter.count
        return fn
    if callable(counter):
        return counter  # type: ignore[no-any-return]
    raise TypeError(f"Cannot count tokens with {counter!r}: pass a tokenizer or a counter.")


def split_sentences(text: str) -> list[str]:
    """The sentences of ``text``, whitespace collapsed, code blocks as ``[code]``."""
    text = _CODE_FENCE.sub(" [code] ", text)
    out: list[str] = []
    for para in re.split(r"\n\s*\n|\n(?=\s*(?:[-*•]|\d+[.)])\s)", text):
        para = " ".join(para.split())
        if para:
            out.extend(s.strip() for s in SENTENCE_END.split(para) if s.strip())
    return out


def trim_to_tokens(text: str, max_tokens: int, count: Count) -> str:
    """The longest prefix of ``text`` within ``max_tokens`` that ends at a sentence end
    (or, if no sentence fits, at a word boundary, with an ellipsis)."""
    text = text.strip()
    if count(text) <= max_tokens:
        return text
    ends = [m.start() for m in _BOUNDARY.finditer(text)]
    lo, hi, best = 0, len(ends) - 1, ""
    while lo <= hi:  # counts grow with the prefix: binary search the last end that fits
        mid = (lo + hi) // 2
        candidate = text[: ends[mid]].rstrip()
        if count(candidate) <= max_tokens:
            best, lo = candidate, mid + 1
        else:
            hi = mid - 1
    if best:
        return best
    words = text.split()
    lo, hi = 0, len(words)
    while lo < hi:
        mid = (lo + hi + 1) // 2
        if count(" ".join(words[:mid]) + " …") <= max_tokens:
            lo = mid
        else:
            hi = mid - 1
    return " ".join(words[:lo]) + " …" if lo else ""


def split_text(text: str, budget: int, count: Count) -> list[str]:
    """``text`` in parts of at most ``budget`` tokens, cut at sentences, then words."""
    parts: list[str] = []
    current = ""
    for s in split_sentences(text) or [text]:
        trial = f"{current} {s}".strip()
        if count(trial) <= budget:
            current = trial
            continue
        if current:
            parts.append(current)
        if count(s) <= budget:
            current = s
            continue
        words, current = s.split(), ""
        for w in words:
            trial = f"{current} {w}".strip()
            if count(trial) <= budget or not current:
                current = trial
            else:
                parts.append(current)
                current = w
    if current:
        parts.append(current)
    return parts
