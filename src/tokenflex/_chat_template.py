"""Render a model's Jinja chat template the way Hugging Face ``apply_chat_template`` does.

Sandboxed (templates come from model files), with the globals and filters real templates
use: ``raise_exception``, ``strftime_now`` and a ``tojson`` that does not HTML-escape.
"""

from __future__ import annotations

import functools
import json
from collections.abc import Sequence
from datetime import datetime
from typing import Any

from .errors import ConfigError, InvalidMessagesError

__all__ = ["TemplateRejected", "compile_template", "render"]


class TemplateRejected(InvalidMessagesError):
    """The chat template refused the messages (``raise_exception`` or a template error)."""


def _raise_exception(message: str) -> None:
    import jinja2

    raise jinja2.exceptions.TemplateError(message)


def _tojson(
    value: Any,
    ensure_ascii: bool = False,
    indent: int | None = None,
    separators: tuple[str, str] | None = None,
    sort_keys: bool = False,
) -> str:
    return json.dumps(
        value, ensure_ascii=ensure_ascii, indent=indent, separators=separators, sort_keys=sort_keys
    )


def _strftime_now(fmt: str) -> str:
    return datetime.now().strftime(fmt)


@functools.lru_cache(maxsize=64)
def compile_template(source: str) -> Any:
    """A compiled, sandboxed ``jinja2.Template`` (cached per template text).

    Raises:
        ConfigError: the template is not valid Jinja.
    """
    import jinja2
    import jinja2.ext
    from jinja2.sandbox import ImmutableSandboxedEnvironment

    env = ImmutableSandboxedEnvironment(
        trim_blocks=True, lstrip_blocks=True, extensions=[jinja2.ext.loopcontrols]
    )
    env.filters["tojson"] = _tojson
    env.globals["raise_exception"] = _raise_exception
    env.globals["strftime_now"] = _strftime_now
    try:
        return env.from_string(source)
    except jinja2.exceptions.TemplateSyntaxError as exc:
        raise ConfigError(
            f"The chat template is not valid Jinja (line {exc.lineno}: {exc.message}). "
            "Use the chat_template string from the model's tokenizer_config.json."
        ) from exc


def render(
    template: Any,
    messages: Sequence[Any],
    *,
    add_generation_prompt: bool,
    bos_token: str = "",
    eos_token: str = "",
    tools: Sequence[Any] | None = None,
) -> str:
    """The prompt text the template makes of ``messages``.

    Raises:
        TemplateRejected: the template raised (e.g. "roles must alternate").
    """
    import jinja2

    try:
        text: str = template.render(
            messages=list(messages),
            add_generation_prompt=add_generation_prompt,
            bos_token=bos_token,
            eos_token=eos_token,
            tools=list(tools) if tools else None,
        )
    except (jinja2.exceptions.TemplateError, TypeError, ValueError, LookupError) as exc:
        # Templates also fail with plain Python errors, e.g. "+" on list content.
        raise TemplateRejected(
            f"The model's chat template rejected the messages: {exc}. Fix the conversation "
            "(roles, order) to what the template accepts."
        ) from exc
    return text
