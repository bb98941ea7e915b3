"""Calibration from the wire: what was predicted against what the upstream counted.

A plan's ``input_tokens`` is a prediction; the upstream's ``usage.prompt_tokens`` is the
truth for the model it runs. A long-running process (the proxy) records both per model.
When the upstream reports more than was predicted, the bound did not hold: the process
warns (log, and the proxy's ``x-tokenflex-calibration`` header) and raises that model's
*factor*, so that from then on every text count for the model is multiplied by it:

``factor = min(max_factor, headroom * max(factor_used * reported / predicted,
(reported - fixed) / text))``

``factor_used`` is the factor the prediction was made with (read from the plan's
tokenizer name, so concurrent plans do not confuse it). ``text`` is the unscaled count of
the messages' text and ``fixed`` the rest of the prediction (the per-message envelope,
which a text factor does not scale): with the second term the same request, counted
again, is predicted at least at what the upstream reported; ``headroom`` (2%) is for
requests shaped differently. Factors only rise, never above
``max_factor`` (a model reported at 4x its prediction is a wrong registry entry, not a
tokenizer difference: the warning says so), and live in memory, for at most
``max_models`` models. :meth:`Calibration.apply` gives the calibrated
:class:`~tokenflex.models.Model` to plan with (its tokenizer ``BASE#xFACTOR``).

>>> cal = Calibration()
>>> obs = cal.observe("my-llm", predicted=1000, reported=1100)
>>> obs.under, cal.factor("my-llm")
(True, 1.13)
"""

from __future__ import annotations

import logging
import math
import threading
from collections import OrderedDict
from dataclasses import asdict, dataclass
from typing import Any

from .models import Model
from .tokenizers import get_tokenizer, register_tokenizer

__all__ = [
    "HEADROOM",
    "MAX_FACTOR",
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
HEADROOM = 1.02
"""Added on top of the observed ratio: the per-message constants are not scaled."""
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
    """The name of ``base`` scaled by ``factor`` (registered on first use).

    >>> from tokenflex.tokenizers import get_tokenizer
    >>> get_tokenizer(scaled_tokenizer("o200k_base", 1.5)).count("Hello, world!")
    6
    """
    base, _, _ = base.partition(_SEP)
    if factor <= 1.0:
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
        return float(factor) if sep else 1.0
    except ValueError:
        return 1.0


@dataclass
class ModelCalibration:
    """The figures recorded for one model."""

    model: str
    factor: float = 1.0
    """What counts for this model are multiplied by from now on."""
    observations: int = 0
    under: int = 0
    """Responses whose reported prompt tokens exceeded the prediction."""
    predicted_tokens: int = 0
    """Sum of predicted input tokens over the observations."""
    reported_tokens: int = 0
    """Sum of the upstream's ``usage.prompt_tokens`` over the observations."""
    worst_ratio: float = 0.0
    """Highest reported / predicted seen."""
    last_predicted: int = 0
    last_reported: int = 0


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

    def message(self) -> str:
        """A one-line account for the log and the header."""
        if not self.under:
            return f"ok: predicted {self.predicted:,}, upstream counted {self.reported:,}"
        text = (
            f"undercount: predicted {self.predicted:,} input tokens for {self.model!r}, the "
            f"upstream counted {self.reported:,} ({self.reported - self.predicted:,} more); "
            f"count factor raised from {self.factor_before:g} to {self.factor:g}"
        )
        if self.capped:
            text += (
                f" (capped: it needs more than {self.factor:g}x, so the registry entry is "
                "probably wrong; check it with 'tokenflex models --check URL')"
            )
        return text


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


class Calibration:
    """Per-model factors learned from upstream usage (thread-safe, in memory)."""

    def __init__(
        self,
        *,
        max_factor: float = MAX_FACTOR,
        headroom: float = HEADROOM,
        max_models: int = 256,
    ) -> None:
        if max_factor < 1.0 or headroom < 1.0 or max_models < 1:
            raise ValueError(
                f"Calibration needs max_factor >= 1, headroom >= 1 and max_models >= 1; got "
                f"{max_factor}, {headroom}, {max_models}."
            )
        self.max_factor = max_factor
        self.headroom = headroom
        self.max_models = max_models
        self._models: OrderedDict[str, ModelCalibration] = OrderedDict()
        self._lock = threading.Lock()

    def factor(self, model: str) -> float:
        """The factor counts for ``model`` are multiplied by (1.0 when never under)."""
        with self._lock:
            found = self._models.get(model)
            return found.factor if found is not None else 1.0

    def apply(self, model: Model) -> Model:
        """``model`` counting with its factor (itself when the factor is 1)."""
        factor = self.factor(model.name)
        if factor <= 1.0:
            return model
        return model.replace(tokenizer=scaled_tokenizer(model.tokenizer, factor))

    def observe(
        self,
        model: str,
        predicted: int,
        reported: int,
        *,
        factor_used: float | None = None,
        text_tokens: int = 0,
        scaled_text_tokens: int = 0,
    ) -> Observation:
        """Record one response: ``predicted`` input tokens (made with ``factor_used``,
        default the current factor) against the upstream's ``reported`` count.

        ``text_tokens`` (unscaled) and ``scaled_text_tokens`` (as counted in the
        prediction) are the messages' text, when known: the rest of the prediction is the
        fixed envelope, and the factor is raised so the text covers the difference."""
        with self._lock:
            entry = self._models.get(model)
            if entry is None:
                entry = self._models[model] = ModelCalibration(model)
                while len(self._models) > self.max_models:
                    self._models.popitem(last=False)
            self._models.move_to_end(model)
            before = entry.factor
            used = before if factor_used is None else factor_used
            entry.observations += 1
            entry.predicted_tokens += predicted
            entry.reported_tokens += reported
            entry.last_predicted, entry.last_reported = predicted, reported
            under = reported > predicted
            capped = False
            if predicted > 0:
                entry.worst_ratio = max(entry.worst_ratio, reported / predicted)
            if under:
                entry.under += 1
                wanted = used * reported / max(predicted, 1)
                if text_tokens > 0:
                    fixed = predicted - scaled_text_tokens
                    wanted = max(wanted, (reported - fixed) / text_tokens)
                wanted = math.ceil(wanted * self.headroom * 100) / 100
                capped = wanted > self.max_factor
                entry.factor = max(entry.factor, min(wanted, self.max_factor))
            obs = Observation(model, predicted, reported, before, entry.factor, under, capped)
        if under:
            log.warning("tokenflex calibration: %s", obs.message())
        return obs

    def observe_plan(self, plan: Any, reported: int) -> Observation:
        """:meth:`observe` for a :class:`~tokenflex.Plan`: its model, input tokens, the
        factor its tokenizer carried, and its messages' text counted both ways."""
        model: Model = plan.model
        used = factor_of(model.tokenizer)
        base = get_tokenizer(model.tokenizer.partition(_SEP)[0])
        text = scaled = 0
        for message in plan.messages:
            for part in _texts(message.get("content")):
                n = base.count(part)
                text += n
                scaled += math.ceil(n * used) if used > 1.0 else n
        return self.observe(
            model.name,
            plan.input_tokens,
            reported,
            factor_used=used,
            text_tokens=text,
            scaled_text_tokens=scaled,
        )

    def snapshot(self) -> dict[str, dict[str, Any]]:
        """Every model's figures, as plain data (``GET /tokenflex/calibration``)."""
        with self._lock:
            return {name: asdict(entry) for name, entry in self._models.items()}

    def reset(self) -> None:
        """Forget every model's figures."""
        with self._lock:
            self._models.clear()
