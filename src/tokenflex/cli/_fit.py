"""``tokenflex fit`` and ``tokenflex inspect``: fit a messages file, show the window."""

from __future__ import annotations

from typing import Annotated, Any

import typer

from ..errors import InvalidInputError
from ..options import FitOptions
from ._app import app, console
from ._input import naming, parse_json, read_text, resolve_model

_DEFAULTS = FitOptions()  # the CLI's defaults are fit()'s


_HINT = (
    'Expected a request body (chat {"messages": [...]}, Anthropic {"system": ..., '
    '"messages": [...]} or Responses {"instructions": ..., "input": [...]}), a list of '
    "messages, or JSON lines of messages."
)


def load_request(path: str) -> Any:
    """The request in a JSON file (``-`` for stdin) as a :class:`tokenflex.batch.RequestBody`:
    a chat, Anthropic Messages or Responses body, a list of messages, or JSON lines of
    messages."""
    from ..batch import read_body

    text = read_text(path, hint="Pass a JSON file of messages or '-' for stdin.")
    data = parse_json(text, repr(path), hint=_HINT, lines=True)
    if isinstance(data, dict) and "messages" not in data and "input" not in data:
        raise InvalidInputError(
            f"{path!r} is a JSON object without a 'messages' (or 'input') key. {_HINT}"
        )
    if not isinstance(data, dict | list):
        raise InvalidInputError(f"{path!r} holds a JSON {type(data).__name__}. {_HINT}")
    return read_body(data, where=repr(path))


def _run(
    file: str,
    model: str | None,
    max_tokens: int | None,
    policy: str,
    min_output_tokens: int,
    safety_margin: int,
    history_share: float,
    strict: bool,
    as_json: bool,
    verbose: bool,
) -> None:
    from ..fit import fit
    from ._render import plan_view

    req = load_request(file)
    model_name = model or req.model
    if not model_name:
        raise InvalidInputError('No model: pass --model (or put "model" in the request file).')
    if strict:
        resolve_model(model_name, strict=True)
    with naming(file):
        plan = fit(
            req.messages,
            model=model_name,
            max_tokens=max_tokens if max_tokens is not None else req.max_tokens,
            tools=req.tools,
            format=req.format,
            system=req.system,
            policy=policy,
            min_output_tokens=min_output_tokens,
            safety_margin=safety_margin,
            history_share=history_share,
        )
    if as_json:
        console.print_json(plan.to_json(include_messages=verbose))
    else:
        console.print(plan_view(plan, verbose=verbose, given=req.messages))


Model = Annotated[str | None, typer.Option("--model", "-m", help="Model name from the registry.")]
MaxTokens = Annotated[int | None, typer.Option("--max-tokens", help="Requested output tokens.")]
Policy = Annotated[str, typer.Option(help="reserve (trim input) or flex (shrink output).")]
MinOut = Annotated[int, typer.Option("--min-output-tokens", help="Output floor.")]
Margin = Annotated[int, typer.Option("--safety-margin", help="Tokens kept free.")]
Share = Annotated[float, typer.Option("--history-share", help="Soft share of room for history.")]
Strict = Annotated[bool, typer.Option("--strict", help="An unknown model is an error.")]
AsJson = Annotated[bool, typer.Option("--json", help="Machine-readable plan.")]


def _command(verbose: bool, doc: str) -> Any:
    """``fit`` and ``inspect`` share one signature; inspect also lists what was kept."""

    def command(
        file: Annotated[
            str,
            typer.Argument(
                help="A request body (chat, Anthropic Messages, Responses), JSON messages "
                "or JSON lines; '-' for stdin."
            ),
        ],
        model: Model = None,
        max_tokens: MaxTokens = None,
        policy: Policy = _DEFAULTS.policy,
        min_output_tokens: MinOut = _DEFAULTS.min_output_tokens,
        safety_margin: Margin = _DEFAULTS.safety_margin,
        history_share: Share = _DEFAULTS.history_share,
        strict: Strict = False,
        as_json: AsJson = False,
    ) -> None:
        _run(
            file,
            model,
            max_tokens,
            policy,
            min_output_tokens,
            safety_margin,
            history_share,
            strict,
            as_json,
            verbose,
        )

    command.__doc__ = doc
    return command


app.command("fit")(
    _command(
        False, "Fit a conversation into the model's window: the window bar and what was dropped."
    )
)
app.command("inspect")(
    _command(True, "Like fit, and also lists the first 200 dropped items and every kept message.")
)
