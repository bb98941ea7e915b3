"""Every error tokenflex raises, under one base class.

    TokenflexError
    ├── UnknownModelError(KeyError)          model name not in the registry (strict mode)
    ├── TokenizerUnavailableError(LookupError) tokenizer missing, extra not installed, bad data
    ├── InvalidMessagesError(ValueError)     messages not in the OpenAI chat shape
    ├── InvalidInputError(ValueError)        any other bad argument or input file
    ├── ConfigError(ValueError)              bad settings / TOML / registry override
    ├── ContextOverflowError(ValueError)     the request cannot be made to fit (carries numbers)
    ├── SummarizerError(RuntimeError)        the summarizer failed (fit() falls back, see warnings)
    └── UpstreamError(RuntimeError)          an upstream LLM server answered with an error

Messages carry the numbers, the offending value and the fix.
"""

from __future__ import annotations

import difflib
from collections.abc import Iterable

__all__ = [
    "ConfigError",
    "ContextOverflowError",
    "InvalidInputError",
    "InvalidMessagesError",
    "SummarizerError",
    "TokenflexError",
    "TokenizerUnavailableError",
    "UnknownModelError",
    "UpstreamError",
]


class TokenflexError(Exception):
    """Base class of every error tokenflex raises on purpose."""


class UnknownModelError(TokenflexError, KeyError):
    """A model name the registry does not know (raised in strict mode)."""

    def __init__(self, name: str, known: Iterable[str] = (), *, family: str = "") -> None:
        close = difflib.get_close_matches(name, list(known), n=3, cutoff=0.5)
        hint = f" Did you mean {', '.join(repr(c) for c in close)}?" if close else ""
        fallback = (
            f"the numbers of its family, {family}"
            if family
            else "the conservative 8,192-token default"
        )
        super().__init__(
            f"Unknown model {name!r}.{hint} Register it with tokenflex.register_model(...) "
            f"or a TOML file named by TOKENFLEX_MODELS_FILE, or pass strict=False to use "
            f"{fallback}."
        )
        self.name = name

    def __str__(self) -> str:  # KeyError would repr() the message
        return str(self.args[0])


class TokenizerUnavailableError(TokenflexError, LookupError):
    """A tokenizer that cannot be loaded (unknown name, missing extra, bad checksum)."""


class InvalidMessagesError(TokenflexError, ValueError):
    """Messages that are not a list of OpenAI-style chat message dicts."""


class InvalidInputError(TokenflexError, ValueError):
    """An argument or input file that tokenflex cannot use."""


class ConfigError(TokenflexError, ValueError):
    """Settings, config files or registry overrides that are invalid."""


class ContextOverflowError(TokenflexError, ValueError):
    """The required input plus the output floor cannot fit the context window.

    Attributes give the numbers so callers can react without parsing the message.
    """

    def __init__(
        self,
        message: str,
        *,
        model: str = "",
        context_window: int = 0,
        required_tokens: int = 0,
        max_tokens: int = 0,
        safety_margin: int = 0,
    ) -> None:
        super().__init__(message)
        self.model = model
        self.context_window = context_window
        self.required_tokens = required_tokens
        self.max_tokens = max_tokens
        self.safety_margin = safety_margin

    @property
    def overflow(self) -> int:
        """Tokens over the window: required + max_tokens + margin - window."""
        return self.required_tokens + self.max_tokens + self.safety_margin - self.context_window


class SummarizerError(TokenflexError, RuntimeError):
    """The summarizer failed; fit() falls back to dropping and says so in warnings."""


class UpstreamError(TokenflexError, RuntimeError):
    """An upstream LLM server answered with an error status."""

    def __init__(self, message: str, *, status_code: int = 502, body: str = "") -> None:
        super().__init__(message)
        self.status_code = status_code
        self.body = body
