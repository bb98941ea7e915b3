"""``tokenflex batch``: fit every line of a batch input file, on local cores or on Dask.

The work per line is :func:`tokenflex.batch.fit_lines`; this module reads the input in
chunks, hands them to a driver (in this process, a local process pool, or a Dask
cluster), writes the results back in input order as they come, shows a progress bar
and ends with a summary table. The drivers share one ordered, windowed loop
(:func:`_ordered`): at most a few chunks per worker are in flight, so a file of any size
runs in bounded memory.
"""

from __future__ import annotations

import json
import os
from collections import deque
from collections.abc import Callable, Iterable, Iterator
from concurrent.futures import Future
from contextlib import ExitStack
from dataclasses import dataclass, field
from pathlib import Path
from typing import Annotated, Any, Protocol

import typer

from ..errors import InvalidInputError
from ..options import FitOptions
from ._app import app, console

_DEFAULTS = FitOptions()
CHUNK_LINES = 200
"""Lines per unit of work: large enough that shipping a chunk to a process or a Dask
worker costs little beside fitting it."""
IN_FLIGHT_PER_WORKER = 4


class _Result(Protocol):
    def result(self) -> Any: ...


Submit = Callable[[list[tuple[int, str]]], _Result]


@dataclass
class Totals:
    """The summary table's numbers."""

    fitted: int = 0
    unchanged: int = 0
    failed: int = 0
    skipped: int = 0
    tokens_dropped: int = 0
    failed_lines: list[int] = field(default_factory=list)


def error_path(out: Path) -> Path:
    """``OUT.errors.jsonl`` beside ``OUT.jsonl``."""
    stem = out.name[: -len(".jsonl")] if out.name.endswith(".jsonl") else out.name
    return out.with_name(f"{stem}.errors.jsonl")


def _complete_lines(path: Path) -> list[str]:
    """The complete lines of a file a killed run left (a partial last line is cut off, so
    that line is fitted again)."""
    if not path.exists():
        return []
    data = path.read_bytes()
    end = data.rfind(b"\n") + 1
    if end < len(data):
        with path.open("r+b") as f:
            f.truncate(end)
    return data[:end].decode("utf-8").splitlines()


def _done(out: Path, errors: Path) -> tuple[int, set[int]]:
    """What an earlier run finished: the number of lines in OUT, and the input line
    numbers in the errors file."""
    failed = set()
    for line in _complete_lines(errors):
        try:
            failed.add(int(json.loads(line)["line"]))
        except (ValueError, KeyError, TypeError):
            continue
    return len(_complete_lines(out)), failed


def _input_lines(path: Path, skip_out: int, skip_failed: set[int]) -> Iterator[tuple[int, str]]:
    """``(number, text)`` of each non-blank input line still to fit: with ``--resume``,
    the first ``skip_out`` lines that did not fail and the failed ones are done."""
    with path.open(encoding="utf-8-sig", errors="surrogateescape") as f:
        for number, raw in enumerate(f, 1):
            text = raw.rstrip("\r\n")
            if not text.strip():
                continue
            if number in skip_failed:
                continue
            if skip_out:
                skip_out -= 1
                continue
            yield number, text


def _chunks(lines: Iterable[tuple[int, str]], size: int) -> Iterator[list[tuple[int, str]]]:
    chunk: list[tuple[int, str]] = []
    for item in lines:
        chunk.append(item)
        if len(chunk) == size:
            yield chunk
            chunk = []
    if chunk:
        yield chunk


def _ordered(submit: Submit, chunks: Iterable[Any], window: int) -> Iterator[Any]:
    """Each chunk's result in input order, with at most ``window`` chunks in flight."""
    pending: deque[_Result] = deque()
    for chunk in chunks:
        pending.append(submit(chunk))
        if len(pending) >= window:
            yield pending.popleft().result()
    while pending:
        yield pending.popleft().result()


class _Done:
    """A result computed in this process (``--workers 1``)."""

    def __init__(self, value: Any) -> None:
        self.value = value

    def result(self) -> Any:
        return self.value


def _count_lines(path: Path) -> int:
    """Non-blank lines: the progress bar's total (one quick pass over the bytes)."""
    with path.open("rb") as f:
        return sum(1 for line in f if line.strip())


def _dask_client(address: str, stack: ExitStack) -> Any:
    import importlib

    try:
        distributed: Any = importlib.import_module("distributed")  # untyped: held as Any
    except ImportError as exc:
        raise InvalidInputError(
            "--dask needs dask.distributed. Install it: pip install 'tokenflex[dask]'."
        ) from exc
    if address == "local":
        cluster = stack.enter_context(distributed.LocalCluster(dashboard_address=None))
        return stack.enter_context(distributed.Client(cluster))
    return stack.enter_context(distributed.Client(address))


def run_batch(
    source: Path,
    out: Path,
    *,
    model: str | None,
    options: dict[str, Any],
    workers: int,
    dask: str | None = None,
    resume: bool = False,
    progress: bool = True,
) -> Totals:
    """Fit ``source`` into ``out`` (and ``OUT.errors.jsonl``); the totals."""
    from rich.progress import (
        BarColumn,
        MofNCompleteColumn,
        Progress,
        TextColumn,
        TimeElapsedColumn,
        TimeRemainingColumn,
    )

    from ..batch import fit_lines

    errors = error_path(out)
    totals = Totals()
    skip_out, skip_failed = _done(out, errors) if resume else (0, set())
    mode = "a" if resume else "w"
    total = _count_lines(source)
    with ExitStack() as stack:
        if dask is not None:
            client = _dask_client(dask, stack)
            n_workers = max(1, sum(client.nthreads().values()))

            def submit(chunk: list[tuple[int, str]]) -> _Result:
                result: _Result = client.submit(fit_lines, chunk, model, options, pure=False)
                return result

        elif workers > 1:
            from concurrent.futures import ProcessPoolExecutor

            pool = stack.enter_context(ProcessPoolExecutor(workers))
            n_workers = workers

            def submit(chunk: list[tuple[int, str]]) -> _Result:
                future: Future[Any] = pool.submit(fit_lines, chunk, model, options)
                return future

        else:
            n_workers = 1

            def submit(chunk: list[tuple[int, str]]) -> _Result:
                return _Done(fit_lines(chunk, model, options))

        out_f = stack.enter_context(out.open(mode, encoding="utf-8"))
        err_f = stack.enter_context(errors.open(mode, encoding="utf-8"))
        bar = stack.enter_context(
            Progress(
                TextColumn("[bold]fitting"),
                BarColumn(),
                MofNCompleteColumn(),
                TextColumn("{task.fields[rate]} lines/s"),
                TimeElapsedColumn(),
                TextColumn("ETA"),
                TimeRemainingColumn(),
                console=console,
                disable=not progress,
                transient=False,
            )
        )
        task = bar.add_task("fit", total=total or None, rate="—")
        skipped = skip_out + len(skip_failed)
        totals.skipped = skipped
        bar.update(task, completed=skipped)
        lines = _input_lines(source, skip_out, skip_failed)
        window = IN_FLIGHT_PER_WORKER * n_workers
        for results in _ordered(submit, _chunks(lines, CHUNK_LINES), window):
            for r in results:
                if r.status == "failed":
                    totals.failed += 1
                    totals.failed_lines.append(r.number)
                    err_f.write(r.text + "\n")
                else:
                    setattr(totals, r.status, getattr(totals, r.status) + 1)
                    totals.tokens_dropped += r.tokens_dropped
                    out_f.write(r.text + "\n")
            out_f.flush()
            err_f.flush()
            bar.advance(task, len(results))
            t = bar.tasks[0]
            fitted_here = t.completed - skipped
            speed = fitted_here / t.elapsed if t.elapsed else 0.0
            bar.update(task, rate=f"{speed:,.0f}" if speed else "—")
    if errors.exists() and errors.stat().st_size == 0:
        errors.unlink()
    return totals


def _summary(totals: Totals, out: Path) -> Any:
    from rich import box
    from rich.table import Table

    table = Table(box=box.SIMPLE_HEAD, title=f"tokenflex batch → {out}", title_justify="left")
    table.add_column("lines")
    table.add_column("count", justify="right")
    table.add_row("fitted", f"{totals.fitted:,}")
    table.add_row("unchanged", f"{totals.unchanged:,}")
    table.add_row("failed", f"{totals.failed:,}", style="red" if totals.failed else None)
    if totals.skipped:
        table.add_row("skipped (--resume)", f"{totals.skipped:,}")
    table.add_row("tokens dropped", f"{totals.tokens_dropped:,}")
    return table


@app.command("batch")
def batch_cmd(
    source: Annotated[
        Path,
        typer.Argument(
            metavar="IN.jsonl",
            help="OpenAI Batch API input (custom_id, method, url, body), Anthropic Message "
            "Batches requests (custom_id, params), or one conversation per line.",
        ),
    ],
    out: Annotated[Path, typer.Option("--output", "-o", help="Where the fitted lines go.")],
    model: Annotated[
        str | None,
        typer.Option("--model", "-m", help="Model to fit for (default: each body's)."),
    ] = None,
    workers: Annotated[
        int | None,
        typer.Option("--workers", "-w", min=1, help="Local processes (default: every core)."),
    ] = None,
    dask: Annotated[
        str | None,
        typer.Option(
            "--dask",
            metavar="ADDRESS",
            help="Run on a Dask cluster: a scheduler address, or 'local' for a LocalCluster.",
        ),
    ] = None,
    resume: Annotated[
        bool, typer.Option("--resume", help="Skip the lines an earlier run already wrote.")
    ] = False,
    policy: Annotated[str, typer.Option(help="reserve (trim input) or flex.")] = _DEFAULTS.policy,
    safety_margin: Annotated[
        int, typer.Option("--safety-margin", help="Tokens kept free.")
    ] = _DEFAULTS.safety_margin,
    progress: Annotated[
        bool, typer.Option("--progress/--no-progress", help="Show the progress bar.")
    ] = True,
) -> None:
    """Fit every request of a batch file; OUT keeps each custom_id, in input order.

    A line that cannot be read or fitted goes to OUT.errors.jsonl with its line number
    and the reason; the run goes on, and exits 1 at the end.
    """
    if not source.is_file():
        raise InvalidInputError(f"Cannot read {str(source)!r}: no such file.")
    if out.resolve() == source.resolve():
        raise InvalidInputError("--output must not be the input file: pass another path.")
    options = FitOptions.from_kwargs({"policy": policy, "safety_margin": safety_margin})
    kwargs = {"policy": options.policy, "safety_margin": options.safety_margin}
    totals = run_batch(
        source,
        out,
        model=model,
        options=kwargs,
        workers=workers or os.cpu_count() or 1,
        dask=dask,
        resume=resume,
        progress=progress,
    )
    console.print(_summary(totals, out))
    if totals.failed:
        shown = ", ".join(str(n) for n in totals.failed_lines[:10])
        more = " …" if len(totals.failed_lines) > 10 else ""
        console.print(
            f"{totals.failed:,} failed (lines {shown}{more}): see {error_path(out)}",
            style="red",
            highlight=False,
            markup=False,
        )
        raise typer.Exit(1)
