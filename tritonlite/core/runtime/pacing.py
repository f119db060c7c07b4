"""Whether a batch's answers go out all in one loop turn or one per turn (``AnswerPacing``).

One loop reads every connection. When a batch's answers all go out in one turn, a request
its first client sends back at once stays unread in its socket until the last answer is
written; its queue delay starts only then. Triton reads on other threads while it answers,
so its delay starts when the request arrives. With a dynamic batcher that waits (a
``max_queue_delay_microseconds`` the batch never fills before: the MLP at 2 ms and 16
clients, every batch 16), those unread microseconds are added to every cycle: measured on a
2-CPU VM, the loop took 0.53 ms to write 16 answers and read the first request back 0.71 ms
after it had answered it, of a 3.9 ms cycle (bench/RESULTS.md, issue 31 round 7).

Paced, one answer goes out per loop turn and the loop polls its sockets between them, so a
client's next request is read, and its delay started, while the batch is still being
answered. That spreads the answers over ``size`` turns. A batch whose delay is shorter than
that spread would close before its last clients are back, and the batches would split (the
MLP at 0.1 ms, every batch paced, ran 4-9% slower). So a batch is paced only:

* where nothing is queued (a queued request runs next at once, whoever is read meanwhile);
* where its model's delay covers the spread, ``size`` turns as estimated from the turns that
  paced batches took (``took``). Where a slow stretch has raised the estimate past a delay the
  first estimate covered, one batch in ``PROBE_EVERY`` is paced anyway, to measure again.
"""

from __future__ import annotations

__all__ = ["AnswerPacing"]

FIRST_TURN_NS = 100_000  # a loop turn with one answer and one read, until one is measured
PROBE_EVERY = 64  # one batch in this many that the estimate keeps unpaced measures it again


class AnswerPacing:
    """The pacing decision for one model, from its batcher's queue delay (0: never paced)."""

    __slots__ = ("_unpaced", "delay_ns", "turn_ns")

    def __init__(self, delay_ns: int) -> None:
        self.delay_ns = delay_ns
        self.turn_ns = FIRST_TURN_NS  # the estimate of one paced turn
        self._unpaced = 0  # batches the estimate kept unpaced since one was paced

    def paced(self, size: int, queued: bool) -> bool:
        """Whether a batch of ``size`` answers goes out one per loop turn."""
        if size < 2 or queued or self.delay_ns == 0:
            return False
        if size * self.turn_ns <= self.delay_ns:
            return True
        if size * FIRST_TURN_NS > self.delay_ns:
            return False
        # A slow stretch raised the estimate: now and then a batch measures it again.
        self._unpaced += 1
        if self._unpaced < PROBE_EVERY:
            return False
        self._unpaced = 0
        return True

    def took(self, size: int, ns: int) -> None:
        """A paced batch of ``size`` answered its first to its last ``ns`` apart."""
        turn = min(ns // (size - 1), 2 * self.turn_ns)  # one preempted turn moves it little
        self.turn_ns += (turn - self.turn_ns) // 4
