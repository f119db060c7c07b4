"""``ExecTiming``: the timestamps a backend marks while it executes one batch.

Backends fill it; the core's statistics (``core/stats.py``) and traces read it.
"""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(slots=True)
class ExecTiming:
    """Timestamps (monotonic ns) a backend marks while executing one batch."""

    start_ns: int = 0
    input_end_ns: int = 0
    infer_end_ns: int = 0
    end_ns: int = 0

    def spans(self) -> tuple[int, int, int]:
        """(compute_input, compute_infer, compute_output) durations in ns."""
        inp = self.input_end_ns or self.start_ns
        inf = self.infer_end_ns or self.end_ns
        return max(0, inp - self.start_ns), max(0, inf - inp), max(0, self.end_ns - inf)
