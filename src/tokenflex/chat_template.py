"""A model's Jinja chat template, rendered as Hugging Face ``apply_chat_template`` does,
sandboxed and bounded.

Rendering is sandboxed (templates come from model files, and from servers' ``/props``),
with the globals and filters real templates use: ``raise_exception``, ``strftime_now``
and a ``tojson`` that does not HTML-escape.

A template is code from elsewhere, so one render is bounded (:class:`RenderBudget`): at
most :data:`RENDER_SECONDS` of CPU-bound work (every loop step, call and operator is
counted, and the clock checked), no operator, call or filter that would build a value of
more than :data:`MAX_RENDER_CHARS` (``"x" * 10**9``, ``center(10**9)``, ``10**10**10``),
and at most :data:`MAX_RENDER_CHARS` of output. A template that goes past a bound is
refused (:class:`TemplateRejected`, saying which bound); constant folding is off, so
compiling a template evaluates nothing.

Counting through a template lives in :mod:`tokenflex.counting.template`; the model
discovery checks a server's template with :func:`render` too.
"""

from __future__ import annotations

import functools
import json
import threading
import time
from collections.abc import Iterable, Iterator, Mapping, Sequence
from datetime import datetime
from typing import Any

from .errors import ConfigError, InvalidMessagesError
from .message.checks import TEXT_PARTS

__all__ = [
    "MAX_RENDER_CHARS",
    "MAX_TEMPLATE_CHARS",
    "RENDER_SECONDS",
    "RenderBudget",
    "TemplateRejected",
    "compile_template",
    "render",
]


class TemplateRejected(InvalidMessagesError):
    """The chat template refused the messages (``raise_exception`` or a template error)."""


RENDER_SECONDS = 5.0
"""Longest one render of a chat template may compute."""
MAX_RENDER_CHARS = 32 * 1024 * 1024
"""Largest text one render may make, or any value built while rendering."""
MAX_TEMPLATE_CHARS = 1024 * 1024
"""Longest chat template compiled (real ones are under 50 KB)."""
_CHECK_EVERY = 256  # steps between two looks at the clock
_MAX_ARG = 1_000_000  # no real template passes a larger number to a call or filter
_SEQUENCES = frozenset({str, list, tuple})


class RenderBudget(Exception):
    """A render went past one of its bounds (raised inside Jinja, reported as
    :class:`TemplateRejected`)."""


_budget = threading.local()  # the current render's deadline and steps, per thread


def _charge() -> None:
    deadline = getattr(_budget, "deadline", None)
    if deadline is None:
        return
    _budget.steps += 1
    if _budget.steps % _CHECK_EVERY == 0 and time.monotonic() > deadline:
        raise RenderBudget(
            f"the chat template computed for over {RENDER_SECONDS:g} s (RENDER_SECONDS)"
        )


def _sized(value: Any) -> Any:
    if isinstance(value, str | bytes | list | tuple | dict) and len(value) > MAX_RENDER_CHARS:
        raise RenderBudget(f"the chat template built a value over {MAX_RENDER_CHARS:,} items")
    return value


def _check_args(args: Iterable[Any], name: str = "") -> None:
    """Refuse a call that could build a value over the bound before it builds it: a
    large number (a width, a count), a replacement or a format string that multiplies a
    text past it."""
    texts: list[int] = []
    for arg in args:
        if isinstance(arg, int) and not isinstance(arg, bool) and abs(arg) > _MAX_ARG:
            raise RenderBudget(f"the chat template passed {arg!r:.40} to a call or filter")
        if isinstance(arg, str):
            texts.append(len(arg))
    estimate = 0
    if name in _REPLACE and len(texts) >= 3:
        size, old, new = texts[:3]
        estimate = size + (size // max(old, 1) + 1) * new
    elif name in _FORMAT and len(texts) >= 2:
        estimate = texts[0] * max(texts[1:])
    if estimate > MAX_RENDER_CHARS:
        raise RenderBudget(f"the chat template may build a value over {MAX_RENDER_CHARS:,} items")


_REPLACE = frozenset({"replace", "do_replace"})
_FORMAT = frozenset({"format", "format_map", "do_format"})


def _concat(*parts: Any) -> str:
    """Jinja's ``~``, bounded."""
    _charge()
    text = "".join(str(p) for p in parts)
    return str(_sized(text))


def _bounded_iter(iterable: Any) -> Iterator[Any]:
    """A template loop's items, each counted against the render's budget."""
    for item in iterable:
        _charge()
        yield item


def _bounded_filter(func: Any) -> Any:
    name = getattr(func, "__name__", "")

    @functools.wraps(func)  # keeps jinja's pass_context / pass_environment marks
    def bounded(*args: Any, **kwargs: Any) -> Any:
        _charge()
        _check_args((*args, *kwargs.values()), name)
        return _sized(func(*args, **kwargs))

    return bounded


def _concat_node(node: Any) -> Any:
    from jinja2 import nodes

    return nodes.Call(nodes.Name("__tokenflex_concat", "load"), list(node.nodes), [], None, None)


class _BoundConcat:
    """Replaces each ``a ~ b`` (a Concat node) by a bounded call."""

    def visit(self, node: Any) -> Any:
        from jinja2 import nodes

        for field in node.fields:
            value = getattr(node, field, None)
            if isinstance(value, nodes.Node):
                setattr(node, field, self.visit(value))
            elif isinstance(value, list):
                setattr(
                    node, field, [self.visit(v) if isinstance(v, nodes.Node) else v for v in value]
                )
        return _concat_node(node) if isinstance(node, nodes.Concat) else node


@functools.lru_cache(maxsize=1)
def _environment() -> Any:
    """The sandboxed, bounded Jinja environment chat templates are compiled in."""
    import jinja2
    import jinja2.ext
    from jinja2.sandbox import ImmutableSandboxedEnvironment

    class Bounded(ImmutableSandboxedEnvironment):
        intercepted_binops = frozenset({"*", "**", "%", "+"})

        def call(__self, __context: Any, __obj: Any, *args: Any, **kwargs: Any) -> Any:
            if __obj is _concat:
                return _concat(*args)
            _charge()
            name = getattr(__obj, "__name__", "")
            bound = getattr(__obj, "__self__", None)  # "text".replace: the text too
            given = (*args, *(v for k, v in kwargs.items() if k != "_loop_vars"))
            _check_args((bound, *given) if isinstance(bound, str) else given, name)
            return _sized(super().call(__context, __obj, *args, **kwargs))

        def call_binop(self, context: Any, operator: str, left: Any, right: Any) -> Any:
            # No clock here: an operator alone cannot run long; loops and calls are timed.
            if operator == "+":  # the common one (templates join text with +): kept cheap
                sized = type(left) in _SEQUENCES and type(right) in _SEQUENCES
                if sized and len(left) + len(right) > MAX_RENDER_CHARS:
                    raise RenderBudget(
                        f"the chat template built a value over {MAX_RENDER_CHARS:,} items"
                    )
                return left + right
            power = operator == "**" and isinstance(right, int | float) and isinstance(left, int)
            if power and abs(right) * max(left.bit_length(), 1) > 4096:
                raise RenderBudget(f"the chat template raised a number to {right!r:.40}")
            if operator == "*":
                for seq, n in ((left, right), (right, left)):
                    sized = isinstance(seq, str | list | tuple) and isinstance(n, int)
                    if sized and len(seq) * n > MAX_RENDER_CHARS:
                        raise RenderBudget(
                            f"the chat template built a value over {MAX_RENDER_CHARS:,} items"
                        )
            if operator == "%":
                _check_args((left, *(right if isinstance(right, tuple) else (right,))))
            return _sized(super().call_binop(context, operator, left, right))

    env = Bounded(
        trim_blocks=True,
        lstrip_blocks=True,
        extensions=[jinja2.ext.loopcontrols],
        optimized=False,  # no constant folding: compiling evaluates nothing
    )
    env.filters["tojson"] = _tojson
    env.filters = {name: _bounded_filter(f) for name, f in env.filters.items()}
    env.globals["raise_exception"] = _raise_exception
    env.globals["strftime_now"] = _strftime_now
    env.globals["__tokenflex_iter"] = _bounded_iter
    env.globals["__tokenflex_concat"] = _concat
    return env


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
    from jinja2 import nodes

    if len(source) > MAX_TEMPLATE_CHARS:
        raise ConfigError(
            f"The chat template is {len(source):,} characters; at most "
            f"{MAX_TEMPLATE_CHARS:,} are compiled. Use the chat_template string from the "
            "model's tokenizer_config.json."
        )
    env = _environment()
    try:
        tree = env.parse(source)
        for loop in tree.find_all(nodes.For):  # every loop step counts against the budget
            loop.iter = nodes.Call(
                nodes.Name("__tokenflex_iter", "load"), [loop.iter], [], None, None
            )
        tree = _BoundConcat().visit(tree)  # and every "~" is sized
        return env.from_string(tree)
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

    ``tools=None`` renders without tools; an empty list is passed on as an empty list
    (tool-use templates that loop over ``tools`` unconditionally need one).

    Raises:
        TemplateRejected: the template raised (e.g. "roles must alternate").
    """
    import jinja2

    outer = getattr(_budget, "deadline", None)
    if outer is None:
        _budget.deadline, _budget.steps = time.monotonic() + RENDER_SECONDS, 0
    try:
        size, chunks = 0, []
        for chunk in template.generate(
            messages=list(messages),
            add_generation_prompt=add_generation_prompt,
            bos_token=bos_token,
            eos_token=eos_token,
            tools=list(tools) if tools is not None else None,
        ):
            size += len(chunk)
            if size > MAX_RENDER_CHARS:
                raise RenderBudget(f"the chat template wrote over {MAX_RENDER_CHARS:,} characters")
            chunks.append(chunk)
        text = "".join(chunks)
    except RenderBudget as exc:
        raise TemplateRejected(
            f"The model's chat template was stopped: {exc}. It is not a template a model "
            "runs; configure the model's own template (chat_template) or chat_format."
        ) from None
    except RecursionError:
        raise TemplateRejected(
            "The model's chat template was stopped: it recursed too deeply. Configure the "
            "model's own template (chat_template) or chat_format."
        ) from None
    except (jinja2.exceptions.TemplateError, TypeError, ValueError, LookupError) as exc:
        # Templates also fail with plain Python errors, e.g. "+" on list content. Many
        # (Qwen3, Phi-3.5, Ministral) fail on an assistant tool call's ``content: null``,
        # which llama.cpp's server renders as "": do the same.
        # Templates that concatenate content fail on a list of text parts; llama.cpp's
        # server gives such a template the parts' text, joined: do the same.
        # Templates that read a tool call's arguments as a mapping (``|items``, Qwen 3.5)
        # fail on the JSON string the API sends; llama.cpp's server gives such a template
        # the parsed object: do the same.
        if any(_fillable(m) or _string_arguments(m) for m in messages):
            filled = [_filled(m) for m in messages]
            return render(
                template,
                filled,
                add_generation_prompt=add_generation_prompt,
                bos_token=bos_token,
                eos_token=eos_token,
                tools=tools,
            )
        raise TemplateRejected(
            f"The model's chat template rejected the messages: {exc}. Fix the conversation "
            "(roles, order) to what the template accepts."
        ) from exc
    finally:
        if outer is None:
            _budget.deadline = None
    return text


def _fillable(m: Any) -> bool:
    """A message whose content templates fail on and servers render as text: ``None`` (an
    assistant tool call) or a list of text parts only."""
    if not isinstance(m, Mapping):
        return False
    content = m.get("content", "")
    if content is None:
        return True
    return isinstance(content, list) and all(
        isinstance(p, Mapping) and p.get("type") in TEXT_PARTS and isinstance(p.get("text"), str)
        for p in content
    )


def _string_arguments(m: Any) -> bool:
    """An assistant message whose tool calls carry arguments as a JSON object's text."""
    calls = m.get("tool_calls") if isinstance(m, Mapping) else None
    return isinstance(calls, list) and any(_parsed_arguments(c) is not None for c in calls)


def _parsed_arguments(call: Any) -> dict[str, Any] | None:
    fn = call.get("function") if isinstance(call, Mapping) else None
    args = fn.get("arguments") if isinstance(fn, Mapping) else None
    if not isinstance(args, str):
        return None
    try:
        value = json.loads(args)
    except ValueError:
        return None
    return value if isinstance(value, dict) else None


def _filled(m: Any) -> Any:
    """``m`` as llama.cpp's server gives it to a template that failed on it: content as
    text, tool-call arguments as objects."""
    if _fillable(m):
        m = {**m, "content": _joined(m["content"])}
    if _string_arguments(m):
        calls = []
        for call in m["tool_calls"]:
            args = _parsed_arguments(call)
            if args is not None:
                call = {**call, "function": {**call["function"], "arguments": args}}
            calls.append(call)
        m = {**m, "tool_calls": calls}
    return m


def _joined(content: Any) -> str:
    return "".join(p["text"] for p in content) if isinstance(content, list) else ""
