"""The sequence batcher for stateful models (``sequence_batching``), with Triton's semantics.

Each sequence (correlation ID) is bound to a slot of one instance for its lifetime, so its
requests run on that instance, one at a time, in arrival order. A START takes a free slot (the
lowest slot index first, across instances) or waits in the backlog until one frees; the slot is
freed when the sequence's END is dispatched, or once its queue empties after it was idle (no new
request) for ``max_sequence_idle_microseconds`` (slotted sequences whose idle times end within 5 ms
of each other leave together, so their slots refill together; a pass that runs late because the
loop did not run first reads what arrived meanwhile). When an instance is idle its batcher forms:

* ``direct``: one batch with the front request of each ready slot at the slot's own position;
  empty positions below the highest ready slot get null requests (READY false, zero inputs)
  whose results are dropped. With both ``max_queue_delay_microseconds`` and
  ``minimum_slot_utilization`` set, fewer ready slots than that share wait up to the delay.
* ``oldest``: a dynamic batch over the instance's ``max_candidate_sequences`` slots, oldest
  front request first, at most one request per sequence, decided as Triton's dynamic batcher
  decides it (the largest ``preferred_batch_size`` that fits, else waiting up to
  ``max_queue_delay_microseconds`` for one); a request's wait counts from when it arrived and
  its sequence's previous request completed, when Triton hands it to that batcher.

Requests of one batch have equal input and state shapes. Before a request reaches the backend
it gets the model's control inputs and implicit-state inputs (``sequence_state``); its state
outputs become the sequence's next state. A client's request whose future is cancelled while
queued ends its sequence (Triton cancels the rest). Errors use Triton's words: batch size > 1,
no correlation ID, a non-START request for a sequence the batcher does not know.
"""

from __future__ import annotations

import asyncio
import functools
import heapq
import logging
import time
from collections import deque
from typing import Any

from tritonlite.contracts.errors import (
    ErrorCode,
    TritonliteError,
    invalid_arg,
    rejected,
    unavailable,
)
from tritonlite.contracts.types import InferInput, InferRequest, InferResponse
from tritonlite.scheduling import delay_hooks
from tritonlite.scheduling.base import InstancePool, Pending
from tritonlite.scheduling.sequence_state import (
    Controls,
    Plan,
    State,
    StateRunner,
    load_states,
    null_request,
)
from tritonlite.scheduling.wakeup import Wakeup

log = logging.getLogger("tritonlite")

# Triton's reaper looks again this soon at a backlogged sequence that is past its idle time.
_BACKLOG_RECHECK_NS = 50_000_000
# Slotted sequences whose idle times end within this of each other leave in one reaper pass (a
# quarter of the idle time at most). Their slots free together, so backlogged sequences batch as
# they would if the sequences had arrived together. The pass only waits, so a sequence never
# expires before its idle time, and at most this much after it.
_REAP_TOGETHER_NS = 5_000_000
# A reaper pass this late means the loop did not run (the process or the machine paused, or a
# long inline run held it): requests that arrived meanwhile still wait in the sockets, and the
# loop runs its timers before it reads them. The pass waits as long again (once per idle time,
# so a loop that is always late still expires sequences), and those requests count as arrived.
_REAP_LATE_NS = 20_000_000


class _Sequence:
    __slots__ = ("corr_id", "queue", "state", "last_ns", "slot", "expired", "done_ns")

    def __init__(self, corr_id: int | str, now: int) -> None:
        self.corr_id = corr_id
        self.queue: deque[Pending] = deque()
        self.state: State | None = None  # None: the initial state on the next dispatch
        self.last_ns = now  # when its last request arrived (what the idle timeout counts from)
        self.slot: _Slot | None = None  # None while in the backlog
        self.expired = False  # idle too long: free the slot once the queue is empty
        self.done_ns = 0  # when its last dispatched request completed (``oldest``'s clock)


class _Slot:
    __slots__ = ("batcher", "index", "seq")

    def __init__(self, batcher: int, index: int) -> None:
        self.batcher = batcher
        self.index = index
        self.seq: _Sequence | None = None


class _Batcher:
    """The slots of one instance and the batch it is running."""

    __slots__ = ("instance", "runner", "slots", "running", "done", "held")

    def __init__(
        self, instance: object, runner: StateRunner, index: int, slots: int, held: bool
    ) -> None:
        self.instance = instance
        self.runner = runner  # handed to the pool with each batch it runs on ``instance``
        self.slots = [_Slot(index, s) for s in range(slots)]
        # each dispatched sequence and the dict its next state is written into
        self.running: list[tuple[_Sequence, State]] = []
        self.done: Any = None  # the pool calls it when the running batch completed
        self.held = held  # by TRITONSERVER_DELAY_SCHEDULER (delay_hooks) until its count is met


class SequenceBatchScheduler:
    """Scheduler for models with ``sequence_batching`` (see the module docstring)."""

    def __init__(self, model: InstancePool) -> None:
        self._model = model
        cfg = model.config
        seq = cfg.sequence_batching
        self._batch_max = max(1, model.signature.max_batch_size)
        self._oldest = seq.HasField("oldest")
        slots = self._batch_max
        self._preferred: list[int] = []
        self._min_util = 0.0
        if self._oldest:
            if seq.oldest.max_candidate_sequences > 0:
                slots = int(seq.oldest.max_candidate_sequences)
            self._delay_ns = int(seq.oldest.max_queue_delay_microseconds) * 1000
            # none means max_batch_size, as Triton's config normalization makes it
            preferred = {int(s) for s in seq.oldest.preferred_batch_size}
            self._preferred = sorted(preferred or {self._batch_max})
        else:
            self._delay_ns = int(seq.direct.max_queue_delay_microseconds) * 1000
            self._min_util = float(seq.direct.minimum_slot_utilization)
        self._idle_ns = int(seq.max_sequence_idle_microseconds) * 1000
        self._controls = Controls(cfg)
        self._states = load_states(cfg, model.ctx.model_dir)
        self._initial: State = {st.input_name: st.initial for st in self._states}
        self._order = {t.name: i for i, t in enumerate(cfg.input)}
        self._loop = asyncio.get_running_loop()
        # Triton's test hooks: ``direct`` holds every instance until the slots hold this many
        # requests (and the backlog ``_hold_backlog``); ``oldest`` holds each instance until
        # this many of its sequences have a request ready, as its per-instance dynamic batcher.
        self._hold = delay_hooks.count(delay_hooks.DELAY_ENV)
        self._hold_backlog = 0
        if self._hold:
            if not self._oldest:
                self._hold_backlog = delay_hooks.count(delay_hooks.BACKLOG_DELAY_ENV)
            what = "ready sequences per instance" if self._oldest else "requests in the slots"
            delay_hooks.announce(model.name, what, self._hold)
            if self._hold_backlog:
                delay_hooks.announce(model.name, "requests in the backlog", self._hold_backlog)
        self._batchers: list[_Batcher] = []
        self._free: list[tuple[int, int]] = []  # heap of (slot index, batcher index)
        for b, inst in enumerate(model.instances):
            batcher = _Batcher(inst, StateRunner(self._states), b, slots, self._hold > 0)
            batcher.done = functools.partial(self._finish, batcher)
            self._batchers.append(batcher)
            self._free.extend((s, b) for s in range(slots))
        heapq.heapify(self._free)
        self._backlog: deque[_Sequence] = deque()
        self._active: dict[int | str, _Sequence] = {}  # correlation ID -> its live sequence
        self._queued = 0
        self._wakeup = Wakeup(self._loop, self._schedule)
        self._reap_at: int | None = None  # next idle check; None while no sequence is live
        self._reap_waited_ns = 0  # when a late pass last waited (``_REAP_LATE_NS``)

    # -- intake ---------------------------------------------------------------------------------
    def enqueue(self, request: InferRequest) -> asyncio.Future[InferResponse]:
        fut: asyncio.Future[InferResponse] = self._loop.create_future()
        now = time.monotonic_ns()
        try:
            seq = self._sequence_for(request, now)
        except TritonliteError as exc:
            fut.set_exception(rejected(exc))
            return fut
        seq.queue.append(Pending(request, fut, now))
        self._queued += 1
        self._schedule(now)
        return fut

    def _sequence_for(self, request: InferRequest, now: int) -> _Sequence:
        name = self._model.name
        if request.batch_size > 1:
            raise invalid_arg(
                f"inference request to model '{name}' must specify batch-size 1 "
                "due to requirements of sequence batcher"
            )
        cid = request.sequence_id
        if cid == 0 or cid == "":
            raise invalid_arg(
                f"inference request to model '{name}' must specify a non-zero or "
                "non-empty correlation ID"
            )
        if isinstance(cid, str) and self._controls.corrid_is_string is False:
            raise invalid_arg(
                f"inference request to model '{name}' must specify an unsigned "
                "integer correlation ID: its CORRID control is not TYPE_STRING"
            )
        seq = self._active.get(cid)
        if seq is None:
            if not request.sequence_start:
                raise invalid_arg(
                    f"inference request for sequence {cid} to model '{name}' must "
                    "specify the START flag on the first request of the sequence"
                )
            seq = _Sequence(cid, now)
            self._active[cid] = seq
            if self._free:
                s, b = heapq.heappop(self._free)
                self._bind(seq, self._batchers[b].slots[s])
            else:
                self._backlog.append(seq)
            if self._reap_at is None:
                self._reap_at = now + self._idle_ns
        elif request.sequence_start:
            log.warning(
                "sequence %s for model '%s' has a conflict. The previous sequence did not "
                "end before this sequence start. Previous sequence will be terminated "
                "early.",
                cid,
                name,
            )
        seq.last_ns = now
        if request.sequence_end:
            # Later requests with this ID start a new sequence (or fail without START).
            del self._active[cid]
        return seq

    # -- slots ----------------------------------------------------------------------------------
    @staticmethod
    def _bind(seq: _Sequence, slot: _Slot) -> None:
        seq.slot = slot
        slot.seq = seq

    def _release(self, seq: _Sequence) -> None:
        """Free ``seq``'s slot for the oldest backlogged sequence, else for a new one."""
        slot = seq.slot
        if slot is None:
            return
        seq.slot = None
        slot.seq = None
        while self._backlog:
            nxt = self._backlog.popleft()
            if nxt.queue:
                self._bind(nxt, slot)
                return
        heapq.heappush(self._free, (slot.index, slot.batcher))

    def _cancel(self, seq: _Sequence) -> None:
        err = TritonliteError(
            ErrorCode.CANCELLED,
            f"sequence {seq.corr_id} of model '{self._model.name}' was cancelled",
        )
        while seq.queue:
            p = seq.queue.popleft()
            self._queued -= 1
            if not p.future.done():
                p.future.set_exception(err)
        if self._active.get(seq.corr_id) is seq:
            del self._active[seq.corr_id]
        self._release(seq)

    def _ready(self, slot: _Slot) -> _Sequence | None:
        """The slot's sequence if it has a request to run (ending cancelled sequences)."""
        while slot.seq is not None and slot.seq.queue:
            seq = slot.seq
            if not seq.queue[0].future.done():
                return seq
            self._cancel(seq)
        return None

    def _reap(self, now: int) -> None:
        wait = self._idle_ns
        together = min(_REAP_TOGETHER_NS, self._idle_ns // 4)
        overdue = 0  # how long past its idle time the longest-idle slotted sequence is
        near = 0  # until the last slotted sequence whose idle time ends within ``together``
        due: list[tuple[int | str, _Sequence]] = []
        for cid, seq in self._active.items():
            left = seq.last_ns + self._idle_ns - now
            if left > 0:
                wait = min(wait, left)
                if seq.slot is not None and left <= together:
                    near = max(near, left)
            elif seq.slot is None:
                wait = min(wait, _BACKLOG_RECHECK_NS)
            else:
                overdue = max(overdue, -left)
                due.append((cid, seq))
        if due and near and overdue + near <= together:
            self._reap_at = now + near
            return
        for cid, seq in due:
            log.debug(
                "sequence %s of model '%s': max sequence idle exceeded", cid, self._model.name
            )
            del self._active[cid]
            seq.expired = True
            if not seq.queue:
                self._release(seq)
        self._reap_at = now + max(wait, 1) if self._active else None

    # -- dispatch -------------------------------------------------------------------------------
    def instance_free(self) -> None:
        self._schedule()

    def _schedule(self, now: int = 0) -> None:
        now = now or time.monotonic_ns()
        model = self._model
        if self._reap_at is not None and now >= self._reap_at:
            late = now - self._reap_at
            if late > _REAP_LATE_NS and now - self._reap_waited_ns > self._idle_ns:
                self._reap_waited_ns = now
                self._reap_at = now + min(late, self._idle_ns)
            else:
                self._reap(now)
        wake = self._reap_at if self._reap_at is not None else -1
        for b in self._batchers:
            if b.running or not model.has_idle(b.instance):
                continue
            if b.held and self._still_held(b):
                continue
            when = self._dispatch(b, now)
            if when >= 0 and (wake < 0 or when < wake):
                wake = when
        self._wakeup.arm(wake)

    def _still_held(self, b: _Batcher) -> bool:
        """Whether the test hook still holds ``b`` (releasing it, for good, once not)."""
        if self._oldest:
            if sum(1 for s in b.slots if s.seq is not None and s.seq.queue) < self._hold:
                return True
            b.held = False
            return False
        # A slotted sequence that timed out counts one more: the end Triton's reaper queues
        # in its slot (its slot is freed once the hold is over and its requests ran).
        slotted = sum(
            len(s.seq.queue) + s.seq.expired for x in self._batchers for s in x.slots if s.seq
        )
        if slotted < self._hold:
            return True
        if self._hold_backlog and sum(len(q.queue) for q in self._backlog) < self._hold_backlog:
            return True
        for x in self._batchers:
            x.held = False
        return False

    def _finish(self, b: _Batcher) -> None:
        """On the loop, once ``b``'s batch completed: the sequences' next states."""
        if self._oldest:
            now = time.monotonic_ns()
            for seq, _ in b.running:
                seq.done_ns = now
        for seq, next_state in b.running:
            if next_state:  # a model that leaves a state out keeps the one it was given
                seq.state = {**(seq.state or self._initial), **next_state}
        b.running = []

    def _input_state(self, seq: _Sequence, req: InferRequest) -> State:
        if req.sequence_start or seq.state is None:
            return self._initial
        return seq.state

    def _key(self, seq: _Sequence) -> tuple[Any, ...]:
        req = seq.queue[0].request
        state = self._input_state(seq, req)
        return (
            tuple(sorted((i.name, i.shape) for i in req.inputs)),
            tuple(a.shape for a in state.values()),
        )

    def _dispatch(self, b: _Batcher, now: int) -> int:
        """Run a batch on ``b``'s idle instance if one is due; else when to look again (or -1)."""
        ready = [(slot.index, seq) for slot in b.slots if (seq := self._ready(slot)) is not None]
        if not ready:
            return -1
        if self._oldest:
            take = self._oldest_take(ready, now)
            if take < 0:
                return -take
            self._run(b, [seq for _, seq in ready[:take]])
            return -1
        if self._delay_ns and self._min_util:
            earliest = min(seq.queue[0].enqueue_ns for _, seq in ready)
            if now - earliest <= self._delay_ns and len(ready) / self._batch_max < self._min_util:
                return earliest + self._delay_ns + 1
        # As Triton: every slot up to the last ready one has a place in the batch; a slot with
        # nothing ready, or with other shapes than the first ready one, gets a null request.
        key = self._key(ready[0][1])
        by_slot = {i: seq for i, seq in ready if i == ready[0][0] or self._key(seq) == key}
        self._run(b, [by_slot.get(i) for i in range(ready[-1][0] + 1)])
        return -1

    @staticmethod
    def _since(seq: _Sequence) -> int:
        """When ``seq``'s front request joined ``oldest``'s batcher: it arrived and the
        sequence's previous request completed (Triton hands it over only then)."""
        arrived = seq.queue[0].enqueue_ns
        return arrived if arrived > seq.done_ns else seq.done_ns

    def _oldest_take(self, ready: list[tuple[int, _Sequence]], now: int) -> int:
        """How many of ``ready`` (sorted here, oldest first) to run now, or minus when to look
        again: Triton's dynamic batcher over requests of batch size 1."""
        ready.sort(key=lambda r: self._since(r[1]))
        fits = min(len(ready), self._batch_max)
        key = self._key(ready[0][1])
        n = 1
        while n < fits and self._key(ready[n][1]) == key:
            n += 1  # a batch is a prefix of equal shapes
        best = 0
        for p in self._preferred:
            if p <= n:
                best = p
        oldest = self._since(ready[0][1])
        exceeded = self._delay_ns != 0 and now - oldest >= self._delay_ns
        if best and not exceeded:
            return best
        full = len(ready) > self._batch_max or n < fits or n >= self._preferred[-1]
        if full or exceeded or self._delay_ns == 0:
            return n
        return -(oldest + self._delay_ns)

    def _run(self, b: _Batcher, entries: list[_Sequence | None]) -> None:
        """Dispatch the front request of each sequence in ``entries`` (None: a null request)."""
        requests: list[InferRequest | None] = []
        positions: list[int] = []
        running: list[tuple[_Sequence, State]] = []
        batch: list[Pending] = []
        rep: tuple[InferRequest, int, State] | None = None
        for seq in entries:
            if seq is None:
                requests.append(None)
                continue
            p = seq.queue.popleft()
            self._queued -= 1
            req = p.request
            state = self._input_state(seq, req)
            seq.state = state
            if rep is None:
                rep = (req, len(req.inputs), state)
            self._add_inputs(req, seq.corr_id, state)
            positions.append(len(requests))
            requests.append(req)
            running.append((seq, {}))
            batch.append(p)
            if req.sequence_end or (seq.expired and not seq.queue):
                self._release(seq)
        assert rep is not None
        if len(positions) < len(requests):
            shapes = {n: tuple(a.shape) for n, a in rep[2].items()}
            null = null_request(rep[0], rep[1], self._controls, self._states, shapes)
            full = [null if r is None else r for r in requests]
        else:
            full = [r for r in requests if r is not None]
        b.runner.plan = Plan(full, positions, [st for _, st in running])
        b.running = running
        padding = len(requests) - len(positions)
        self._model.dispatch(batch, b.instance, b.runner, b.done, padding=padding)

    def _add_inputs(self, req: InferRequest, corr_id: int | str, state: State) -> None:
        # Requests of a batch must list their inputs in one order: the backends gather by index.
        order, tail = self._order, len(self._order)
        req.inputs.sort(key=lambda i: order.get(i.name, tail))
        req.inputs += self._controls.tensors(req.sequence_start, req.sequence_end, True, corr_id)
        for st in self._states:
            arr = state[st.input_name]
            req.inputs.append(InferInput(st.input_name, st.wire, tuple(arr.shape), arr))

    # -- timer ----------------------------------------------------------------------------------
    # -- the rest of the contract ------------------------------------------------------------------
    def inflight(self) -> int:
        return self._queued + self._model.executing

    def stop(self) -> None:
        self._wakeup.close()
        self._reap_at = None
        err = unavailable(f"model '{self._model.name}' is unloading")
        seqs = [s.seq for b in self._batchers for s in b.slots if s.seq is not None]
        for seq in seqs + list(self._backlog):
            while seq.queue:
                p = seq.queue.popleft()
                if not p.future.done():
                    p.future.set_exception(err)
        self._queued = 0
        self._backlog.clear()
        self._active.clear()

    def sequences(self) -> dict[int | str, str]:
        """Live correlation IDs and where each is ("slot <instance>:<index>" or "backlog")."""
        return {
            cid: (
                f"slot {seq.slot.batcher}:{seq.slot.index}" if seq.slot is not None else "backlog"
            )
            for cid, seq in self._active.items()
        }
