"""FitOptions: every knob of fit(), validated once.

:class:`FitOptions` holds the defaults the seeds argue for; ``_options`` builds one from
``fit(**options)`` keywords and names a misspelled option with its closest match.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

from .budget import Policy
from .errors import InvalidInputError

__all__ = ["FitOptions"]


@dataclass(frozen=True)
class FitOptions:
    """Every knob of :func:`fit`, with the defaults the seeds argue for."""

    max_tokens: int | None = None
    """Output request; None: the model's max output, else 4,000 (seed 002)."""
    policy: Policy = "reserve"
    """``reserve``: keep the requested output, trim input. ``flex``: keep input, let the
    output shrink to the floor (seed 000)."""
    min_output_tokens: int = 500
    safety_margin: int = 100
    history_share: float = 0.8
    """Soft target share of the room history may fill (seed 001); 1.0 fills it all."""
    min_messages: int = 0
    """Keep at least this many history groups if the window allows (a tool call with its
    results is one group)."""
    max_messages: int | None = None
    """Keep at most this many history groups."""
    max_input_tokens: int | None = None
    """Cap on input tokens (seed 002's MAX_INPUT_TOKENS); crossing it trims or summarizes."""
    keep_recent: int = 6
    """Messages kept verbatim when summarizing (seed 002's KEEP_RECENT_MESSAGES)."""
    summary_max_tokens: int = 512
    documents_cap: int | None = None
    documents_format: str = "markdown"
    documents_policy: str = "skip"
    documents_safety_buffer: int = 64
    fallback_models: tuple[str, ...] = ()
    fallback_input_share: float | None = None
    """Seed 003's FALLBACK rule: switch to a fallback model when the required input is above
    this share of the primary's window (0.90 in the seed), not only when it cannot fit."""
    strict: bool = False
    """Unknown model names raise instead of getting the conservative default."""
    page_size: int = 50
    """Page size when reading a lazy history source."""
    extra: dict[str, Any] = field(default_factory=dict)

    def __post_init__(self) -> None:
        checks: list[tuple[str, Any, bool]] = [
            ("max_tokens", self.max_tokens, self.max_tokens is None or self.max_tokens > 0),
            ("min_output_tokens", self.min_output_tokens, self.min_output_tokens >= 0),
            ("safety_margin", self.safety_margin, self.safety_margin >= 0),
            ("history_share", self.history_share, 0 < self.history_share <= 1),
            ("min_messages", self.min_messages, self.min_messages >= 0),
            (
                "max_messages",
                self.max_messages,
                self.max_messages is None or self.max_messages >= 0,
            ),
            (
                "max_input_tokens",
                self.max_input_tokens,
                self.max_input_tokens is None or self.max_input_tokens > 0,
            ),
            ("keep_recent", self.keep_recent, self.keep_recent >= 0),
            ("summary_max_tokens", self.summary_max_tokens, self.summary_max_tokens > 0),
            ("policy", self.policy, self.policy in ("reserve", "flex")),
            ("page_size", self.page_size, self.page_size > 0),
            (
                "fallback_input_share",
                self.fallback_input_share,
                self.fallback_input_share is None or 0 < self.fallback_input_share <= 1,
            ),
        ]
        for name, value, ok in checks:
            if not ok or isinstance(value, bool):
                raise InvalidInputError(
                    f"{name}={value!r} is not valid: max_tokens, max_input_tokens and "
                    "summary_max_tokens must be positive integers, history_share in (0, 1], "
                    "counts non-negative, policy 'reserve' or 'flex'."
                )


def _options(options: Mapping[str, Any]) -> FitOptions:
    try:
        opts = dict(options)
        if "fallback_models" in opts:
            opts["fallback_models"] = tuple(opts["fallback_models"])
        return FitOptions(**opts)
    except TypeError as exc:
        import dataclasses
        import difflib

        names = [f.name for f in dataclasses.fields(FitOptions)]
        bad = [k for k in options if k not in names]
        close = {k: difflib.get_close_matches(k, names, n=1) for k in bad}
        hint = ", ".join(
            f"{k!r}" + (f" (did you mean {c[0]!r}?)" if c else "") for k, c in close.items()
        )
        raise InvalidInputError(f"Unknown fit() option {hint}. Options: {names}.") from exc
