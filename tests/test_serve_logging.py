"""The server's log line: its formatter writes what logging's own writes."""

from __future__ import annotations

import logging

from hypothesis import example, given, settings
from hypothesis import strategies as st

from tokenflex.cli._serve import LineFormatter

_FORMAT = "%(asctime)s %(levelname)s %(name)s: %(message)s"


def _record(created: float) -> logging.LogRecord:
    record = logging.LogRecord("tokenflex.x", logging.INFO, __file__, 1, "a line", None, None)
    record.created = created
    record.msecs = int((created - int(created)) * 1000) + 0.0
    return record


@settings(max_examples=200, deadline=None)
@given(
    st.lists(
        st.floats(min_value=-2e9, max_value=4e9, allow_nan=False)
        | st.integers(0, 4 * 10**9).map(lambda s: s + 0.999),
        min_size=1,
        max_size=12,
    )
)
@example([1.5, 1.999, 2.0, 1.25, -0.5, 0.5])
def test_the_line_formatter_writes_what_logging_writes(times: list[float]) -> None:
    """Records in any order of time (a second again, the next, one before): each line
    as ``logging.Formatter`` of the same format writes it, though the timestamp's text is
    made once a second (red when a second's text is reused for another second, or when
    the milliseconds are left out)."""
    ours, reference = LineFormatter(), logging.Formatter(_FORMAT)
    for created in times:
        record = _record(created)
        assert ours.format(record) == reference.format(record)
    record = _record(times[0])
    assert ours.formatTime(record, "%H:%M") == reference.formatTime(record, "%H:%M")
