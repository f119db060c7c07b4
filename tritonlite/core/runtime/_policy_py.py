# cython: language_level=3, annotation_typing=False
"""``InlinePolicy``: per batch, whether an instance that may run on the loop runs it there.

This is the pure twin; ``_policy_c.pxd`` types it for Cython (``policy.py`` picks): every
inline run asks it once and gives it one sample, the single-request lane's included.
"""

from __future__ import annotations

# A batch of a thread-agnostic backend whose recent batches took less than this runs on the
# event loop: sending it off the loop and back costs thread wake-ups and GIL hand-offs, about
# 90 us each on 2-core VMs, more than such a batch itself. ONNX add_sub at HTTP concurrency 16
# (batches of ~6.5, 140-170 us on the loop) serves 19-20% more with 300 us than with 100 us
# (bench/RESULTS.md §0); batches of milliseconds (the MLP) stay off the loop either way.
INLINE_MAX_NS = 300_000
# The bound for a ``thread+batch`` instance (a batched run that leaves the interpreter lock and
# spans the cores) under a dynamic batcher with a delay. The loop read what arrived while such a
# batch waited, and a thread hand-off each way (medians 170 and 75 us on these VMs, the thread
# waiting for a CPU) was a fifth of what a 2 ms-delay MLP's cycle spent outside its delay and
# run: on the loop it served 4-11% more at HTTP c=16, and 1.5-1.6x with a 0.1 ms delay at HTTP
# c=4 (bench/RESULTS.md, issue 31 round 9). What arrives meanwhile is read after the run: a
# request of this model waits for the instance anyway, and while other models' requests arrive
# the model sends its batches to the thread (``Model._alone``).
WAITED_INLINE_MAX_NS = 2_000_000
# Spans measured on the instance thread include its waits for the GIL, which the busy loop holds:
# a fast batch can look slow there and would never come back to the loop. So a thread-agnostic
# instance whose recent spans are too long re-measures one batch on the loop now and then:
# after PROBE_FIRST thread batches, doubling up to PROBE_MAX while the probes stay too long.
PROBE_FIRST = 16
PROBE_MAX = 4096


class InlinePolicy:
    """Per batch, whether an instance that may run on the loop runs this one there.

    Owns the measured switching, and nothing else decides it: a batch runs inline while the
    recent batches took less than ``max_ns`` (INLINE_MAX_NS, or WAITED_INLINE_MAX_NS for a
    batcher's waited batches); the first batch is measured off the loop.
    Spans measured off the loop include waits for the GIL that the busy loop holds, so after
    PROBE_FIRST batches off the loop one is re-measured on it (doubling up to PROBE_MAX while
    the probes stay too long).
    """

    __slots__ = ("recent_ns", "max_ns", "_probe_every", "_since_probe", "_probing")

    def __init__(self, max_ns: int = INLINE_MAX_NS) -> None:
        self.max_ns = max_ns  # a batch runs inline while recent ones took less
        self.recent_ns = 0  # moving average of one batch's execution time
        self._probe_every = PROBE_FIRST
        self._since_probe = 0  # batches off the loop since the last inline probe
        self._probing = False

    def inline(self) -> bool:
        """Whether the next batch runs on the loop."""
        recent = self.recent_ns
        if recent == 0:
            return False
        if recent < self.max_ns:
            return True
        self._since_probe += 1
        if self._since_probe < self._probe_every:
            return False
        self._since_probe = 0
        self._probing = True
        return True

    def record(self, span: int) -> None:
        """Fold one batch's execution time into ``recent_ns``; a probe's replaces it.

        A sample counts for at most twice ``max_ns``: one batch preempted on a busy machine
        must not send a fast model to its thread (where GIL waits then keep its spans long).
        """
        if self._probing:
            self._probing = False
            self.recent_ns = span
            self._probe_every = (
                PROBE_FIRST if span < self.max_ns else min(self._probe_every * 2, PROBE_MAX)
            )
            return
        recent = self.recent_ns
        span = min(span, 2 * self.max_ns)
        self.recent_ns = span if not recent else (recent * 7 + span) // 8
