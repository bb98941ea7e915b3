"""What reading a plan's dropped items costs (issue 23, item 5).

``fit(chat, documents=N chunks)`` with and without one ``reasoning_content`` message,
and a ``Prompt`` whose history carries reasoning: seconds to read ``plan.dropped`` and
``plan.to_dict()`` (each on a fresh plan).

    PYTHONPATH=src python scripts/bench_plan.py [--chunks 2000]
"""

from __future__ import annotations

import argparse
import time

import tokenflex
from tokenflex import Chunk, Prompt


def _messages(reasoning: bool) -> list[dict[str, str]]:
    msgs = [{"role": "system", "content": "Answer from the documents."}]
    for i in range(20):
        msgs.append({"role": "user", "content": f"question {i} " + "word " * 40})
        reply = {"role": "assistant", "content": f"answer {i} " + "word " * 40}
        if reasoning and i == 3:
            reply["reasoning_content"] = "thinking " * 30
        msgs.append(reply)
    msgs.append({"role": "user", "content": "and now?"})
    return msgs


def _seconds(fn: object) -> float:
    t = time.perf_counter()
    fn()  # type: ignore[operator]
    return time.perf_counter() - t


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--chunks", type=int, default=2000)
    args = parser.parse_args()
    chunks = [Chunk(f"passage {i} " + "text " * 60, source=f"doc{i}") for i in range(args.chunks)]
    print(f"{'case':44} {'dropped':>8} {'read dropped s':>15} {'to_dict s':>10}")
    for reasoning in (False, True):

        def make(reasoning: bool = reasoning) -> tokenflex.Plan:
            return tokenflex.fit(
                _messages(reasoning), model="gpt-4o", max_tokens=1000, documents=chunks
            )

        plan = make()
        read = _seconds(lambda: list(plan.dropped))  # noqa: B023
        plan = make()
        whole = _seconds(lambda: plan.to_dict(dropped_limit=None))  # noqa: B023
        name = f"fit(documents={args.chunks:,}) reasoning={reasoning}"
        print(f"{name:44} {len(plan.dropped):>8,} {read:>15.4f} {whole:>10.4f}")
    for n in (500, 1000, 2000):
        hist = []
        for i in range(n):
            hist.append({"role": "user", "content": f"q{i} " + "word " * 300})
            hist.append(
                {"role": "assistant", "content": f"a{i}", "reasoning_content": "think " * 20}
            )
        hist.append({"role": "user", "content": "now?"})

        def prompt(hist: list[dict[str, str]] = hist) -> tokenflex.Plan:
            return Prompt("gpt-4o", max_tokens=500).add("history", hist).fit()

        plan = prompt()
        read = _seconds(lambda: list(plan.dropped))  # noqa: B023
        plan = prompt()
        whole = _seconds(lambda: plan.to_dict(dropped_limit=None))  # noqa: B023
        name = f"Prompt history={2 * n + 1:,} with reasoning"
        print(f"{name:44} {len(plan.dropped):>8,} {read:>15.4f} {whole:>10.4f}")


if __name__ == "__main__":
    main()
