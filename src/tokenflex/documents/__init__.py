"""Retrieved documents in a token budget: ranked chunks and their citations, packed exactly.

- :func:`pack_chunks` packs ranked :class:`Chunk` passages, citations included, into a
  token budget and returns a :class:`PackResult` that says what was admitted, what was
  dropped (:class:`DroppedChunk`) and why.

Modules: ``chunks`` (what packing takes and gives back), ``packing`` (ranking, counting
and the final check), ``render`` (how the context looks) and ``selection`` (the greedy
and knapsack solvers).

>>> from tokenflex.documents import Chunk, pack_chunks
>>> pack_chunks([Chunk("Paris is in France.", "Atlas")], budget=100, safety_buffer=0).partial
False
"""

from __future__ import annotations

from .chunks import Chunk, DroppedChunk, DropReason, PackResult
from .packing import pack_chunks

__all__ = ["Chunk", "DropReason", "DroppedChunk", "PackResult", "pack_chunks"]
