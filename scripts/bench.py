"""One benchmark for issue 24: every row of its table, measured in one run.

Each row is tokenflex against a reference measured in the same run, the variants of a row
interleaved (round after round), so a slow spell of a shared machine hits them alike; the
figure is the median. Columns: case | tokenflex | reference | ratio | goal | met.

References:

- **the limit**: a plain loop that tokenizes newest -> oldest only the messages it keeps
  plus one, no cache, no checks (``bench_fit.make_limit``): what any exact tool must pay;
- **the incremental limit** (sessions): tokenizing each new message once, in a tight loop;
- **the same history as chat** (Anthropic / Responses input);
- **tiktoken**: ``import tiktoken``, and a one-liner that counts a file with tiktoken;
- **a minimal pass-through proxy** (the proxy rows, from ``scripts/bench_proxy.py`` when it
  is there).

The session rows are measured again, last, with ``prefer_fast_backend()`` where fastokens
is installed (the ``[fast]`` extra; what the proxy and any long-running process that opts in
count with), against the same tiktoken floor: informational, marked "fast backend".

"Cold" is a fit with tokenflex's count cache cleared before it, of a list fitted before
(as the issue measured it), with fit()'s last plan of that list dropped too (an unchanged
list is otherwise answered from it without counting: that is the warm row); "first
sight" is a list tokenflex has never seen, so every message of it is checked (a bad
message that is never read is still reported).

Then, unless ``--no-peers``, the peers' table (LangChain, LiteLLM, LlamaIndex), from
``scripts/bench_fit.py`` (needs the bench venv: ``make bench``).

Usage::

    .venv/bin/python scripts/bench.py --quick     # ~1-2 minutes
    make bench                                    # everything, peers included
"""

from __future__ import annotations

import argparse
import compileall
import os
import statistics
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parent
sys.path.insert(0, str(ROOT))

import bench_fit as bf  # noqa: E402

Row = tuple[str, str, str, str, str, str]


def fmt(ms: float) -> str:
    if ms >= 1000:
        return f"{ms / 1000:.2f} s"
    if ms >= 1:
        return f"{ms:.1f} ms"
    return f"{ms * 1000:.0f} µs"


def interleaved(
    variants: dict[str, tuple[Callable[[], Any], Callable[[], None] | None]], runs: int
) -> dict[str, float]:
    """Median ms of each variant, run round after round (``before`` untimed)."""
    times: dict[str, list[float]] = {k: [] for k in variants}
    for _ in range(runs):
        for name, (fn, before) in variants.items():
            if before is not None:
                before()
            t0 = time.perf_counter()
            fn()
            times[name].append((time.perf_counter() - t0) * 1000)
    return {k: statistics.median(v) for k, v in times.items()}


def row(
    case: str, tf: float, ref: float, ref_label: str, goal: str, ok: bool | None, ratio: str = ""
) -> Row:
    r = ratio or (f"{tf / ref:.2f}×" if ref else "—")
    return (
        case,
        fmt(tf),
        f"{fmt(ref)} ({ref_label})" if ref else ref_label,
        r,
        goal,
        "—" if ok is None else ("yes" if ok else "NO"),
    )


def as_anthropic(msgs: list[dict[str, str]]) -> tuple[str, list[dict[str, Any]]]:
    system = msgs[0]["content"]
    return system, [
        {"role": m["role"], "content": [{"type": "text", "text": m["content"]}]} for m in msgs[1:]
    ]


def as_responses(msgs: list[dict[str, str]]) -> tuple[str, list[dict[str, Any]]]:
    system = msgs[0]["content"]
    items: list[dict[str, Any]] = []
    for m in msgs[1:]:
        kind = "output_text" if m["role"] == "assistant" else "input_text"
        items.append(
            {
                "type": "message",
                "role": m["role"],
                "content": [{"type": kind, "text": m["content"]}],
            }
        )
    return system, items


def local_rows(quick: bool) -> list[Row]:
    import importlib

    import tokenflex

    try:  # (an older tree, for a before/after run, has it under formats)
        fitting: Any = importlib.import_module("tokenflex.roundtrip")
    except ImportError:
        fitting = importlib.import_module("tokenflex.formats.fitting")
    # (a tree from before fit() remembered lists has nothing to forget)
    forget: Callable[..., None] = getattr(fitting, "forget", lambda *_: None)

    enc = bf.encoding()
    limit = bf.make_limit(enc)
    model = bf.tf_model()
    opts = bf.fit_options(model)

    def fit(msgs: Any, **kw: Any) -> Any:
        return tokenflex.fit(msgs, **opts, **kw)

    # (a tree from before fit() kept its last plan of a list has none to drop)
    drop_plan: Callable[..., None] = getattr(fitting, "remember", lambda *_: None)
    kept: list[list[Any]] = []  # the lists whose plans a cold fit must not find

    def clear() -> None:
        """Cold: the count cache emptied, and fit()'s last plan of each list dropped (it
        would answer an unchanged list without counting); what fit() read of the list
        stays remembered, as before that plan was kept."""
        bf.clear_tokenflex()
        for m in kept:
            drop_plan(m, None)

    def first(msgs: list[Any], **kw: Any) -> None:
        """A fit of a list never seen (a new list of the same items), then forgotten, so
        it does not push the others out of what fit() remembers."""
        fresh = list(msgs)
        fit(fresh, **kw)
        forget(fresh)

    rows: list[Row] = []
    runs = 5 if quick else 15
    big = 100_000
    n10 = bf.conversation(10_000)
    n100 = bf.make_conversation(big, seed=1000 + big)
    kept += (n10, n100)
    fit(n10[:3])
    print("fit cold / warm / first sight...", file=sys.stderr)
    for n, msgs in ((10_000, n10), (big, n100)):
        fit(msgs)
        variants: dict[str, tuple[Callable[[], Any], Callable[[], None] | None]] = {
            "limit": (lambda m=msgs: limit(m), None),
            "cold": (lambda m=msgs: fit(m), clear),
            "first": (lambda m=msgs: first(m), clear),
        }
        if n == 10_000:
            # warm: the same list fitted again right after a fit of it (the fit before is
            # not timed), as a chat client sends one conversation turn after turn
            variants["warm"] = (lambda m=msgs: fit(m), lambda m=msgs: fit(m))
        t = interleaved(variants, runs if n == 10_000 else max(3, runs // 3))
        goal = 1.2 if n == 10_000 else 1.3
        rows.append(
            row(
                f"cold fit(), N = {n:,}, 8k window",
                t["cold"],
                t["limit"],
                "limit",
                f"≤ {goal}×",
                t["cold"] / t["limit"] <= goal,
            )
        )
        if n == 10_000:
            rows.append(
                row(
                    "warm fit(), N = 10k, 8k",
                    t["warm"],
                    t["limit"],
                    "limit",
                    "≤ 0.1×",
                    t["warm"] / t["limit"] <= 0.1,
                )
            )
        rows.append(
            row(
                f"first-sight fit(), N = {n:,} (every message checked)",
                t["first"],
                t["limit"],
                "limit",
                "—",
                None,
            )
        )

    print("Anthropic / Responses...", file=sys.stderr)
    a_sys, a_msgs = as_anthropic(n10)
    r_sys, r_items = as_responses(n10)
    kept += (a_msgs, r_items)
    fit(a_msgs, system=a_sys)
    fit(r_items, system=r_sys, format="responses")
    t = interleaved(
        {
            "chat": (lambda: fit(n10), clear),
            "anthropic": (lambda: fit(a_msgs, system=a_sys), clear),
            "responses": (lambda: fit(r_items, system=r_sys, format="responses"), clear),
            "chat-first": (lambda: first(n10), clear),
            "anthropic-first": (lambda: first(a_msgs, system=a_sys), clear),
            "responses-first": (lambda: first(r_items, system=r_sys, format="responses"), clear),
        },
        runs,
    )
    for fmt_name in ("anthropic", "responses"):
        rows.append(
            row(
                f"{fmt_name.capitalize()} input, 10k messages, cold",
                t[fmt_name],
                t["chat"],
                "same history as chat",
                "≤ 1.3×",
                t[fmt_name] / t["chat"] <= 1.3,
            )
        )
        rows.append(
            row(
                f"{fmt_name.capitalize()} input, 10k messages, first sight",
                t[f"{fmt_name}-first"],
                t["chat-first"],
                "chat, first sight",
                "—",
                None,
            )
        )

    print("sessions...", file=sys.stderr)
    system, pairs = bf.session()
    if quick:
        pairs = pairs[:300]
    texts = [m["content"] for pair in pairs for m in pair]

    def floor() -> None:
        encode = enc.encode_ordinary
        for text in texts:
            len(encode(text))

    def list_session() -> None:
        msgs = [system]
        for user, assistant in pairs:
            msgs.append(user)
            fit(msgs)
            msgs.append(assistant)

    def conv_session(window: int) -> Callable[[], None]:
        return bf.conversation_session(system, pairs, model, window)

    # The rows above left their 10k- and 100k-message lists in what fit() remembers (the
    # last four lists): each round's new growing list would push one of them out, and pay
    # for freeing it (about 1 ms for 100k messages) inside a timed session. A chat loop
    # pays that once in a process, not once per 300 turns: forgotten here, untimed.
    forget()
    t = interleaved(
        {
            "floor": (floor, clear),
            "list": (list_session, clear),
            "conv8k": (conv_session(bf.BUDGET), clear),
            "conv100k": (conv_session(100_000), clear),
        },
        3 if quick else 5,
    )
    turns = f"{len(pairs):,} turns"
    rows.append(
        row(
            f"fit(growing list), {turns}",
            t["list"],
            t["floor"],
            "incremental limit",
            "≤ 2×",
            t["list"] / t["floor"] <= 2,
        )
    )
    for key, label in (("conv8k", "8k"), ("conv100k", "100k")):
        rows.append(
            row(
                f"Conversation append + fit, {turns}, B = {label}",
                t[key],
                t["floor"],
                "incremental limit",
                "≤ 1.5×",
                t[key] / t["floor"] <= 1.5,
            )
        )

    sessions_end = len(rows)  # the fast backend's rows go here, measured last (below)

    print("count_messages warm, 100k...", file=sys.stderr)
    tokenflex.count_messages(n100, model=model)
    t = interleaved({"warm": (lambda: tokenflex.count_messages(n100, model=model), None)}, 3)
    cache = tokenflex.get_tokenizer("o200k_base")
    rows.append(
        row(
            "count_messages warm, 100k-message history",
            t["warm"],
            0,
            f"cache {cache.bytes / 2**20:.0f} of {cache.max_bytes / 2**20:.0f} MiB",
            "≤ 0.2 s",
            t["warm"] <= 200,
        )
    )

    print("estimate vs tiktoken...", file=sys.stderr)
    from tokenflex.tokenizers.estimate import clear_caches, estimate_tokens

    est_texts = [f"{i} {m['content']}" for i, m in enumerate(n10[:2000])]

    def est() -> None:
        for text in est_texts:
            estimate_tokens(text)

    def tik() -> None:
        encode = enc.encode_ordinary
        for text in est_texts:
            len(encode(text))

    estimate_tokens("warm up: load the data file")  # loaded once per process, not timed
    # cold: the estimator's caches emptied before each round, as on texts never seen
    t = interleaved({"est": (est, clear_caches), "tik": (tik, None)}, 3 if quick else 7)
    speed = t["tik"] / t["est"]
    rows.append(
        row(
            "estimate cold vs tiktoken o200k (2,000 texts)",
            t["est"],
            t["tik"],
            "tiktoken",
            "≥ 1× as fast",
            speed >= 1,
            f"{speed:.2f}× as fast",
        )
    )
    rows[sessions_end:sessions_end] = fast_session_rows(
        {"floor": floor, "list": list_session}, conv_session, clear, turns, 3 if quick else 5
    )
    return rows


def fast_session_rows(
    runs_of: dict[str, Callable[[], None]],
    conv_session: Callable[[int], Callable[[], None]],
    clear: Callable[[], None],
    turns: str,
    runs: int,
) -> list[Row]:
    """The session rows again with ``prefer_fast_backend()`` (fastokens: what the proxy
    and any long-running process that opts in counts with), against the same tiktoken
    floor, interleaved in one run. Informational: the goals are for the default
    backend. Measured last: the switch holds for the rest of the process."""
    import tokenflex
    from tokenflex.tokenizers import prefer_fast_backend

    if not prefer_fast_backend():
        return [("sessions, fast backend", "—", "—", "—", "—", "not measured (no fastokens)")]
    print("sessions, fast backend...", file=sys.stderr)
    tokenflex.get_tokenizer("o200k_base").count("load the fast backend: not timed")
    t = interleaved(
        {
            "floor": (runs_of["floor"], clear),
            "list": (runs_of["list"], clear),
            "conv8k": (conv_session(bf.BUDGET), clear),
            "conv100k": (conv_session(100_000), clear),
        },
        runs,
    )
    out = [
        row(
            f"fit(growing list), {turns}, fast backend",
            t["list"],
            t["floor"],
            "incremental limit",
            "—",
            None,
        )
    ]
    for key, label in (("conv8k", "8k"), ("conv100k", "100k")):
        out.append(
            row(
                f"Conversation append + fit, {turns}, B = {label}, fast backend",
                t[key],
                t["floor"],
                "incremental limit",
                "—",
                None,
            )
        )
    return out


def startup_rows(quick: bool) -> list[Row]:
    """``import tokenflex`` and ``tokenflex count small.txt``, in fresh interpreters."""
    from tokenflex.tokenizers._tiktoken import _URLS, ranks_file

    py = sys.executable
    env = dict(os.environ)
    import tokenflex

    src = str(Path(tokenflex.__file__).resolve().parent.parent)  # the tree measured
    env["PYTHONPATH"] = src + os.pathsep + env.get("PYTHONPATH", "")
    # The tree's bytecode written first, as pip writes an installed package's (tiktoken's
    # is, in site-packages): where PYTHONDONTWRITEBYTECODE is set (this project's
    # machines), each one-shot run would compile every module it imports, ~40-100 ms.
    compileall.compile_dir(str(Path(tokenflex.__file__).resolve().parent), quiet=1)
    cache = tempfile.mkdtemp(prefix="tf-bench-")
    import hashlib

    key = hashlib.sha1(_URLS["o200k_base"].encode()).hexdigest()
    Path(cache, key).write_bytes(ranks_file("o200k_base"))
    env["TIKTOKEN_CACHE_DIR"] = cache  # the one-liner loads tiktoken's own cached file
    small = Path(cache, "small.txt")
    small.write_text("The quick brown fox jumps over the lazy dog.\n" * 20, encoding="utf-8")

    def imported(module: str) -> Callable[[], Any]:
        code = (
            f"import time; t = time.perf_counter(); import {module}; print(time.perf_counter() - t)"
        )

        def run() -> float:
            out = subprocess.run(
                [py, "-c", code], env=env, capture_output=True, text=True, check=True
            )
            return float(out.stdout) * 1000

        return run

    def wall(cmd: list[str]) -> Callable[[], Any]:
        return lambda: subprocess.run(cmd, env=env, capture_output=True, check=True)

    runs = 5 if quick else 11
    imports: dict[str, list[float]] = {"tokenflex": [], "tiktoken": []}
    for _ in range(runs):
        for name in imports:
            imports[name].append(imported(name)())
    tf_i, tk_i = (statistics.median(imports[k]) for k in ("tokenflex", "tiktoken"))
    one_liner = (
        "import sys, tiktoken; print(len(tiktoken.get_encoding('o200k_base')"
        ".encode_ordinary(open(sys.argv[1], encoding='utf-8').read())))"
    )
    t = interleaved(
        {
            "count": (wall([py, "-m", "tokenflex", "count", str(small)]), None),
            "tiktoken": (wall([py, "-c", one_liner, str(small)]), None),
        },
        runs,
    )
    return [
        row("import tokenflex", tf_i, tk_i, "import tiktoken", "≤ 80 ms", tf_i <= 80),
        row(
            "tokenflex count small.txt, one shot",
            t["count"],
            t["tiktoken"],
            "tiktoken one-liner",
            "≤ 1.2×",
            t["count"] / t["tiktoken"] <= 1.2,
        ),
    ]


def proxy_rows(quick: bool) -> list[Row]:
    try:
        import bench_proxy  # type: ignore[import-not-found]
    except ImportError:
        return [("proxy rows", "—", "—", "—", "—", "not measured (no scripts/bench_proxy.py)")]
    rows: list[Row] = bench_proxy.rows(quick=quick)
    return rows


def table(rows: list[Row]) -> str:
    header = ("case", "tokenflex", "reference", "ratio", "goal", "met")
    lines = ["| " + " | ".join(header) + " |", "|" + "---|" * len(header)]
    lines += ["| " + " | ".join(r) + " |" for r in rows]
    return "\n".join(lines)


def load() -> str:
    try:
        return " / ".join(f"{x:.1f}" for x in os.getloadavg())
    except OSError:  # pragma: no cover
        return "?"


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--quick", action="store_true", help="fewer rounds, a shorter session")
    parser.add_argument("--no-peers", action="store_true", help="skip LangChain/LiteLLM/LlamaIndex")
    parser.add_argument("--only", choices=("local", "startup", "proxy"), help="one part only")
    args = parser.parse_args()
    bf.offline_env()
    started = time.perf_counter()
    load_before = load()
    rows: list[Row] = []
    if args.only in (None, "local"):
        rows += local_rows(args.quick)
    if args.only in (None, "startup"):
        rows += startup_rows(args.quick)
    if args.only in (None, "proxy"):
        rows += proxy_rows(args.quick)
    print(table(rows))
    print(
        f"\n{bf.machine()}; load average {load_before} before, {load()} after; "
        f"{time.perf_counter() - started:.0f} s{' (--quick)' if args.quick else ''}"
    )
    if args.no_peers or args.only:
        return
    bf.guard_network()
    try:
        peers = bf.bench_peers(args.quick)
    except Exception as exc:  # the peers live in the bench venv (make bench)
        print(f"\npeers not measured: {type(exc).__name__}: {exc}")
        return
    print("\nPeers (same inputs, o200k, 8k budget), from scripts/bench_fit.py:")
    bf.print_rich(bf.bench_local(args.quick), peers)


if __name__ == "__main__":
    main()
