def split(text: str, /) -> list[str]: ...
def count(text: str, table: frozenset[str], /) -> tuple[int, list[str]]: ...
def plain_total(
    messages: list[dict[str, object]],
    envelopes: dict[str, int],
    cache: dict[int, int],
    shift: int,
    /,
) -> tuple[int, list[int]] | None: ...
def plain_run(
    messages: list[dict[str, object]],
    hi: int,
    lo: int,
    envelopes: dict[str, int],
    cache: dict[int, int],
    shift: int,
    total: int,
    bound: int,
    limit: int,
    /,
) -> tuple[list[int], int]: ...
def plain_until(messages: list[object], lo: int, hi: int, roles: dict[str, object], /) -> int: ...
def is_json(value: object, /) -> bool: ...
def json_scan(value: object, limit: int, wide: float, /) -> int: ...
def message_total(
    msg: object,
    roles: frozenset[str],
    text_parts: dict[str, str],
    per_message: int,
    per_name: int,
    tool_result: int,
    tool_call: int,
    cache: dict[int, int],
    shift: int,
    /,
) -> tuple[int, int] | None: ...
def json_outline(
    raw: bytes, key: bytes, at: int, resume: int, count: int, /
) -> tuple[int, int, int, list[int]] | None: ...
def common_prefix(a: bytes, b: bytes, /) -> int: ...
def find_same(items: list[object], obj: object, lo: int, /) -> int: ...
def same_run(a: list[object], i: int, b: list[object], j: int, /) -> int: ...
