"""Calibration from the wire: what was predicted against what the upstream counted.

A plan's ``input_tokens`` is a prediction; the upstream's ``usage`` is the truth for the
model it runs. A long-running process (the proxy) records both per upstream and model and
learns a *factor* that every text count for that model is multiplied by. Each eligible
observation says which factor its request needed:

``needed = (reported - fixed) / text``

where ``text`` is the unscaled count of the messages' text and ``fixed`` the rest of the
prediction (the per-message envelope, tools, images: what a text factor does not scale).
The factor moves toward ``needed x headroom`` (2%, for requests shaped differently), and
what one upstream answer can do is bounded, so one wrong or hostile answer cannot set a
model's counts for every client:

- **up**, when the upstream counted more than predicted: at most ``x max_step`` (1.25)
  per observation, never above ``max_factor`` (4: a model reported at 4x its prediction
  has a wrong registry entry, not a tokenizer difference; the warning says so);
- **down**, once ``min_observations`` (8) eligible answers were seen: at most
  ``x down_step`` (0.95) per observation, never below the largest ``needed`` ever
  observed (plus headroom) nor below ``min_factor`` (0.5), nor below 1 for a model whose
  text is counted with its own (exact) tokenizer;
- **not at all** from a request whose text is under ``min_text_share`` (50%) of the
  prediction or under ``min_text_tokens`` (16): a one-word request or a request that is
  mostly tool schemas says nothing about how text is counted.

Entries are kept in memory for at most ``max_models`` upstream + model pairs, with names
of at most :data:`MAX_NAME` characters; when full, an entry that learned nothing is
forgotten before one that did, so requests with made-up model names cannot evict a
learned factor. :meth:`Calibration.apply` gives the calibrated
:class:`~tokenflex.models.Model` to plan with (its tokenizer ``BASE#xFACTOR``), and
:meth:`Calibration.snapshot` lists the figures, per tenant when asked (``owner``).

>>> cal = Calibration()
>>> obs = cal.observe("my-llm", predicted=1000, reported=1100)
>>> obs.under, cal.factor("my-llm")
(True, 1.13)
>>> obs = cal.observe("my-llm", predicted=100, reported=1000)  # one answer: one step
>>> cal.factor("my-llm")
1.41
"""

from __future__ import annotations

import logging
import math
import threading
from collections import OrderedDict
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any

from .models import Model
from .session import run_length
from .tokenizers import get_tokenizer, register_tokenizer

__all__ = [
    "HEADROOM",
    "MAX_FACTOR",
    "MAX_NAME",
    "MAX_STEP",
    "MIN_FACTOR",
    "Calibration",
    "ModelCalibration",
    "Observation",
    "ScaledTokenizer",
    "factor_of",
    "scaled_tokenizer",
]

log = logging.getLogger("tokenflex")

MAX_FACTOR = 4.0
"""The highest factor calibration sets (a model that needs more has a wrong entry)."""
MIN_FACTOR = 0.5
"""The lowest factor calibration sets (counts halved at most)."""
HEADROOM = 1.02
"""Added on top of the observed ratio: the per-message constants are not scaled."""
MAX_STEP = 1.25
"""The most one observation raises a factor by (multiplied)."""
DOWN_STEP = 0.95
"""The most one observation lowers a factor by (multiplied)."""
MIN_TEXT_SHARE = 0.5
"""Observations whose text is a smaller share of the prediction teach nothing."""
MIN_TEXT_TOKENS = 16
"""Observations with less text than this teach nothing (rounding is most of it)."""
MIN_OBSERVATIONS = 8
"""Eligible observations needed before a factor may fall."""
MAX_NAME = 200
"""Longest model (or upstream) name calibration keeps figures for."""
MAX_OWNERS = 64
"""Tenants whose own figures are kept per entry (the least recent go first)."""
TEXT_LISTS = 64
"""Plans' message lists whose text counts are kept for the next plan of their
conversation (:meth:`Calibration.observe_plan` with ``read_once``)."""
TEXT_MESSAGES = 20_000
"""Messages those lists hold, in all (a longer list is counted, not kept)."""
_SEP = "#x"


class ScaledTokenizer:
    """A tokenizer's counts times ``factor``, rounded up (never exact)."""

    exact = False

    def __init__(self, base: str, factor: float) -> None:
        self.base = base
        self.factor = factor
        self.name = f"{base}{_SEP}{factor:g}"

    def count(self, text: str) -> int:
        """``ceil(base count x factor)``."""
        return math.ceil(get_tokenizer(self.base).count(text) * self.factor)


def scaled_tokenizer(base: str, factor: float) -> str:
    """The name of ``base`` scaled by ``factor`` (registered on first use; a factor of 1
    is ``base`` itself).

    >>> from tokenflex.tokenizers import get_tokenizer
    >>> get_tokenizer(scaled_tokenizer("o200k_base", 1.5)).count("Hello, world!")
    6
    """
    base, _, _ = base.partition(_SEP)
    if factor == 1.0:
        return base
    tok = ScaledTokenizer(base, factor)
    register_tokenizer(tok.name, lambda: tok, replace=True)
    return tok.name


def factor_of(tokenizer: str) -> float:
    """The factor a tokenizer name carries (1.0 for an unscaled one).

    >>> factor_of("o200k_base#x1.25"), factor_of("o200k_base")
    (1.25, 1.0)
    """
    _, sep, factor = tokenizer.rpartition(_SEP)
    try:
        value = float(factor) if sep else 1.0
    except ValueError:
        return 1.0
    return value if math.isfinite(value) and value > 0 else 1.0


def _up(x: float) -> float:
    """``x`` rounded up to hundredths (a factor never rounds below what was needed)."""
    return math.ceil(round(x * 100, 6)) / 100


def _down(x: float) -> float:
    return math.floor(round(x * 100, 6)) / 100


@dataclass
class Figures:
    """Counts over a set of observations (a model's, or one tenant's share of them)."""

    observations: int = 0
    under: int = 0
    """Responses whose reported input tokens exceeded the prediction."""
    ignored: int = 0
    """Observations that taught nothing (too little text, see the module docstring)."""
    predicted_tokens: int = 0
    """Sum of predicted input tokens over the observations."""
    reported_tokens: int = 0
    """Sum of the upstream's reported input tokens over the observations."""
    last_predicted: int = 0
    last_reported: int = 0

    def add(self, predicted: int, reported: int, under: bool, ignored: bool) -> None:
        self.observations += 1
        self.under += under
        self.ignored += ignored
        self.predicted_tokens += predicted
        self.reported_tokens += reported
        self.last_predicted, self.last_reported = predicted, reported

    def as_dict(self) -> dict[str, int]:
        return {
            "observations": self.observations,
            "under": self.under,
            "ignored": self.ignored,
            "predicted_tokens": self.predicted_tokens,
            "reported_tokens": self.reported_tokens,
            "last_predicted": self.last_predicted,
            "last_reported": self.last_reported,
        }


@dataclass
class ModelCalibration:
    """The figures recorded for one model of one upstream."""

    model: str
    upstream: str = ""
    factor: float = 1.0
    """What counts for this model are multiplied by from now on."""
    figures: Figures = field(default_factory=Figures)
    """Every observation's figures, all tenants together."""
    eligible: int = 0
    """Observations the factor learned from."""
    worst_ratio: float = 0.0
    """The largest factor an eligible observation needed (the factor never falls below
    it, plus headroom)."""
    owners: OrderedDict[str, Figures] = field(default_factory=OrderedDict, repr=False)
    """Each tenant's own share of the figures (at most :data:`MAX_OWNERS`)."""

    @property
    def learned(self) -> bool:
        """Whether an observation moved the factor (such an entry is evicted last)."""
        return self.factor != 1.0

    def as_dict(self, owner: str | None = None) -> dict[str, Any]:
        """Plain data: all figures, or (``owner``) only that tenant's own share."""
        figures = self.figures if owner is None else self.owners.get(owner, Figures())
        out: dict[str, Any] = {"model": self.model, "factor": self.factor}
        out |= figures.as_dict()
        if owner is None:
            out |= {"upstream": self.upstream, "eligible": self.eligible}
            out["worst_ratio"] = self.worst_ratio
        return out


@dataclass(frozen=True)
class Observation:
    """One response's figures, and what calibration did about them."""

    model: str
    predicted: int
    reported: int
    factor_before: float
    factor: float
    """The model's factor after this observation."""
    under: bool
    """The upstream reported more than predicted."""
    capped: bool = False
    """The factor it needed was above ``max_factor``."""
    ignored: str = ""
    """Why this observation taught nothing ("" when it was learned from)."""
    needed: float | None = None
    """The factor this request needed (None when ignored)."""

    def message(self) -> str:
        """A one-line account for the log and the header."""
        if not self.under:
            return f"ok: predicted {self.predicted:,}, upstream counted {self.reported:,}"
        text = (
            f"undercount: predicted {self.predicted:,} input tokens for {self.model[:MAX_NAME]!r}, "
            f"the upstream counted {self.reported:,} ({self.reported - self.predicted:,} more); "
        )
        if self.ignored:
            return text + f"not learned from: {self.ignored}"
        if self.factor == self.factor_before:
            return text + f"count factor stays {self.factor:g}"
        text += f"count factor raised from {self.factor_before:g} to {self.factor:g}"
        if self.capped:
            text += (
                f" (capped: it needs more than {self.factor:g}x, so the registry entry is "
                "probably wrong; check it with 'tokenflex models --check URL')"
            )
        elif self.needed is not None and self.factor < _up(self.needed * HEADROOM):
            text += f" (it needs {self.needed:.2f}; one answer moves it at most x{MAX_STEP:g})"
        return text


_NO_ENVELOPES = dict.fromkeys(("system", "developer", "user", "assistant"), 0)


def _text_counts(base: Any, messages: Sequence[Any], used: float) -> tuple[int, int]:
    """The text of ``messages`` counted by ``base``: unscaled, and as the prediction
    counted it (each part's count times ``used``, rounded up)."""
    if used == 1.0 and type(messages) is list:
        bulk = base.plain_total(messages, _NO_ENVELOPES)  # plain chat: one C loop
        if bulk is not None:
            return bulk, bulk
    text = scaled = 0
    for message in messages:
        for part in _texts(message.get("content")):
            n = base.count(part)
            text += n
            scaled += math.ceil(n * used) if used != 1.0 else n
    return text, scaled


def _texts(content: Any) -> list[str]:
    if isinstance(content, str):
        return [content]
    if isinstance(content, list):
        return [
            p["text"]
            for p in content
            if isinstance(p, dict) and p.get("type") == "text" and isinstance(p.get("text"), str)
        ]
    return []


def _opens_with(messages: list[Any], last: list[Any]) -> bool:
    """Whether ``messages`` opens with ``last``'s messages: the very objects, or equal
    ones where a plan made a message again (a cut note or a cleared copy is made anew on
    every fit, with the same text): equal messages have the same text counts."""
    n = len(last)
    if n > len(messages):
        return False
    k = 0
    while True:
        k += run_length(messages, k, last, k)
        if k >= n:
            return True
        if messages[k] != last[k]:
            return False
        k += 1


class Calibration:
    """Per upstream and model factors learned from upstream usage (thread-safe, in
    memory, bounded)."""

    def __init__(
        self,
        *,
        max_factor: float = MAX_FACTOR,
        min_factor: float = MIN_FACTOR,
        headroom: float = HEADROOM,
        max_step: float = MAX_STEP,
        down_step: float = DOWN_STEP,
        min_text_share: float = MIN_TEXT_SHARE,
        min_text_tokens: int = MIN_TEXT_TOKENS,
        min_observations: int = MIN_OBSERVATIONS,
        max_models: int = 256,
    ) -> None:
        if not (
            0 < min_factor <= 1.0 <= max_factor
            and headroom >= 1.0
            and max_step > 1.0
            and 0 < down_step < 1.0
            and max_models >= 1
            and min_observations >= 2
        ):
            raise ValueError(
                "Calibration needs 0 < min_factor <= 1 <= max_factor, headroom >= 1, "
                "max_step > 1, 0 < down_step < 1, min_observations >= 2 and max_models >= 1; "
                f"got min_factor={min_factor}, max_factor={max_factor}, headroom={headroom}, "
                f"max_step={max_step}, down_step={down_step}, "
                f"min_observations={min_observations}, max_models={max_models}."
            )
        self.max_factor = max_factor
        self.min_factor = min_factor
        self.headroom = headroom
        self.max_step = max_step
        self.down_step = down_step
        self.min_text_share = min_text_share
        self.min_text_tokens = min_text_tokens
        self.min_observations = min_observations
        self.max_models = max_models
        self._models: OrderedDict[tuple[str, str], ModelCalibration] = OrderedDict()
        self._lock = threading.Lock()
        # (tokenizer, factor, id of the first message) -> a plan's messages (never
        # edited), their text unscaled and scaled: see observe_plan's read_once
        self._texts: OrderedDict[tuple[str, float, int], tuple[list[Any], int, int]] = OrderedDict()
        self._texts_held = 0  # the messages of the lists in _texts

    def factor(self, model: str, upstream: str = "") -> float:
        """The factor counts for ``model`` (served by ``upstream``) are multiplied by."""
        with self._lock:
            found = self._models.get((upstream, model))
            return found.factor if found is not None else 1.0

    def apply(self, model: Model, upstream: str = "") -> Model:
        """``model`` counting with its factor (itself when the factor is 1)."""
        factor = self.factor(model.name, upstream)
        if factor == 1.0:
            return model
        return model.replace(tokenizer=scaled_tokenizer(model.tokenizer, factor))

    def observe(
        self,
        model: str,
        predicted: int,
        reported: int,
        *,
        upstream: str = "",
        owner: str = "",
        factor_used: float | None = None,
        text_tokens: int | None = None,
        scaled_text_tokens: int | None = None,
        exact: bool = False,
    ) -> Observation:
        """Record one response: ``predicted`` input tokens (made with ``factor_used``,
        default the current factor) against the upstream's ``reported`` count.

        ``text_tokens`` (unscaled) and ``scaled_text_tokens`` (as counted in the
        prediction) are the messages' text; the rest of the prediction is the fixed
        envelope. Left out, the whole prediction is taken for text. ``owner`` is the
        tenant the request came from (its own figures are listed to it alone). ``exact``:
        the text was counted with the model's own tokenizer, so the factor never falls
        below 1 (an upstream that reports less is not believed)."""
        used = factor_used
        if text_tokens is None:
            text, scaled = None, predicted
        else:
            text, scaled = text_tokens, scaled_text_tokens or 0
        ignored = self._ignored(model, upstream, predicted, reported, scaled)
        under = reported > predicted
        if len(model) > MAX_NAME or len(upstream) > MAX_NAME:
            return Observation(model, predicted, reported, 1.0, 1.0, under, ignored=ignored)
        with self._lock:
            entry = self._entry(upstream, model)
            before = entry.factor
            used = before if used is None else used
            needed: float | None = None
            if not ignored:
                if text is None or text <= 0:
                    needed = used * reported / max(predicted, 1)
                else:
                    needed = (reported - (predicted - scaled)) / text
                needed = max(needed, 0.0)
            capped = self._learn(entry, needed, under, 1.0 if exact else self.min_factor)
            entry.figures.add(predicted, reported, under, bool(ignored))
            mine = entry.owners.get(owner)
            if mine is None:
                mine = entry.owners[owner] = Figures()
                while len(entry.owners) > MAX_OWNERS:
                    entry.owners.popitem(last=False)
            entry.owners.move_to_end(owner)
            mine.add(predicted, reported, under, bool(ignored))
            obs = Observation(
                model, predicted, reported, before, entry.factor, under, capped, ignored, needed
            )
        if under:
            log.warning("tokenflex calibration: %s", obs.message())
        return obs

    def _ignored(
        self, model: str, upstream: str, predicted: int, reported: int, scaled_text: int
    ) -> str:
        """Why an observation teaches nothing ("" when it does)."""
        if len(model) > MAX_NAME or len(upstream) > MAX_NAME:
            return f"a model or upstream name over {MAX_NAME} characters is not kept"
        if predicted <= 0 or reported < 0:
            return "no prediction"
        if scaled_text < self.min_text_tokens:
            return f"{scaled_text:,} tokens of text (under {self.min_text_tokens})"
        share = scaled_text / predicted
        if share < self.min_text_share:
            return (
                f"text is {share:.0%} of the prediction (under {self.min_text_share:.0%}: "
                "the rest is tools, envelope or media)"
            )
        return ""

    def _entry(self, upstream: str, model: str) -> ModelCalibration:
        """The entry for ``(upstream, model)``, created when new; when over ``max_models``,
        the least recent entry that learned nothing goes first, then the least recent."""
        key = (upstream, model)
        entry = self._models.get(key)
        if entry is None:
            entry = self._models[key] = ModelCalibration(model, upstream)
            while len(self._models) > self.max_models:
                victim = next(
                    (k for k, e in self._models.items() if not e.learned and k != key),
                    next(iter(self._models)),
                )
                del self._models[victim]
        self._models.move_to_end(key)
        return entry

    def _learn(
        self, entry: ModelCalibration, needed: float | None, under: bool, lowest: float
    ) -> bool:
        """Move ``entry``'s factor toward ``needed``, one bounded step: up when the
        prediction was ``under`` the report, down when it held (and enough answers were
        seen); whether what it needed is over ``max_factor``."""
        if needed is None:
            return False
        entry.eligible += 1
        entry.worst_ratio = max(entry.worst_ratio, round(needed, 4))
        wanted = _up(needed * self.headroom)
        capped = wanted > self.max_factor
        factor = entry.factor
        if under and wanted > factor:
            step = max(_down(factor * self.max_step), factor + 0.01)
            factor = min(wanted, step, self.max_factor)
        elif not under and entry.eligible >= self.min_observations:
            floor = max(_up(entry.worst_ratio * self.headroom), lowest)
            if factor > floor:
                factor = max(floor, _up(factor * self.down_step))
        entry.factor = min(max(factor, self.min_factor), self.max_factor)
        return capped

    def observe_plan(
        self,
        plan: Any,
        reported: int,
        *,
        upstream: str = "",
        owner: str = "",
        read_once: bool = False,
    ) -> Observation:
        """:meth:`observe` for a :class:`~tokenflex.Plan`: its model, input tokens, the
        factor its tokenizer carried, and its messages' text counted both ways.

        ``read_once``: no one edits the plan's messages (a proxy's: the objects of a
        request's parse, and the messages its plan made). The text counts of the plans last
        observed are then kept with their lists (:data:`TEXT_LISTS`, :data:`TEXT_MESSAGES`),
        and a plan whose messages open with the very objects of one of them counts only
        the messages after those: the same conversation again, or grown by a turn, costs
        what it adds, not its whole history on every answer."""
        model: Model = plan.model
        used = factor_of(model.tokenizer)
        text = scaled = 0
        exact = False
        if len(model.name) <= MAX_NAME:
            name = model.tokenizer.partition(_SEP)[0]
            base = get_tokenizer(name)
            exact = bool(getattr(base, "exact", False))
            messages = plan.messages
            if read_once and type(messages) is list and messages:
                text, scaled = self._text_counts_kept(name, base, messages, used)
            else:
                text, scaled = _text_counts(base, messages, used)
        return self.observe(
            model.name,
            plan.input_tokens,
            reported,
            upstream=upstream,
            owner=owner,
            factor_used=used,
            text_tokens=text,
            scaled_text_tokens=scaled,
            exact=exact,
        )

    def _text_counts_kept(
        self, name: str, base: Any, messages: list[Any], used: float
    ) -> tuple[int, int]:
        """:func:`_text_counts` of ``messages`` (never edited), from the counts kept for
        a list they open with (by the objects: the kept list holds its first message, so
        its id names no other), counting only the messages after it; kept in turn."""
        key = (name, used, id(messages[0]))
        with self._lock:
            known = self._texts.get(key)
            if known is not None:
                self._texts.move_to_end(key)  # (the least recently observed go first)
        done = text = scaled = 0
        if known is not None:
            last, t, s = known
            if _opens_with(messages, last):
                done, text, scaled = len(last), t, s
        if done < len(messages):
            more = _text_counts(base, messages[done:], used)
            text, scaled = text + more[0], scaled + more[1]
        if done != len(messages) and len(messages) <= TEXT_MESSAGES:
            with self._lock:
                old = self._texts.pop(key, None)
                if old is not None:
                    self._texts_held -= len(old[0])
                self._texts[key] = (list(messages), text, scaled)
                self._texts_held += len(messages)
                while len(self._texts) > TEXT_LISTS or self._texts_held > TEXT_MESSAGES:
                    self._texts_held -= len(self._texts.popitem(last=False)[1][0])
        return text, scaled

    def snapshot(
        self, *, owner: str | None = None, upstream: str | None = None
    ) -> dict[str, dict[str, Any]]:
        """Each model's figures, as plain data, by model name (``model@upstream`` when
        ``upstream`` is not given and the entry has one).

        Args:
            owner: Only the models this tenant's requests were observed for, each with
                its factor and the tenant's own figures (``GET /tokenflex/calibration``):
                no other tenant's names or volumes.
            upstream: Only this upstream's models.
        """
        with self._lock:
            out: dict[str, dict[str, Any]] = {}
            for (up, name), entry in self._models.items():
                if upstream is not None and up != upstream:
                    continue
                if owner is not None and owner not in entry.owners:
                    continue
                key = f"{name}@{up}" if up and upstream is None else name
                out[key] = entry.as_dict(owner)
            return out

    def totals(self) -> dict[str, int]:
        """How many entries are kept and observations made, all tenants together."""
        with self._lock:
            return {
                "models": len(self._models),
                "observations": sum(e.figures.observations for e in self._models.values()),
            }

    def reset(self) -> None:
        """Forget every model's figures."""
        with self._lock:
            self._models.clear()
