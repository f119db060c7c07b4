# cython: language_level=3, annotation_typing=False, boundscheck=False, wraparound=False
"""The dynamic batcher's decision over plain ints: what to dispatch now, or how long to wait.

This file is the single source of two builds. Run as Python it is ``_batcher_py``; setup.py
compiles the same file with Cython into ``tritonlite.scheduling._batcher_c``, taking its C types
from ``_batcher_c.pxd`` beside it (Cython finds a module's ``.pxd`` by module name). Only
``scheduling/batcher.py`` chooses between the two.

``BatchQueue`` never sees a request, a future or the event loop. The caller (the dynamic
batching glue) names each request by an int *slot*, and passes sizes, clocks (monotonic ns),
priorities and *shape keys* (equal keys = requests whose non-batch shapes allow one batch).
Every int must fit in int64.

The semantics are Triton's dynamic batcher (``DynamicBatchScheduler::GetDynamicBatch`` and
``PriorityQueue``) with the caller's payload always empty, because the caller asks only when an
instance is free.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence

try:
    import cython
except ImportError:  # Cython is a build-time dependency; the pure twin runs without it

    class _CythonShim:
        compiled = False

    cython = _CythonShim()

COMPILED: bool = bool(cython.compiled)

# push() results; integer values are used so they can be cythonized
ACCEPTED = 0
REJECT_QUEUE_FULL = 1

# ModelQueuePolicy.TimeoutAction values, as numbered in model_config.proto
TIMEOUT_REJECT = 0
TIMEOUT_DELAY = 1

_NO_DEADLINE = -1
# Below this many consumed entries a list is not worth compacting.
_COMPACT_MIN = 64


class _Entry:
    """One queued request; ``alive`` is cleared instead of deleting from the middle of a list."""

    def __init__(self) -> None:
        self.slot = 0
        self.batch_size = 1
        self.enqueue_ns = 0
        self.deadline_ns = _NO_DEADLINE
        self.shape_key = 0
        self.level = 0
        self.alive = True


class _Level:
    """One priority level: its unexpired FIFO, its delayed FIFO and its queue policy."""

    def __init__(self, policy: Sequence[int]) -> None:
        action, timeout_ns, allow_override, max_size = policy
        if action not in (TIMEOUT_REJECT, TIMEOUT_DELAY):
            raise ValueError(f"unknown timeout_action {action}")
        if timeout_ns < 0 or max_size < 0:
            raise ValueError("default_timeout_ns and max_queue_size must be >= 0")
        self.main: list[_Entry] = []
        self.main_head = 0
        self.delayed: list[_Entry] = []
        self.delayed_head = 0
        self.size = 0
        self.action = int(action)
        self.timeout_ns = int(timeout_ns)
        self.allow_override = bool(allow_override)
        self.max_size = int(max_size)


def _compact(entries: list[_Entry], head: int) -> int:
    """Drop consumed entries once they are most of the list; returns the new head."""
    if head == len(entries):
        entries.clear()
        return 0
    if head >= _COMPACT_MIN and 2 * head >= len(entries):
        del entries[:head]
        return 0
    return head


class BatchQueue:
    """Triton's dynamic-batching decision over request slots (plain ints).

    Parameters
    ----------
    max_batch_size
        The model's ``max_batch_size`` (values below 1 act as 1, as in Triton).
    preferred_batch_sizes
        ``dynamic_batching.preferred_batch_size``; empty means ``[max_batch_size]``.
    max_queue_delay_ns
        ``max_queue_delay_microseconds * 1000``; 0 never waits.
    priority_levels
        ``priority_levels``; 0 means a single level.
    default_priority_level
        Level for requests with priority 0 or above ``priority_levels``; must be in
        ``1..priority_levels`` when ``priority_levels > 0``.
    default_policy
        ``(timeout_action, default_timeout_ns, allow_timeout_override, max_queue_size)`` for
        levels without their own policy; ``timeout_action`` is ``TIMEOUT_REJECT`` (0) or
        ``TIMEOUT_DELAY`` (1), 0 timeout and 0 size mean none.
    level_policies
        ``priority_queue_policy``: level (1-based) -> policy tuple as above.

    Notes
    -----
    Dispatch order is level 1 first; within a level, FIFO of unexpired requests, then FIFO of
    requests whose DELAY-policy timeout passed. A batch is always a prefix of dispatch order,
    so the caller dispatches with ``pop(take)`` right after ``next_batch`` said ``take``.
    Not thread-safe: the caller serializes every call (it lives on the event loop).
    """

    def __init__(
        self,
        max_batch_size: int,
        preferred_batch_sizes: Sequence[int] = (),
        max_queue_delay_ns: int = 0,
        priority_levels: int = 0,
        default_priority_level: int = 0,
        default_policy: Sequence[int] = (TIMEOUT_REJECT, 0, False, 0),
        level_policies: Mapping[int, Sequence[int]] | None = None,
    ) -> None:
        self.max_batch_size = max(1, int(max_batch_size))
        preferred = sorted({int(size) for size in preferred_batch_sizes})
        if any(size < 1 or size > self.max_batch_size for size in preferred):
            raise ValueError(
                f"preferred batch sizes must be in 1..{self.max_batch_size}, got {preferred}"
            )
        if not preferred:
            preferred = [self.max_batch_size]
        self.preferred_batch_sizes = tuple(preferred)
        self._max_preferred = max(preferred)
        self._is_preferred = [False] * (self._max_preferred + 1)
        for size in preferred:
            self._is_preferred[size] = True
        if max_queue_delay_ns < 0:
            raise ValueError("max_queue_delay_ns must be >= 0")
        self.max_queue_delay_ns = int(max_queue_delay_ns)

        policies = dict(level_policies or {})
        if priority_levels < 0:
            raise ValueError("priority_levels must be >= 0")
        self.priority_levels = int(priority_levels)
        if self.priority_levels == 0:
            self._default_index = 0
            self._levels = [_Level(default_policy)]
        else:
            if not 1 <= default_priority_level <= self.priority_levels:
                raise ValueError(
                    f"default_priority_level {default_priority_level} is not in "
                    f"1..{self.priority_levels}"
                )
            if any(not 1 <= level <= self.priority_levels for level in policies):
                raise ValueError(f"priority_queue_policy levels must be in 1..{priority_levels}")
            self._default_index = int(default_priority_level) - 1
            self._levels = [
                _Level(policies.get(level, default_policy))
                for level in range(1, self.priority_levels + 1)
            ]
        self._by_slot: dict[int, _Entry] = {}
        self._size = 0
        # A lower bound on the earliest unexpired deadline; exact right after _apply_policy.
        self._next_deadline = _NO_DEADLINE
        self._rejected: list[int] = []
        self._scan_pending = 0
        self._scan_count = 0
        self._scan_best = 0
        self._scan_best_count = 0
        self._scan_oldest = 0
        self._scan_closest = _NO_DEADLINE
        self._scan_shape = 0
        self._scan_send_now = False

    def __len__(self) -> int:
        return self._size

    def push(
        self,
        slot: int,
        batch_size: int,
        now_ns: int,
        priority: int = 0,
        timeout_ns: int = 0,
        shape_key: int = 0,
    ) -> int:
        """Queue a request.

        Parameters
        ----------
        slot
            The caller's id for the request; unique among queued requests.
        batch_size
            The request's batch dimension (values below 1 count as 1).
        now_ns
            Enqueue time (monotonic ns); starts the queue delay and the timeout.
        priority
            The request's priority; 0 or above ``priority_levels`` means the default level.
        timeout_ns
            The request's own timeout; used only when the level allows overrides and it is
            non-zero and below the level's (non-zero) default, as in Triton.
        shape_key
            Requests share a batch only with requests of equal key.

        Returns
        -------
        int
            ``ACCEPTED`` (0), or ``REJECT_QUEUE_FULL`` when the level holds ``max_queue_size``
            requests (fail it with UNAVAILABLE "Exceeds maximum queue size").
        """
        if slot in self._by_slot:
            raise ValueError(f"slot {slot} is already queued")
        index = self._default_index
        if self.priority_levels != 0 and 1 <= priority <= self.priority_levels:
            index = priority - 1
        level = self._levels[index]
        if level.max_size != 0 and level.size >= level.max_size:
            return REJECT_QUEUE_FULL
        timeout = level.timeout_ns
        if level.allow_override and 0 < timeout_ns < timeout:
            timeout = timeout_ns
        entry = _Entry.__new__(_Entry)
        entry.slot = slot
        entry.batch_size = batch_size if batch_size > 1 else 1
        entry.enqueue_ns = now_ns
        entry.shape_key = shape_key
        entry.level = index
        entry.alive = True
        if timeout != 0:
            entry.deadline_ns = now_ns + timeout
            if self._next_deadline == _NO_DEADLINE or entry.deadline_ns < self._next_deadline:
                self._next_deadline = entry.deadline_ns
        else:
            entry.deadline_ns = _NO_DEADLINE
        level.main.append(entry)
        level.size += 1
        self._size += 1
        self._by_slot[slot] = entry
        return ACCEPTED

    def next_batch(self, now_ns: int) -> tuple[int, int]:
        """Decide what a free instance should run now.

        Applies the queue policies at ``now_ns`` first (see ``expired``).

        Returns
        -------
        tuple[int, int]
            ``(take, wait_ns)``. ``take > 0``: dispatch the first ``take`` requests in dispatch
            order now (``pop(take)``), ``wait_ns`` is 0. ``take == 0``: nothing to run yet; ask
            again after ``wait_ns`` ns (> 0), or, with ``wait_ns == -1``, when a request arrives
            (the queue is empty).
        """
        self._apply_policy(now_ns)
        if self._size == 0:
            return 0, -1
        self._scan_pending = 0
        self._scan_count = 0
        self._scan_best = 0
        self._scan_best_count = 0
        self._scan_oldest = 0
        self._scan_closest = _NO_DEADLINE
        self._scan_shape = 0
        self._scan_send_now = False
        for level in self._levels:
            if level.size == 0:
                continue
            if self._scan(level.main, level.main_head):
                break
            if self._scan(level.delayed, level.delayed_head):
                break

        delay = self.max_queue_delay_ns
        waited = now_ns - self._scan_oldest
        delay_exceeded = delay != 0 and waited >= delay
        if self._scan_best != 0 and not delay_exceeded:
            return self._scan_best_count, 0
        if (
            self._scan_send_now
            or self._scan_pending >= self._max_preferred
            or delay_exceeded
            or delay == 0
        ):
            return self._scan_count, 0
        wait = delay - waited
        # Wake when a request of the pending batch expires, so it leaves the batch on time.
        if self._scan_closest != _NO_DEADLINE and self._scan_closest + 1 - now_ns < wait:
            wait = self._scan_closest + 1 - now_ns
        return 0, wait

    def _scan(self, entries: list[_Entry], start: int) -> bool:
        """Grow the pending batch over ``entries[start:]``; True when the batch is closed."""
        for i in range(start, len(entries)):
            entry = entries[i]
            if not entry.alive:
                continue
            size = entry.batch_size
            if self._scan_count == 0:
                self._scan_shape = entry.shape_key
            else:
                if self._scan_pending + size > self._max_preferred and self._scan_best == 0:
                    self._scan_best = self._scan_pending
                    self._scan_best_count = self._scan_count
                if self._scan_pending + size > self.max_batch_size:
                    self._scan_send_now = True
                    return True
                if entry.shape_key != self._scan_shape:
                    self._scan_send_now = True
                    return True
            self._scan_pending += size
            self._scan_count += 1
            if self._scan_count == 1 or entry.enqueue_ns < self._scan_oldest:
                self._scan_oldest = entry.enqueue_ns
            if entry.deadline_ns != _NO_DEADLINE and (
                self._scan_closest == _NO_DEADLINE or entry.deadline_ns < self._scan_closest
            ):
                self._scan_closest = entry.deadline_ns
            if self._scan_pending <= self._max_preferred and self._is_preferred[self._scan_pending]:
                self._scan_best = self._scan_pending
                self._scan_best_count = self._scan_count
        return False

    def pop(self, n: int) -> list[int]:
        """Remove the first ``n`` requests in dispatch order and return their slots, in order.

        Raises
        ------
        ValueError
            If fewer than ``n`` requests are queued.
        """
        if n < 0 or n > self._size:
            raise ValueError(f"cannot pop {n} of {self._size} queued requests")
        out: list[int] = []
        remaining = n
        for level in self._levels:
            if remaining == 0:
                break
            if level.size == 0:
                continue
            entries = level.main
            i = level.main_head
            while remaining != 0 and i < len(entries):
                entry = entries[i]
                i += 1
                if entry.alive:
                    self._take(entry, level, out)
                    remaining -= 1
            level.main_head = _compact(entries, i)
            entries = level.delayed
            i = level.delayed_head
            while remaining != 0 and i < len(entries):
                entry = entries[i]
                i += 1
                if entry.alive:
                    self._take(entry, level, out)
                    remaining -= 1
            level.delayed_head = _compact(entries, i)
        return out

    def _take(self, entry: _Entry, level: _Level, out: list[int]) -> None:
        entry.alive = False
        del self._by_slot[entry.slot]
        level.size -= 1
        self._size -= 1
        out.append(entry.slot)

    def remove(self, slot: int) -> bool:
        """Forget a queued request (cancelled by its client); False if it was not queued."""
        entry = self._by_slot.pop(slot, None)
        if entry is None:
            return False
        entry.alive = False
        level = self._levels[entry.level]
        level.size -= 1
        self._size -= 1
        return True

    def expired(self, now_ns: int) -> list[int]:
        """Apply the queue policies at ``now_ns``; return the slots rejected for timeout.

        A request expires when ``now_ns > enqueue + timeout``. REJECT-policy requests leave the
        queue and are returned here (fail them with UNAVAILABLE "Request timeout expired"),
        including any that ``next_batch`` found; DELAY-policy requests move behind the
        unexpired requests of their level and keep no timeout.
        """
        self._apply_policy(now_ns)
        rejected = self._rejected
        self._rejected = []
        return rejected

    def next_deadline_ns(self) -> int:
        """When to call ``expired`` next: no timeout passes before this time; -1 if none.

        It may be earlier than the true earliest timeout (a wake-up with nothing to do is
        harmless), never later.
        """
        return self._next_deadline

    def _apply_policy(self, now_ns: int) -> None:
        if self._next_deadline == _NO_DEADLINE or now_ns <= self._next_deadline:
            return
        earliest = _NO_DEADLINE
        for level in self._levels:
            if level.timeout_ns == 0 or level.size == 0:
                continue
            kept: list[_Entry] = []
            entries = level.main
            for i in range(level.main_head, len(entries)):
                entry = entries[i]
                if not entry.alive:
                    continue
                if entry.deadline_ns != _NO_DEADLINE and now_ns > entry.deadline_ns:
                    entry.deadline_ns = _NO_DEADLINE
                    if level.action == TIMEOUT_DELAY:
                        level.delayed.append(entry)
                    else:
                        entry.alive = False
                        del self._by_slot[entry.slot]
                        level.size -= 1
                        self._size -= 1
                        self._rejected.append(entry.slot)
                    continue
                kept.append(entry)
                if entry.deadline_ns != _NO_DEADLINE and (
                    earliest == _NO_DEADLINE or entry.deadline_ns < earliest
                ):
                    earliest = entry.deadline_ns
            level.main = kept
            level.main_head = 0
        self._next_deadline = earliest
