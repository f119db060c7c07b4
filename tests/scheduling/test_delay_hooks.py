"""How the scheduler test hooks read their environment variables (C's atoi, as Triton)."""

from __future__ import annotations

import pytest

from tritonlite.scheduling import delay_hooks


@pytest.mark.parametrize(
    ("raw", "want"),
    [
        ("12", 12),
        (" \t12", 12),
        ("+7", 7),
        ("3abc", 3),
        ("", 0),
        ("x3", 0),
        ("-", 0),
        ("0", 0),
        ("-1", delay_hooks.NEVER),
    ],
)
def test_count_reads_the_value_as_atoi(raw: str, want: int) -> None:
    assert delay_hooks.count(delay_hooks.DELAY_ENV, {delay_hooks.DELAY_ENV: raw}) == want


def test_unset_is_no_hold() -> None:
    assert delay_hooks.count(delay_hooks.BACKLOG_DELAY_ENV, {}) == 0
