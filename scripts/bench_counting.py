"""Count accuracy and speed: tokenflex.count_messages vs the OpenAI cookbook's function.

Usage:
    .venv/bin/python scripts/bench_counting.py [--messages 2000] [--repeat 5]

Prints markdown tables (docs/counting.md holds a run):
1. accuracy: for each conversation and model, the cookbook reference and tokenflex;
2. speed: microseconds per message, cold (empty count cache) and warm (every message
   already counted once: the re-fit case), next to the reference (which re-encodes).

The reference is the cookbook's ``num_tokens_from_messages`` and ``num_tokens_for_tools``
("How to count tokens with tiktoken", section 6 and 7,
https://github.com/openai/openai-cookbook/blob/main/examples/How_to_count_tokens_with_tiktoken.ipynb,
MIT license), written out below with two changes only: the encoding is loaded offline
through tokenflex (``tiktoken.encoding_for_model`` would download it), and the print
warnings are dropped.
"""

from __future__ import annotations

import argparse
import gc
import random
import sys
import time
import timeit
from pathlib import Path
from typing import Any

import tokenflex
from tokenflex.counting import get_counter

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "tests"))
from _cookbook import COOKBOOK_MESSAGES, COOKBOOK_TOOL_MESSAGES, COOKBOOK_TOOLS

from tokenflex.tokenizers._tiktoken import load_encoding

# ---- Reference: the cookbook's functions ----------------------------------------------

_ENCODINGS = {
    "gpt-4o": "o200k_base",
    "gpt-4o-mini": "o200k_base",
    "gpt-4": "cl100k_base",
    "gpt-3.5-turbo": "cl100k_base",
}


def num_tokens_from_messages(messages: list[dict[str, str]], model: str) -> int:
    """Return the number of tokens used by a list of messages (cookbook section 6)."""
    encoding = load_encoding(_ENCODINGS[model])
    tokens_per_message = 3
    tokens_per_name = 1
    num_tokens = 0
    for message in messages:
        num_tokens += tokens_per_message
        for key, value in message.items():
            num_tokens += len(encoding.encode(value))
            if key == "name":
                num_tokens += tokens_per_name
    num_tokens += 3  # every reply is primed with <|start|>assistant<|message|>
    return num_tokens


def num_tokens_for_tools(
    functions: list[dict[str, Any]], messages: list[dict[str, str]], model: str
) -> int:
    """Messages plus tool schemas (cookbook section 7)."""
    if model in ["gpt-4o", "gpt-4o-mini"]:
        func_init, prop_init, prop_key, enum_init, enum_item, func_end = 7, 3, 3, -3, 3, 12
    elif model in ["gpt-3.5-turbo", "gpt-4"]:
        func_init, prop_init, prop_key, enum_init, enum_item, func_end = 10, 3, 3, -3, 3, 12
    else:
        raise NotImplementedError(model)
    encoding = load_encoding(_ENCODINGS[model])
    func_token_count = 0
    if len(functions) > 0:
        for f in functions:
            func_token_count += func_init
            function = f["function"]
            f_name = function["name"]
            f_desc = function["description"]
            if f_desc.endswith("."):
                f_desc = f_desc[:-1]
            line = f_name + ":" + f_desc
            func_token_count += len(encoding.encode(line))
            if len(function["parameters"]["properties"]) > 0:
                func_token_count += prop_init
                for key in list(function["parameters"]["properties"].keys()):
                    func_token_count += prop_key
                    p_name = key
                    p_type = function["parameters"]["properties"][key]["type"]
                    p_desc = function["parameters"]["properties"][key]["description"]
                    if "enum" in function["parameters"]["properties"][key]:
                        func_token_count += enum_init
                        for item in function["parameters"]["properties"][key]["enum"]:
                            func_token_count += enum_item
                            func_token_count += len(encoding.encode(item))
                    if p_desc.endswith("."):
                        p_desc = p_desc[:-1]
                    line = f"{p_name}:{p_type}:{p_desc}"
                    func_token_count += len(encoding.encode(line))
        func_token_count += func_end
    return num_tokens_from_messages(messages, model) + func_token_count


# ---- Conversations ----------------------------------------------------------------------

COOKBOOK = COOKBOOK_MESSAGES
WEATHER = COOKBOOK_TOOL_MESSAGES
TOOLS = [
    *COOKBOOK_TOOLS,
    {
        "type": "function",
        "function": {
            "name": "search_flights",
            "description": "Search flights between two airports on a date.",
            "parameters": {
                "type": "object",
                "properties": {
                    "origin": {"type": "string", "description": "IATA code of the origin."},
                    "destination": {"type": "string", "description": "IATA code."},
                    "date": {"type": "string", "description": "Departure date, YYYY-MM-DD."},
                    "cabin": {
                        "type": "string",
                        "description": "Cabin class",
                        "enum": ["economy", "premium", "business", "first"],
                    },
                },
                "required": ["origin", "destination", "date"],
            },
        },
    },
]
NAMES = [
    {"role": "system", "content": "Moderate a meeting between three people."},
    {"role": "user", "name": "alice", "content": "I think we should ship on Friday."},
    {
        "role": "user",
        "name": "bob_smith",
        "content": "Friday is too early; QA needs two more days.",
    },
    {"role": "user", "name": "carol", "content": "What if we ship the API first and the UI later?"},
    {"role": "assistant", "name": "moderator", "content": "Let's list the risks of each option."},
]
MULTILINGUAL = [
    {"role": "system", "content": "Réponds dans la langue de l'utilisateur."},
    {"role": "user", "content": "お誕生日おめでとう！今日は何をしますか？"},
    {"role": "assistant", "content": "谢谢！我们去公园散步，然后吃蛋糕。"},
    {"role": "user", "content": "مرحبا، كيف حالك اليوم؟ 🎉🎂"},
    {"role": "assistant", "content": "Привет! Всё хорошо, спасибо. Ελπίζω να είσαι καλά."},
    {"role": "user", "content": "Schreib mir ein Gedicht über Käsespätzle — kurz, bitte."},
]
CODE = [
    {"role": "system", "content": "You are a senior Python reviewer."},
    {
        "role": "user",
        "content": "Review this:\n```python\ndef f(xs: list[int]) -> dict[str, int]:\n"
        "    out = {}\n    for i, x in enumerate(xs):\n        out[f'k{i}'] = x ** 2 if x % 2 "
        "else -x\n    return out\n```",
    },
    {
        "role": "assistant",
        "content": "Use a dict comprehension: `{f'k{i}': ...}`; add a docstring.",
    },
]
CONVERSATIONS: list[tuple[str, list[dict[str, str]], list[dict[str, Any]] | None]] = [
    ("cookbook example", COOKBOOK, None),
    ("cookbook tools example", WEATHER, TOOLS[:1]),
    ("two tools with enums", WEATHER, TOOLS),
    ("names", NAMES, None),
    ("multilingual + emoji", MULTILINGUAL, None),
    ("code", CODE, None),
]
MODELS = ["gpt-4o", "gpt-4o-mini", "gpt-4", "gpt-3.5-turbo"]


def accuracy() -> bool:
    print("| conversation | model | cookbook | tokenflex | equal |")
    print("|---|---|---:|---:|:---:|")
    all_equal = True
    for label, messages, tools in CONVERSATIONS:
        for model in MODELS:
            if tools:
                ref = num_tokens_for_tools(tools, messages, model)
            else:
                ref = num_tokens_from_messages(messages, model)
            ours = tokenflex.count_messages(messages, model=model, tools=tools)
            equal = ref == ours
            all_equal &= equal
            print(f"| {label} | {model} | {ref} | {ours} | {'yes' if equal else '**NO**'} |")
    return all_equal


def _corpus(n: int, seed: int = 7) -> list[dict[str, str]]:
    rng = random.Random(seed)
    words = [
        *("context", "window", "budget", "token", "model", "message", "summary", "history"),
        *("tool", "call", "fit", "the", "a", "of", "to", "and", "in", "is", "for", "on"),
    ]
    roles = ["user", "assistant"]
    return [
        {
            "role": roles[i % 2],
            "content": f"#{i} " + " ".join(rng.choice(words) for _ in range(rng.randint(5, 120))),
        }
        for i in range(n)
    ]


def _per_message_us(fn: Any, messages: list[dict[str, str]], repeat: int) -> float:
    times = []
    for _ in range(repeat):
        gc.collect()
        start = time.perf_counter()
        fn(messages)
        times.append(time.perf_counter() - start)
    return min(times) / len(messages) * 1e6  # min: the run least disturbed by other work


def speed(n: int, repeat: int) -> None:
    messages = _corpus(n)
    print(f"\n{n} messages of 5-120 words; best of {repeat} runs; µs per message.\n")
    print("| model | cookbook (re-encodes) | tokenflex cold | tokenflex warm | message() warm |")
    print("|---|---:|---:|---:|---:|")
    for model in MODELS:
        counter = get_counter(model)
        reference = _per_message_us(
            lambda ms, m=model: num_tokens_from_messages(ms, m), messages, repeat
        )

        def cold(ms: list[dict[str, str]], c: Any = counter) -> int:
            c.tokenizer.clear()
            return int(c.count(ms))

        cold_us = _per_message_us(cold, messages, repeat)
        counter.count(messages)
        warm_us = _per_message_us(counter.count, messages, repeat)
        timer = timeit.Timer("f(m)", globals={"f": counter.message, "m": messages[0]})
        single_us = min(timer.repeat(repeat=repeat, number=200_000)) / 200_000 * 1e6
        print(f"| {model} | {reference:.2f} | {cold_us:.2f} | {warm_us:.3f} | {single_us:.3f} |")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--messages", type=int, default=2000)
    parser.add_argument("--repeat", type=int, default=5)
    args = parser.parse_args()
    equal = accuracy()
    speed(args.messages, args.repeat)
    print(f"\nall counts equal to the cookbook: {'yes' if equal else 'NO'}")
    raise SystemExit(0 if equal else 1)


if __name__ == "__main__":
    main()
