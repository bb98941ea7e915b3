# The estimator's native cut of ASCII text (_fastcut.c); see estimate._native_cut.

def split(text: str, /) -> list[str]: ...
def count(text: str, table: frozenset[str], /) -> tuple[int, list[str]]: ...
def plain_total(
    messages: list[dict[str, object]],
    envelopes: dict[str, int],
    cache: dict[int, int],
    shift: int,
    /,
) -> tuple[int, list[int]] | None: ...
