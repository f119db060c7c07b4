"""BatchQueue: the same tests on the pure and the compiled twin, plus a model-based property test.

The property test drives both twins and a deliberately naive reference (``RefQueue``, written
from the rules, not from the implementation) with the same random calls and clocks.
"""

from __future__ import annotations

import os
from dataclasses import dataclass, field
from typing import Any

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from tritonlite.scheduling import _batcher_py, batcher
from tritonlite.scheduling._batcher_py import (
    ACCEPTED,
    REJECT_QUEUE_FULL,
    TIMEOUT_DELAY,
    TIMEOUT_REJECT,
)

REQUIRE = os.environ.get("TRITONLITE_REQUIRE_EXTENSIONS") == "1"


def _compiled_module() -> Any:
    try:
        from tritonlite.scheduling import _batcher_c
    except ImportError as exc:
        if REQUIRE:
            raise AssertionError(
                "TRITONLITE_REQUIRE_EXTENSIONS=1 but _batcher_c is not built"
            ) from exc
        return None
    return _batcher_c


COMPILED = _compiled_module()
NOT_BUILT = "compiled twin tritonlite.scheduling._batcher_c is not built (pip install -e .)"


@pytest.fixture(params=["pure", "compiled"])
def BQ(request: pytest.FixtureRequest) -> Any:
    if request.param == "pure":
        return _batcher_py.BatchQueue
    if COMPILED is None:
        pytest.skip(NOT_BUILT)
    return COMPILED.BatchQueue


def test_twins_are_what_they_claim() -> None:
    assert _batcher_py.COMPILED is False
    if COMPILED is None:
        pytest.skip(NOT_BUILT)
    assert COMPILED.COMPILED is True
    assert COMPILED.__file__ != _batcher_py.__file__


def test_batcher_binds_compiled_twin_when_built() -> None:
    if os.environ.get("TRITONLITE_NO_EXTENSIONS") == "1":
        assert batcher.BatchQueue is _batcher_py.BatchQueue and not batcher.ACCELERATED
    elif COMPILED is not None:
        assert batcher.BatchQueue is COMPILED.BatchQueue and batcher.ACCELERATED
    assert batcher.describe().startswith("batcher: ")


# -- delay 0 -----------------------------------------------------------------------------------


def test_empty_queue_needs_no_timer(BQ: Any) -> None:
    q = BQ(8)
    assert len(q) == 0
    assert q.next_batch(0) == (0, -1)


def test_delay_zero_takes_what_is_queued(BQ: Any) -> None:
    q = BQ(8, [8], 0)
    for slot in range(3):
        assert q.push(slot, 1, slot) == ACCEPTED
    assert q.next_batch(100) == (3, 0)
    assert q.pop(3) == [0, 1, 2]
    assert len(q) == 0


def test_delay_zero_caps_at_max_batch_size(BQ: Any) -> None:
    q = BQ(4, [], 0)
    for slot in range(10):
        q.push(slot, 1, 0)
    assert q.next_batch(0) == (4, 0)
    assert q.pop(4) == [0, 1, 2, 3]
    assert q.next_batch(0) == (4, 0)


def test_batch_sizes_are_sums_of_request_batch_sizes(BQ: Any) -> None:
    q = BQ(8, [], 0)
    q.push(0, 4, 0)
    q.push(1, 3, 0)
    q.push(2, 2, 0)
    assert q.next_batch(0) == (2, 0)  # 4 + 3 = 7; adding 2 would exceed 8
    q.pop(2)
    assert q.next_batch(0) == (1, 0)


def test_oversized_request_goes_alone(BQ: Any) -> None:
    q = BQ(4, [], 0)
    q.push(0, 9, 0)
    q.push(1, 1, 0)
    assert q.next_batch(0) == (1, 0)
    assert q.pop(1) == [0]


# -- preferred sizes ---------------------------------------------------------------------------


def test_largest_formable_preferred_size_wins(BQ: Any) -> None:
    q = BQ(16, [2, 4, 8], 0)
    for slot in range(7):
        q.push(slot, 1, 0)
    assert q.next_batch(0) == (4, 0)
    q.pop(4)
    assert q.next_batch(0) == (2, 0)
    q.pop(2)
    assert q.next_batch(0) == (1, 0)


def test_preferred_size_dispatches_before_the_delay(BQ: Any) -> None:
    q = BQ(8, [4], 1000)
    for slot in range(3):
        q.push(slot, 1, 0)
    take, wait = q.next_batch(10)
    assert take == 0 and wait == 990
    q.push(3, 1, 10)
    assert q.next_batch(10) == (4, 0)


def test_request_that_overshoots_max_preferred_closes_the_batch(BQ: Any) -> None:
    q = BQ(8, [3], 1000)
    q.push(0, 2, 0)
    q.push(1, 2, 0)
    # 2 + 2 passes every preferred size: Triton sends what fits now instead of waiting.
    assert q.next_batch(0) == (1, 0)


def test_no_preferred_sizes_means_max_batch_size(BQ: Any) -> None:
    q = BQ(4, [], 1000)
    assert q.preferred_batch_sizes == (4,)
    for slot in range(4):
        q.push(slot, 1, 0)
    assert q.next_batch(1) == (4, 0)


# -- queue delay ---------------------------------------------------------------------------------


def test_delay_waits_for_the_oldest_deadline(BQ: Any) -> None:
    q = BQ(8, [8], 100)
    q.push(0, 1, 1000)
    assert q.next_batch(1000) == (0, 100)
    q.push(1, 1, 1030)
    assert q.next_batch(1050) == (0, 50)
    assert q.next_batch(1099) == (0, 1)
    assert q.next_batch(1100) == (2, 0)


def test_delay_exceeded_sends_past_the_preferred_size(BQ: Any) -> None:
    q = BQ(8, [2], 100)
    for slot in range(5):
        q.push(slot, 1, 0)
    assert q.next_batch(50) == (2, 0)
    assert q.next_batch(100) == (5, 0)


# -- shape keys ------------------------------------------------------------------------------


def test_batch_stops_at_first_shape_mismatch(BQ: Any) -> None:
    q = BQ(8, [8], 0)
    for slot, key in enumerate([7, 7, 9, 7]):
        q.push(slot, 1, 0, shape_key=key)
    assert q.next_batch(0) == (2, 0)
    assert q.pop(2) == [0, 1]
    assert q.next_batch(0) == (1, 0)
    assert q.pop(1) == [2]
    assert q.next_batch(0) == (1, 0)


def test_shape_mismatch_sends_without_waiting(BQ: Any) -> None:
    q = BQ(8, [8], 10_000)
    q.push(0, 1, 0, shape_key=1)
    q.push(1, 1, 0, shape_key=2)
    assert q.next_batch(1) == (1, 0)


# -- priorities ------------------------------------------------------------------------------


def test_priorities_fifo_within_level(BQ: Any) -> None:
    q = BQ(8, [8], 0, priority_levels=3, default_priority_level=2)
    q.push(0, 1, 0, priority=3)
    q.push(1, 1, 0, priority=2)
    q.push(2, 1, 0, priority=1)
    q.push(3, 1, 0, priority=0)  # default level 2
    q.push(4, 1, 0, priority=9)  # out of range: default level 2
    q.push(5, 1, 0, priority=1)
    assert q.next_batch(0) == (6, 0)
    assert q.pop(6) == [2, 5, 1, 3, 4, 0]


def test_priority_batch_respects_shape_across_levels(BQ: Any) -> None:
    q = BQ(8, [8], 0, priority_levels=2, default_priority_level=2)
    q.push(0, 1, 0, priority=2, shape_key=1)
    q.push(1, 1, 0, priority=1, shape_key=2)
    assert q.next_batch(0) == (1, 0)
    assert q.pop(1) == [1]


def test_bad_priority_config_is_rejected(BQ: Any) -> None:
    with pytest.raises(ValueError):
        BQ(8, [8], 0, priority_levels=2, default_priority_level=0)
    with pytest.raises(ValueError):
        BQ(8, [9], 0)


# -- queue policy ------------------------------------------------------------------------------


def test_reject_timeout(BQ: Any) -> None:
    q = BQ(8, [8], 1000, default_policy=(TIMEOUT_REJECT, 100, False, 0))
    q.push(0, 1, 0)
    q.push(1, 1, 50)
    assert q.next_deadline_ns() == 100
    assert q.expired(100) == []  # expires strictly after enqueue + timeout
    assert q.expired(101) == [0]
    assert len(q) == 1
    assert q.next_deadline_ns() == 150
    assert q.expired(200) == [1]
    assert q.next_batch(200) == (0, -1)


def test_next_batch_rejects_and_expired_reports_it(BQ: Any) -> None:
    q = BQ(8, [8], 1000, default_policy=(TIMEOUT_REJECT, 100, False, 0))
    q.push(0, 1, 0)
    q.push(1, 1, 90)
    # The wait ends when slot 0 expires, not at the end of the queue delay.
    assert q.next_batch(10) == (0, 91)
    assert q.next_batch(101) == (0, 90)  # slot 0 rejected; slot 1 expires after 190
    assert q.expired(101) == [0]
    assert q.expired(101) == []


def test_delay_timeout_moves_behind_level(BQ: Any) -> None:
    q = BQ(8, [8], 0, default_policy=(TIMEOUT_DELAY, 100, False, 0))
    q.push(0, 1, 0)
    q.push(1, 1, 60)
    q.push(2, 1, 120)
    assert q.expired(130) == []  # slot 0 is delayed, not rejected
    assert len(q) == 3
    assert q.next_batch(130) == (3, 0)
    assert q.pop(3) == [1, 2, 0]


def test_delay_policy_per_level(BQ: Any) -> None:
    q = BQ(
        8,
        [8],
        0,
        priority_levels=2,
        default_priority_level=1,
        default_policy=(TIMEOUT_REJECT, 10, False, 0),
        level_policies={1: (TIMEOUT_DELAY, 10, False, 0)},
    )
    q.push(0, 1, 0, priority=1)
    q.push(1, 1, 0, priority=2)
    q.push(2, 1, 20, priority=1)
    assert q.expired(20) == [1]
    assert q.pop(2) == [2, 0]


def test_timeout_override_only_lowers_a_default(BQ: Any) -> None:
    q = BQ(8, [8], 1000, default_policy=(TIMEOUT_REJECT, 100, True, 0))
    q.push(0, 1, 0, timeout_ns=10)
    q.push(1, 1, 0, timeout_ns=500)  # cannot raise the default
    assert q.expired(11) == [0]
    assert q.expired(101) == [1]
    no_override = BQ(8, [8], 1000, default_policy=(TIMEOUT_REJECT, 100, False, 0))
    no_override.push(0, 1, 0, timeout_ns=10)
    assert no_override.expired(50) == []
    no_default = BQ(8, [8], 1000, default_policy=(TIMEOUT_REJECT, 0, True, 0))
    no_default.push(0, 1, 0, timeout_ns=10)  # Triton: an override needs a default to lower
    assert no_default.expired(10**9) == []
    assert no_default.next_deadline_ns() == -1


def test_max_queue_size_overflow(BQ: Any) -> None:
    q = BQ(
        8,
        [8],
        0,
        priority_levels=2,
        default_priority_level=2,
        level_policies={1: (TIMEOUT_REJECT, 0, False, 2)},
    )
    assert q.push(0, 1, 0, priority=1) == ACCEPTED
    assert q.push(1, 1, 0, priority=1) == ACCEPTED
    assert q.push(2, 1, 0, priority=1) == REJECT_QUEUE_FULL
    assert q.push(3, 1, 0, priority=2) == ACCEPTED  # other level, no limit
    assert len(q) == 3
    q.pop(1)
    assert q.push(4, 1, 0, priority=1) == ACCEPTED


# -- remove, pop, bookkeeping ---------------------------------------------------------------


def test_remove(BQ: Any) -> None:
    q = BQ(8, [8], 0)
    for slot in range(4):
        q.push(slot, 1, 0)
    assert q.remove(1) is True
    assert q.remove(1) is False
    assert q.remove(99) is False
    assert len(q) == 3
    assert q.next_batch(0) == (3, 0)
    assert q.pop(3) == [0, 2, 3]
    q.push(1, 1, 0)  # a removed slot id may be reused
    assert q.pop(1) == [1]


def test_pop_more_than_queued_and_duplicate_slot_raise(BQ: Any) -> None:
    q = BQ(8)
    q.push(0, 1, 0)
    with pytest.raises(ValueError):
        q.push(0, 1, 0)
    with pytest.raises(ValueError):
        q.pop(2)


def test_long_run_compacts_and_stays_fifo(BQ: Any) -> None:
    q = BQ(4, [4], 0)
    expected = []
    got = []
    for slot in range(1000):
        q.push(slot, 1, slot)
        expected.append(slot)
        if slot % 3 == 0:
            q.remove(slot)
            expected.remove(slot)
        if slot % 7 == 6:
            take, _ = q.next_batch(slot)
            got.extend(q.pop(take))
    while len(q):
        take, _ = q.next_batch(10**6)
        got.extend(q.pop(take))
    assert got == expected


# -- reference model and property test ------------------------------------------------------


@dataclass
class _RefEntry:
    slot: int
    bs: int
    enq: int
    deadline: int  # -1: none
    shape: int


@dataclass
class _RefLevel:
    policy: tuple[int, int, bool, int]
    main: list[_RefEntry] = field(default_factory=list)
    delayed: list[_RefEntry] = field(default_factory=list)


class RefQueue:
    """The rules, written out as plainly as possible (O(n) everywhere)."""

    def __init__(
        self,
        mbs: int,
        preferred: list[int],
        delay: int,
        levels: int = 0,
        default_level: int = 0,
        default_policy: tuple[int, int, bool, int] = (0, 0, False, 0),
        level_policies: dict[int, tuple[int, int, bool, int]] | None = None,
    ) -> None:
        self.mbs = max(1, mbs)
        self.preferred = set(preferred) or {self.mbs}
        self.delay = delay
        self.nlevels = levels
        self.default_level = default_level
        count = max(1, levels)
        pol = level_policies or {}
        self.levels = [_RefLevel(pol.get(i + 1, default_policy)) for i in range(count)]
        self.rejected: list[int] = []

    def __len__(self) -> int:
        return sum(len(lv.main) + len(lv.delayed) for lv in self.levels)

    def order(self) -> list[_RefEntry]:
        return [e for lv in self.levels for e in lv.main + lv.delayed]

    def push(self, slot: int, bs: int, now: int, prio: int, timeout: int, shape: int) -> int:
        if self.nlevels == 0:
            lv = self.levels[0]
        elif 1 <= prio <= self.nlevels:
            lv = self.levels[prio - 1]
        else:
            lv = self.levels[self.default_level - 1]
        action, default_timeout, allow, max_size = lv.policy
        if max_size and len(lv.main) + len(lv.delayed) >= max_size:
            return REJECT_QUEUE_FULL
        t = default_timeout
        if allow and timeout != 0 and timeout < t:
            t = timeout
        lv.main.append(_RefEntry(slot, max(1, bs), now, now + t if t else -1, shape))
        return ACCEPTED

    def apply(self, now: int) -> None:
        for lv in self.levels:
            keep = []
            for e in lv.main:
                if e.deadline != -1 and now > e.deadline:
                    e.deadline = -1
                    if lv.policy[0] == TIMEOUT_DELAY:
                        lv.delayed.append(e)
                    else:
                        self.rejected.append(e.slot)
                else:
                    keep.append(e)
            lv.main = keep

    def next_batch(self, now: int) -> tuple[int, int]:
        self.apply(now)
        entries = self.order()
        if not entries:
            return 0, -1
        max_pref = max(self.preferred)
        pending = count = best = best_count = 0
        send_now = False
        batch: list[_RefEntry] = []
        for e in entries:
            if batch:
                if pending + e.bs > max_pref and best == 0:
                    best, best_count = pending, count
                if pending + e.bs > self.mbs or e.shape != batch[0].shape:
                    send_now = True
                    break
            batch.append(e)
            pending += e.bs
            count += 1
            if pending in self.preferred:
                best, best_count = pending, count
        oldest = min(e.enq for e in batch)
        exceeded = self.delay != 0 and now - oldest >= self.delay
        if best and not exceeded:
            return best_count, 0
        if send_now or pending >= max_pref or exceeded or self.delay == 0:
            return count, 0
        wait = self.delay - (now - oldest)
        deadlines = [e.deadline for e in batch if e.deadline != -1]
        if deadlines:
            wait = min(wait, min(deadlines) + 1 - now)
        return 0, wait

    def pop(self, n: int) -> list[int]:
        out: list[int] = []
        for lv in self.levels:
            for queue in (lv.main, lv.delayed):
                while queue and len(out) < n:
                    out.append(queue.pop(0).slot)
        return out

    def remove(self, slot: int) -> bool:
        for lv in self.levels:
            for queue in (lv.main, lv.delayed):
                for i, e in enumerate(queue):
                    if e.slot == slot:
                        del queue[i]
                        return True
        return False

    def expired(self, now: int) -> list[int]:
        self.apply(now)
        out, self.rejected = self.rejected, []
        return out

    def earliest_deadline(self) -> int:
        deadlines = [e.deadline for lv in self.levels for e in lv.main if e.deadline != -1]
        return min(deadlines) if deadlines else -1


_policy = st.tuples(
    st.sampled_from([TIMEOUT_REJECT, TIMEOUT_DELAY]),
    st.sampled_from([0, 0, 1, 10, 50]),
    st.booleans(),
    st.sampled_from([0, 0, 1, 3]),
)


@st.composite
def _configs(draw: st.DrawFn) -> dict[str, Any]:
    mbs = draw(st.integers(1, 8))
    levels = draw(st.integers(0, 3))
    return {
        "max_batch_size": mbs,
        "preferred_batch_sizes": draw(st.lists(st.integers(1, mbs), max_size=3)),
        "max_queue_delay_ns": draw(st.sampled_from([0, 0, 1, 10, 50])),  # ticks hit these
        "priority_levels": levels,
        "default_priority_level": draw(st.integers(1, levels)) if levels else 0,
        "default_policy": draw(_policy),
        "level_policies": draw(st.dictionaries(st.integers(1, levels), _policy)) if levels else {},
    }


_ops = st.lists(
    st.one_of(
        st.tuples(
            st.just("push"),
            st.integers(0, 4),  # batch size
            st.integers(0, 4),  # priority
            st.sampled_from([0, 0, 1, 10, 100]),  # timeout override
            st.integers(0, 2),  # shape key
        ),
        # Steps equal to the delays and timeouts, so deadlines are often hit exactly.
        st.tuples(st.just("tick"), st.sampled_from([0, 1, 1, 9, 10, 50])),
        st.tuples(st.just("tick+next"), st.sampled_from([1, 9, 10, 50]), st.booleans()),
        st.tuples(st.just("next"), st.booleans()),  # pop the decided batch?
        st.tuples(st.just("expired")),
        st.tuples(st.just("remove"), st.integers(0, 60)),
        st.tuples(st.just("pop"), st.integers(0, 3)),
    ),
    min_size=10,
    max_size=60,
)


@settings(max_examples=400, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(config=_configs(), ops=_ops)
def test_twins_and_reference_agree(config: dict[str, Any], ops: list[tuple[Any, ...]]) -> None:
    ref = RefQueue(
        config["max_batch_size"],
        config["preferred_batch_sizes"],
        config["max_queue_delay_ns"],
        config["priority_levels"],
        config["default_priority_level"],
        config["default_policy"],
        config["level_policies"],
    )
    twins = [_batcher_py.BatchQueue(**config)]
    if COMPILED is not None:
        twins.append(COMPILED.BatchQueue(**config))
    now = 0
    next_slot = 0
    got: list[Any]
    for op in ops:
        kind = op[0]
        if kind == "push":
            _, bs, prio, timeout, shape = op
            args = (next_slot, bs, now, prio, timeout, shape)
            want: Any = ref.push(*args)
            got = [q.push(*args) for q in twins]
            next_slot += 1
        elif kind == "tick":
            now += op[1]
            continue
        elif kind in ("next", "tick+next"):
            if kind == "tick+next":
                now += op[1]
            want = ref.next_batch(now)
            got = [q.next_batch(now) for q in twins]
            if op[-1] and want[0]:
                assert [q.pop(want[0]) for q in twins] == [ref.pop(want[0])] * len(twins)
        elif kind == "expired":
            want = ref.expired(now)
            got = [q.expired(now) for q in twins]
        elif kind == "remove":
            want = ref.remove(op[1])
            got = [q.remove(op[1]) for q in twins]
        else:
            n = min(op[1], len(ref))
            want = ref.pop(n)
            got = [q.pop(n) for q in twins]
        assert got == [want] * len(twins), (op, now)
        assert [len(q) for q in twins] == [len(ref)] * len(twins)
        earliest = ref.earliest_deadline()
        bounds = {q.next_deadline_ns() for q in twins}
        assert len(bounds) == 1
        if earliest != -1:
            (bound,) = bounds
            assert bound != -1 and bound <= earliest
