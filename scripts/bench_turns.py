"""The sessions of ``scripts/bench.py`` alone, for an instruction count.

Runs ``bench_fit.session()``'s first 300 turns ``reps`` times, counts cleared before each:
``conv`` (a :class:`tokenflex.Conversation`: append, fit, append; ``window`` tokens of
input), ``list`` (``fit()`` of one growing list, an 8k window), ``floor`` (tiktoken's
``encode_ordinary`` of each new message once: the incremental limit) or ``none`` (nothing:
the imports and the data, to subtract). Under ``valgrind --tool=callgrind`` the
instructions repeat exactly from run to run, where wall-clock time on a shared machine does
not (see docs/benchmarks.md)::

    PYTHONPATH=src valgrind --tool=callgrind --callgrind-out-file=/dev/null \\
        .venv/bin/python scripts/bench_turns.py conv 100000 3
"""

from __future__ import annotations

import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))

import bench_fit as bf

import tokenflex


def main() -> None:
    which = sys.argv[1]
    window = int(sys.argv[2]) if len(sys.argv) > 2 else 100_000
    reps = int(sys.argv[3]) if len(sys.argv) > 3 else 1
    model = bf.tf_model()
    system, pairs = bf.session()
    pairs = pairs[:300]
    enc = bf.encoding()
    opts = bf.fit_options(model)

    def floor() -> None:
        for user, assistant in pairs:
            len(enc.encode_ordinary(user["content"]))
            len(enc.encode_ordinary(assistant["content"]))

    def growing() -> None:
        msgs = [system]
        for user, assistant in pairs:
            msgs.append(user)
            tokenflex.fit(msgs, **opts)
            msgs.append(assistant)

    def nothing() -> None:
        return None

    conv = bf.conversation_session(system, pairs, model, window)
    run = {"floor": floor, "conv": conv, "list": growing, "none": nothing}[which]
    tokenflex.fit([system], **opts)  # the imports and first-use work, in every run
    for _ in range(reps):
        bf.clear_tokenflex()
        run()


if __name__ == "__main__":
    main()
