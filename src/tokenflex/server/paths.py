"""Which upstream path a pass-through request means: parsed, checked segment by segment.

The request path is never sliced or pasted into a URL as sent. It is split on ``/``, each
segment is percent-decoded, and a segment that could climb out of the upstream's base
path or be read as another separator is refused with a 400: ``.`` and ``..`` (also as
``%2e%2e``), an empty segment (``//``), a decoded ``/`` or ``\\`` (``%2f``, ``%5c``),
control characters. What is left is re-encoded, so the upstream sees only plain
segments below its base path; :meth:`tokenflex.server._upstream.Upstream.url` then
checks that the scheme, host and port are the configured ones.

>>> upstream_path("/x%30/v1/files", "x0")
'/v1/files'
>>> upstream_path("/v1/files/file-abc%20%C3%A9", None)
'/v1/files/file-abc%20%C3%A9'
"""

from __future__ import annotations

import fnmatch
import re
from urllib.parse import quote, unquote_to_bytes

from .errors import ProxyError

__all__ = ["aliases", "fitted_variant", "path_allowed", "upstream_path"]

# RFC 3986 pchar minus '@' and ':' (plain in a path, but they have no business there)
_SAFE = "!$&'()*+,;=-._~"
_CONTROL = re.compile(r"[\x00-\x1f\x7f]")
_MAX_SHOWN = 80


def _refuse(raw_path: str, why: str) -> ProxyError:
    shown = raw_path if len(raw_path) <= _MAX_SHOWN else raw_path[:_MAX_SHOWN] + "…"
    return ProxyError(
        400,
        f"The request path {shown!r} cannot be forwarded: {why}. Send a plain path like "
        "/v1/files/file-abc (segments without '.', '..', empty parts, %2F or backslashes).",
        param="path",
        code="invalid_path",
    )


def upstream_path(raw_path: str, route: str | None) -> str:
    """The path to forward for ``raw_path`` (as sent, still percent-encoded).

    Args:
        raw_path: The request target's path, as sent by the client.
        route: The ``[routes.NAME]`` prefix the request came through (its first decoded
            segment, removed here), or None.

    Returns:
        ``/seg/seg...``: each segment decoded, checked and re-encoded; ``/`` when empty.

    Raises:
        ProxyError: 400 ``invalid_path`` for a path that is not a plain list of segments.
    """
    if not raw_path.startswith("/"):
        raise _refuse(raw_path, "it does not start with '/' (absolute URLs are not accepted)")
    if "\\" in raw_path:
        raise _refuse(raw_path, "it contains a backslash")
    parts = raw_path[1:].split("/")
    decoded: list[bytes] = []
    for i, part in enumerate(parts):
        seg = unquote_to_bytes(part)
        if not seg:
            if i == len(parts) - 1 and i > 0:  # a trailing slash is kept
                decoded.append(b"")
                continue
            if len(parts) == 1:  # the path "/"
                break
            raise _refuse(raw_path, "it has an empty segment ('//')")
        if seg in (b".", b".."):
            raise _refuse(raw_path, f"segment {part!r} is a dot segment")
        if b"/" in seg or b"\\" in seg:
            raise _refuse(raw_path, f"segment {part!r} hides a slash or backslash")
        if _CONTROL.search(seg.decode("latin-1")):
            raise _refuse(raw_path, f"segment {part!r} has control characters")
        decoded.append(seg)
    if route is not None:
        if not decoded or decoded[0] != route.encode():
            raise _refuse(raw_path, f"it does not start with the route /{route}")
        decoded = decoded[1:]
    if decoded and decoded[0] == b"":
        decoded = []  # "/ROUTE/" means the upstream's root
    return "/" + "/".join(quote(seg, safe=_SAFE) for seg in decoded)


def path_allowed(path: str, patterns: list[str] | None) -> bool:
    """Whether a forwarded path (from :func:`upstream_path`) matches one of ``patterns``
    (shell-style, ``*`` matches anything, ``/`` included); True when there is no list.

    >>> path_allowed("/v1/files/abc", ["/v1/embeddings", "/v1/files/*"])
    True
    >>> path_allowed("/admin", ["/v1/*"])
    False
    """
    if patterns is None:
        return True
    return any(fnmatch.fnmatchcase(path, p) for p in patterns)


def aliases(path: str) -> list[str]:
    """The other spellings of a fitted route that upstreams serve as the same endpoint
    (llama.cpp answers ``/chat/completions`` too; most servers ignore a trailing slash):
    each is routed to the fitted handler, never passed through unfitted.

    >>> aliases("/v1/chat/completions")
    ['/v1/chat/completions/', '/chat/completions', '/chat/completions/']
    """
    bare = path.removeprefix("/v1")
    return [path + "/", bare, bare + "/"]


def fitted_variant(path: str, fitted: frozenset[str]) -> bool:
    """Whether a pass-through path (from :func:`upstream_path`) is a fitted route in
    another spelling that an upstream may still read as it (letter case, ``;params``,
    repeated or trailing slashes, no ``/v1``): refused, so fitting cannot be bypassed.

    >>> fitted_variant("/V1/Chat/Completions;x=1/", frozenset({"/v1/chat/completions"}))
    True
    >>> fitted_variant("/v1/files", frozenset({"/v1/chat/completions"}))
    False
    """
    segments = [seg.split(";")[0].split("%3b")[0] for seg in path.lower().split("/")]
    plain = "/" + "/".join(seg for seg in segments if seg)
    return plain in fitted or "/v1" + plain in fitted
