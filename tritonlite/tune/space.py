"""The search space of ``tritonlite tune``: candidates, how one becomes a config, and the stages.

A ``Candidate`` holds only the settings tune changes (dynamic batching, queue delay, preferred
batch sizes, instance count, ONNX Runtime intra-op threads and spinning, the response cache);
``apply`` writes them into a copy of the model's own config, leaving every other field as the
user wrote it, so the tuned config.pbtxt diffs against the original in those lines alone.

The search is a coordinate descent (Model Analyzer's "quick search" shape): one stage per setting,
each stage probes a short ladder of values around the best candidate so far, and a ladder stops
early once values keep getting worse (``Ladder``). Nothing here measures or talks to a server.
"""

from __future__ import annotations

import math
import os
from collections.abc import Iterable
from dataclasses import dataclass, replace
from typing import Any

from tritonlite._proto import pb

# ORT backend parameters, as tritonlite's backends/onnxruntime.py reads them: Triton's onnxruntime
# backend's name for the intra-op threads, and ONNX Runtime's own session key for intra-op spinning
# (Triton has no spinning parameter; it ignores this one). Inter-op spinning is not tuned: with
# sequential execution, the backend's default, the inter-op pool is not used.
INTRA_OP_PARAMETER = "intra_op_thread_count"
SPINNING_PARAMETER = "session.intra_op.allow_spinning"
ORT_PLATFORMS = frozenset({"onnxruntime_onnx"})
ORT_BACKENDS = frozenset({"onnxruntime"})

# The cheat sheet's queue delays (µs): short ones for latency, 20-100 ms for throughput.
QUEUE_DELAYS_US = (0, 100, 500, 2_000, 10_000, 20_000, 50_000, 100_000)


@dataclass(frozen=True)
class Candidate:
    """The tuned settings of one configuration (``None``: as the original config has it).

    Attributes
    ----------
    dynamic_batching
        Whether the config has a ``dynamic_batching`` block.
    max_queue_delay_us, preferred_batch_sizes
        Its settings (ignored without dynamic batching).
    instance_count
        Instances of the one instance group (``None``: the original groups).
    intra_op_threads
        The ORT ``intra_op_thread_count`` parameter.
    spinning
        ORT intra-op spinning (``SPINNING_PARAMETER``).
    response_cache
        ``response_cache { enable: true }``.
    """

    dynamic_batching: bool = False
    max_queue_delay_us: int = 0
    preferred_batch_sizes: tuple[int, ...] = ()
    instance_count: int | None = None
    intra_op_threads: int | None = None
    spinning: bool | None = None
    response_cache: bool = False

    def label(self) -> str:
        """A short human name, e.g. ``dyn 500us pref[16,32] x2 intra=1 spin cache``."""
        parts = []
        if self.dynamic_batching:
            parts.append(f"dyn {self.max_queue_delay_us}us")
            if self.preferred_batch_sizes:
                parts.append("pref[" + ",".join(map(str, self.preferred_batch_sizes)) + "]")
        else:
            parts.append("no-batching")
        if self.instance_count is not None:
            parts.append(f"x{self.instance_count}")
        if self.intra_op_threads is not None:
            parts.append(f"intra={self.intra_op_threads}")
        if self.spinning is not None:
            parts.append("spin" if self.spinning else "no-spin")
        if self.response_cache:
            parts.append("cache")
        return " ".join(parts)


def copy_config(cfg: Any) -> Any:
    out = pb.ModelConfig()
    out.CopyFrom(cfg)
    return out


def from_config(cfg: Any) -> Candidate:
    """The candidate a config already is (the baseline)."""
    dyn = cfg.HasField("dynamic_batching")
    groups = list(cfg.instance_group)
    count = groups[0].count if len(groups) == 1 and groups[0].count > 0 else None
    intra = _int_param(cfg, INTRA_OP_PARAMETER)
    spin_text = _str_param(cfg, SPINNING_PARAMETER)
    spin = None if spin_text is None else spin_text not in ("0", "false")
    return Candidate(
        dynamic_batching=dyn,
        max_queue_delay_us=int(cfg.dynamic_batching.max_queue_delay_microseconds) if dyn else 0,
        preferred_batch_sizes=tuple(cfg.dynamic_batching.preferred_batch_size) if dyn else (),
        instance_count=count,
        intra_op_threads=intra,
        spinning=spin,
        response_cache=bool(cfg.response_cache.enable),
    )


def _str_param(cfg: Any, key: str) -> str | None:
    if key in cfg.parameters:
        return str(cfg.parameters[key].string_value)
    return None


def _int_param(cfg: Any, key: str) -> int | None:
    text = _str_param(cfg, key)
    try:
        return int(text) if text is not None else None
    except ValueError:
        return None


def apply(base: Any, cand: Candidate) -> Any:
    """A copy of ``base`` (a ``pb.ModelConfig``) with ``cand``'s settings written in."""
    cfg = copy_config(base)
    if cand.dynamic_batching:
        dyn = cfg.dynamic_batching  # keeps the original's other batcher fields
        dyn.max_queue_delay_microseconds = cand.max_queue_delay_us
        del dyn.preferred_batch_size[:]
        dyn.preferred_batch_size.extend(cand.preferred_batch_sizes)
    else:
        cfg.ClearField("dynamic_batching")
    if cand.instance_count is not None:
        groups = list(cfg.instance_group)
        if groups:
            keep = pb.ModelInstanceGroup()
            keep.CopyFrom(groups[0])
            del cfg.instance_group[:]
            cfg.instance_group.append(keep)
            cfg.instance_group[0].count = cand.instance_count
        else:
            cfg.instance_group.add(count=cand.instance_count)
    _set_param(
        cfg,
        INTRA_OP_PARAMETER,
        None if cand.intra_op_threads is None else str(cand.intra_op_threads),
    )
    _set_param(
        cfg, SPINNING_PARAMETER, None if cand.spinning is None else ("1" if cand.spinning else "0")
    )
    if cand.response_cache:
        cfg.response_cache.enable = True
    else:
        cfg.ClearField("response_cache")
    return cfg


def _set_param(cfg: Any, key: str, value: str | None) -> None:
    if value is None:
        if key in cfg.parameters:
            del cfg.parameters[key]
    else:
        cfg.parameters[key].string_value = value


# -- the stages ------------------------------------------------------------------------------------
@dataclass(frozen=True)
class Context:
    """What the stages need to know about the model and the machine.

    ``max_batch_size`` 0 means the model cannot batch; ``devices`` is the GPU count (0: CPU);
    ``repeats``: the request stream repeats, so the response cache can answer.
    """

    max_batch_size: int
    ort: bool
    cores: int
    devices: int = 0
    max_concurrency: int = 1
    repeats: bool = False
    latency_budget_us: float | None = None


def is_ort(cfg: Any) -> bool:
    return cfg.platform in ORT_PLATFORMS or cfg.backend in ORT_BACKENDS


def available_cores() -> int:
    """The cores this process may run on (its CPU affinity), else the machine's: what the
    server tune starts gets too, and what tritonlite's ORT backend sizes its threads by."""
    try:
        return len(os.sched_getaffinity(0)) or 1
    except (AttributeError, OSError):  # not on Linux
        return os.cpu_count() or 1


def max_instances(ctx: Context) -> int:
    """Up to 1.5 x the cores (CPU) or 1.5 x the devices (per GPU group), at least 1."""
    units = ctx.devices if ctx.devices > 0 else ctx.cores
    total = max(1, math.ceil(1.5 * units))
    # An instance group's count is per device on GPUs.
    return max(1, math.ceil(total / ctx.devices)) if ctx.devices > 0 else total


def _dedup(items: Iterable[Candidate], skip: Candidate) -> list[Candidate]:
    out: list[Candidate] = []
    for c in items:
        if c != skip and c not in out:
            out.append(c)
    return out


def batching_stage(best: Candidate, ctx: Context) -> list[Candidate]:
    """Dynamic batching off, then on with each queue delay (within half the latency budget)."""
    if ctx.max_batch_size <= 0:
        return []
    cap = ctx.latency_budget_us / 2 if ctx.latency_budget_us else math.inf
    ladder = [replace(best, dynamic_batching=False, max_queue_delay_us=0, preferred_batch_sizes=())]
    ladder += [
        replace(best, dynamic_batching=True, max_queue_delay_us=d, preferred_batch_sizes=())
        for d in QUEUE_DELAYS_US
        if d <= cap
    ]
    return _dedup(ladder, best)


def preferred_sizes(max_batch_size: int, max_concurrency: int) -> list[tuple[int, ...]]:
    """Preferred batch size sets to try: none, the largest batch the load can form, and halves."""
    top = min(max_batch_size, max(1, max_concurrency))
    sets: list[tuple[int, ...]] = [(), (top,)]
    if top >= 4:
        sets.append((top // 2, top))
    if top >= 8:
        sets.append((top // 4, top // 2, top))
    if max_batch_size > top:
        sets.append((max_batch_size,))
    return sets


def preferred_stage(best: Candidate, ctx: Context) -> list[Candidate]:
    if not best.dynamic_batching or ctx.max_batch_size <= 1:
        return []
    return _dedup(
        (
            replace(best, preferred_batch_sizes=s)
            for s in preferred_sizes(ctx.max_batch_size, ctx.max_concurrency)
        ),
        best,
    )


def instance_stage(best: Candidate, ctx: Context) -> list[Candidate]:
    return _dedup((replace(best, instance_count=n) for n in range(1, max_instances(ctx) + 1)), best)


def intra_op_stage(best: Candidate, ctx: Context) -> list[Candidate]:
    """ORT intra-op threads: 1, 2, ... up to the cores (the backend's default is cores - 1)."""
    if not ctx.ort or ctx.devices > 0:
        return []
    counts = sorted({1, 2, max(1, ctx.cores // 2), ctx.cores})
    if best.intra_op_threads is None:  # the backend's default: already measured
        counts = [n for n in counts if n != ort_default_intra(ctx.cores)]
    return _dedup((replace(best, intra_op_threads=n) for n in counts if n <= ctx.cores), best)


def ort_default_intra(cores: int) -> int:
    """tritonlite's ORT backend's intra-op threads when the parameter is unset."""
    return max(2, cores - 1)


def spinning_stage(best: Candidate, ctx: Context) -> list[Candidate]:
    if not ctx.ort or ctx.devices > 0 or best.intra_op_threads == 1:
        return []
    return _dedup([replace(best, spinning=not bool(best.spinning))], best)


def cache_stage(best: Candidate, ctx: Context) -> list[Candidate]:
    if not ctx.repeats:
        return []
    return _dedup([replace(best, response_cache=not best.response_cache)], best)


#: (name, stage) in search order: each stage starts from the best candidate found before it.
STAGES = (
    ("batching", batching_stage),
    ("preferred batch sizes", preferred_stage),
    ("instances", instance_stage),
    ("ORT intra-op threads", intra_op_stage),
    ("ORT spinning", spinning_stage),
    ("response cache", cache_stage),
)


# -- pruning ---------------------------------------------------------------------------------------
def score(throughput: float, p99_us: float, budget_us: float | None) -> float:
    """A probe's score: its throughput, scaled down by how far its p99 is over the budget.

    Over budget, fewer requests in flight would bring the latency down roughly in proportion
    (Little's law), so ``throughput * budget / p99`` estimates what fits the budget.
    """
    if throughput <= 0:
        return 0.0
    if budget_us is None or p99_us <= budget_us:
        return throughput
    return throughput * budget_us / p99_us


class Ladder:
    """Early stop for one stage: ``patience`` probes in a row that trail the stage's best by more
    than ``margin`` end the stage (the remaining values lie further along a falling slope)."""

    def __init__(self, margin: float = 0.05, patience: int = 2) -> None:
        self.margin = margin
        self.patience = patience
        self.best = 0.0
        self._worse = 0

    def add(self, value: float) -> bool:
        """Record a probe's score; True when the stage should stop."""
        if value > self.best:
            self.best = value
        if value < self.best * (1 - self.margin):
            self._worse += 1
        else:
            self._worse = 0
        return self._worse >= self.patience


def acceptable(
    throughput: float,
    p99_us: float,
    base_throughput: float,
    budget_us: float | None,
    tolerance: float = 0.10,
) -> bool:
    """No regression at a lighter load: within the budget when there is one, else at least
    ``1 - tolerance`` of the original's throughput at that concurrency (in a closed loop the
    same as its latency: a queue delay that buys throughput under load must not cost idle
    requests more than that)."""
    if budget_us is not None and 0 < p99_us <= budget_us:
        return True
    return throughput >= base_throughput * (1 - tolerance)


def better(new: float, old: float, margin: float) -> bool:
    """``new`` wins only by more than ``margin`` (noise keeps the simpler, earlier choice)."""
    return new > old * (1 + margin)


def parse_range(text: str, flag: str) -> tuple[int, int]:
    """``"1:64"`` or ``"16"`` -> (low, high); ValueError naming ``flag`` otherwise."""
    parts = text.split(":")
    try:
        nums = [int(p) for p in parts]
    except ValueError:
        raise ValueError(f"{flag}: expected N or LOW:HIGH (integers), got '{text}'") from None
    if len(nums) == 1:
        nums *= 2
    if len(nums) != 2 or nums[0] < 1 or nums[1] < nums[0]:
        raise ValueError(f"{flag}: expected 1 <= LOW <= HIGH, got '{text}'")
    return nums[0], nums[1]


def concurrency_points(low: int, high: int) -> list[int]:
    """The concurrencies of a sweep: low, powers of 4 between, and high."""
    points = {low, high}
    c = 1
    while c < high:
        if c > low:
            points.add(c)
        c *= 4
    return sorted(points)
