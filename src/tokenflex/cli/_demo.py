"""``tokenflex demo``: the main job on embedded examples, classic worked examples among
them. Everything here is offline and takes a second or two."""

from __future__ import annotations

from typing import Any

from rich import box
from rich.rule import Rule
from rich.table import Table
from rich.text import Text

from ..errors import ContextOverflowError
from ._app import app, console

_TOPICS = [
    "How do I rotate the API keys without downtime?",
    "Here is the stack trace from the worker:\n"
    '  File "app.py", line 42, in run\n    raise KeyError(job_id)',
    "Summarize the design doc in three bullet points.",
    '{"user_id": 1842, "plan": "pro", "seats": 12, "renewal": "2026-12-01"}',
    "会議の議事録を日本語で要約してください。",
    "def fib(n):\n    return n if n < 2 else fib(n - 1) + fib(n - 2)",
]


def _conversation(turns: int, system: str = "You are a concise assistant.") -> list[dict[str, Any]]:
    msgs: list[dict[str, Any]] = [{"role": "system", "content": system}]
    for i in range(turns):
        topic = _TOPICS[i % len(_TOPICS)]
        msgs.append({"role": "user", "content": f"Turn {i}: {topic}"})
        msgs.append(
            {
                "role": "assistant",
                "content": f"Answer {i}: " + "Here is what I found. " * (8 + i % 5),
            }
        )
    msgs.append({"role": "user", "content": "And what should I do next?"})
    return msgs


def _worked_examples() -> None:
    from ..fit import fit
    from ._render import plan_view

    console.print(Rule("Output negotiation: max_tokens shrinks, never below the floor"))
    table = Table(box=box.SIMPLE_HEAD, pad_edge=False, collapse_padding=True)
    table.add_column("example", justify="right")
    table.add_column("model", no_wrap=True)
    for header in ("window", "input", "asked", "max_tokens"):
        table.add_column(header, justify="right", no_wrap=True)
    table.add_column("result")
    cases = [
        ("1", "llama3.2:3b", 5, 3000),  # small conversation
        ("2", "gpt-3.5-turbo", 50, 5000),  # large conversation
        ("3", "deepseek-coder:6.7b", 60, 3000),  # minimal space
    ]
    for name, model, turns, request in cases:
        # A guess of 250 tokens per message is what hand-written code uses; these are counted.
        msgs = _conversation(turns * 4)
        plan = fit(msgs, model=model, max_tokens=request, policy="flex", history_share=1.0)
        verdict = f"{len(plan.dropped)} dropped" if len(plan.dropped) else "all kept"
        table.add_row(
            name,
            model,
            f"{plan.context_window:,}",
            f"{plan.input_tokens:,}",
            f"{request:,}",
            f"{plan.max_tokens:,}",
            verdict,
        )
    console.print(table)
    big = [
        {"role": "system", "content": "policy text " * 16_000},
        {"role": "user", "content": "hi"},
    ]
    try:
        fit(big, model="deepseek-coder:6.7b", max_tokens=3000, policy="flex")
    except ContextOverflowError as exc:
        console.print(
            Text.assemble(
                ("Required input too big → raises, never overflows: ", "yellow"), str(exc)
            )
        )

    console.print(Rule("Token-aware history on gpt-4 (8K), 80% soft share"))
    msgs = _conversation(200)
    plan = fit(msgs, model="gpt-4", max_tokens=3000)
    console.print(plan_view(plan))

    console.print(Rule("Same conversation on a 200K model: everything fits"))
    console.print(plan_view(fit(msgs, model="claude-3-5-sonnet", max_tokens=3000)))


def _summary_example() -> None:
    try:
        from ..summarize import ExtractiveSummarizer
    except ImportError:  # pragma: no cover - summarization not installed yet
        return
    from ..fit import fit
    from ._render import plan_view

    console.print(Rule("Summarize old history instead of dropping it (offline summarizer)"))
    msgs = _conversation(120)
    plan = fit(
        msgs, model="gpt-4", max_tokens=2000, summarizer=ExtractiveSummarizer(), keep_recent=6
    )
    console.print(plan_view(plan))


def _packing_example() -> None:
    try:
        from ..documents import Chunk, pack_chunks
    except ImportError:  # pragma: no cover
        return
    console.print(Rule("Ranked chunks packed with their citations into 600 tokens"))
    chunks = [
        Chunk(
            text=f"Passage {i}: " + "Retrieval result text. " * (5 + 7 * (i % 4)),
            source=f"doc-{i}",
            identifier=f"https://example.com/docs/{i}",
            score=1.0 - i / 20,
        )
        for i in range(12)
    ]
    result = pack_chunks(chunks, budget=600)
    console.print(
        f"admitted {len(result.admitted)} of {len(chunks)} chunks, "
        f"{result.admitted_tokens:,} tokens; dropped {result.dropped_count} "
        f"({result.dropped_tokens:,} tokens)"
    )
    notice = next((ln for ln in result.rendered.splitlines() if "omitted" in ln), "")
    console.print("the model is told: ", Text(notice, style="italic"))


def _prompt_example() -> None:
    from ..prompt import Prompt
    from ._render import plan_view

    console.print(Rule("Prompt builder: memories, a long document, history and the question in 4K"))
    manual = " ".join(
        f"Step {i}: check the {['valve', 'pump', 'filter', 'sensor'][i % 4]} on line {i % 5} "
        "and write the reading in the log."
        for i in range(300)
    )
    prompt = Prompt(_small_gpt4(), max_tokens=1000)
    prompt.add("system", "You are the plant's maintenance assistant.", required=True)
    prompt.add(
        "memories",
        [f"Operator note {i}: line {i % 5} " + "was serviced last week. " * 3 for i in range(12)],
        scores=[(7 * i) % 12 for i in range(12)],
        header="What you remember:",
        priority=3,
        cap=400,
    )
    prompt.add(
        "manual", manual, shrink="truncate", boundary="sentence", cap=1200, priority=2, role="user"
    )
    prompt.add("history", _conversation(40)[1:-1], priority=1)
    prompt.add("current", [{"role": "user", "content": "What is step 12?"}], required=True)
    console.print(plan_view(prompt.fit()))


def _small_gpt4() -> Any:
    from ..models import get_model

    return get_model("gpt-4").replace(name="gpt-4 (4K window)", context_window=4096)


def _validation_example() -> None:
    try:
        from ..validate import validate_budget
    except ImportError:  # pragma: no cover
        return
    console.print(Rule("Component budget validation (120K total)"))
    table = Table(box=box.SIMPLE_HEAD, pad_edge=False)
    table.add_column("scenario")
    for header in ("input", "output", "usage"):
        table.add_column(header, justify="right", no_wrap=True)
    table.add_column("status")
    rows = [
        ("standard (no RAG)", 24_000, 20_000),
        ("RAG-heavy (40K)", 64_000, 25_000),
        ("minimal analyze", 12_000, 20_000),
        ("RAG overflow (60K)", 84_000, 32_000),
    ]
    for name, inp, out in rows:
        v = validate_budget({"input": inp}, expected_output=out, total_budget=120_000)
        table.add_row(name, f"{inp:,}", f"{out:,}", f"{v.usage_percent:.0f}%", str(v.status))
    console.print(table)


@app.command()
def demo() -> None:
    """Fit the embedded examples (classic worked examples) and show the result."""
    _worked_examples()
    _summary_example()
    _packing_example()
    _prompt_example()
    _validation_example()
