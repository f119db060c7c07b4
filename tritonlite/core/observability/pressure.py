"""Memory pressure: when the container runs low on memory, optional features shed first.

``--memory-pressure-threshold FRACTION`` (default 0.05): the server is under pressure while the
memory still available to it is at most FRACTION of its limit. What sheds: response-cache
inserts (lookups still hit; core/cache.py) and latency histogram observations (core/latency.py);
``tritonlite_shed_total{feature=...}`` counts what was shed and ``tritonlite_memory_pressure``
(0/1) shows the state on ``/metrics``. 0 turns the monitor off; 1 keeps the server under
pressure (``available <= limit`` always holds), to rehearse degradation.

The limit and the usage, first readable source wins:

* cgroup v2, when some ``memory.max`` from the process's cgroup up to the mount root is not
  ``max``: available = max - (memory.current - inactive_file); the tightest level counts;
* cgroup v1 (``memory/memory.limit_in_bytes`` below 2**60, which is "unlimited"): the same with
  memory.usage_in_bytes and total_inactive_file;
* ``/proc/meminfo``: MemTotal and MemAvailable.

Inactive file pages are reclaimable page cache, so they count as available (kubelet's
working-set rule); without that, a server reading large models would look full forever.

Sampled every ``--metrics-interval-ms``, never per request: the reads of kernel pseudo-files
run on a worker thread (they cost the loop 2.6% of its samples at concurrency 1 when they ran
there), the state is updated on the event loop; the request path reads ``active`` and nothing
else. Loop-only state, so no locks.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

log = logging.getLogger("tritonlite")

DEFAULT_THRESHOLD = 0.05
V1_UNLIMITED = 1 << 60  # cgroup v1 reports "no limit" as a page-rounded 2**63 - 1


@dataclass(frozen=True, slots=True)
class MemoryReading:
    """One sample: where it came from, the limit and what is still available, in bytes."""

    source: str  # "cgroup v2", "cgroup v1" or "meminfo"
    limit: int
    available: int


def _read(path: Path) -> str | None:
    try:
        return path.read_text(encoding="ascii").strip()
    except (OSError, UnicodeDecodeError):
        return None


def _int(path: Path) -> int | None:
    text = _read(path)
    try:
        return None if text is None else int(text)
    except ValueError:
        return None


def _stat(path: Path, key: str) -> int:
    """``key``'s value in a cgroup ``memory.stat``; 0 when it is missing or unreadable."""
    for line in (_read(path) or "").splitlines():
        name, _, value = line.partition(" ")
        if name == key:
            with contextlib.suppress(ValueError):
                return int(value)
    return 0


def _cgroup_dirs(root: Path, mount: Path, controller: str) -> list[Path]:
    """The process's cgroup directory and its ancestors up to ``mount``, innermost first.

    ``/proc/self/cgroup`` names the cgroup (``0::/path`` for v2, ``N:memory:/path`` for v1);
    without a cgroup namespace that path exists under the mount, with one the mount root is the
    process's own cgroup, so the mount root is always the last candidate.
    """
    rel = ""
    for line in (_read(root / "proc/self/cgroup") or "").splitlines():
        _, controllers, path = (line.split(":", 2) + ["", ""])[:3]
        if controller in controllers.split(","):  # v2's line has no controllers: ""
            rel = path.strip("/")
            break
    dirs = []
    parts = [p for p in rel.split("/") if p and p not in (".", "..")]
    for n in range(len(parts), 0, -1):
        d = mount.joinpath(*parts[:n])
        if d.is_dir():
            dirs.append(d)
    dirs.append(mount)
    return dirs


def _tightest(readings: list[MemoryReading]) -> MemoryReading | None:
    return min(readings, key=lambda r: r.available) if readings else None


def read_cgroup_v2(root: Path = Path("/")) -> MemoryReading | None:
    """The tightest limited cgroup v2 level of this process, or None (no v2, or no limit)."""
    mount = root / "sys/fs/cgroup"
    found = []
    for d in _cgroup_dirs(root, mount, ""):
        limit = _int(d / "memory.max")  # None for "max" (no limit) too
        current = _int(d / "memory.current")
        if limit is None or current is None or limit <= 0:
            continue
        used = max(0, current - _stat(d / "memory.stat", "inactive_file"))
        found.append(MemoryReading("cgroup v2", limit, min(limit, max(0, limit - used))))
    return _tightest(found)


def read_cgroup_v1(root: Path = Path("/")) -> MemoryReading | None:
    """The tightest limited cgroup v1 memory level of this process, or None."""
    mount = root / "sys/fs/cgroup/memory"
    found = []
    for d in _cgroup_dirs(root, mount, "memory"):
        limit = _int(d / "memory.limit_in_bytes")
        usage = _int(d / "memory.usage_in_bytes")
        if limit is None or usage is None or not 0 < limit < V1_UNLIMITED:
            continue
        used = max(0, usage - _stat(d / "memory.stat", "total_inactive_file"))
        found.append(MemoryReading("cgroup v1", limit, min(limit, max(0, limit - used))))
    return _tightest(found)


def read_meminfo(root: Path = Path("/")) -> MemoryReading | None:
    """MemTotal and MemAvailable of ``/proc/meminfo`` (kB there, bytes here), or None."""
    info: dict[str, int] = {}
    for line in (_read(root / "proc/meminfo") or "").splitlines():
        key, _, rest = line.partition(":")
        fields = rest.split()
        if fields:
            with contextlib.suppress(ValueError):
                info[key.strip()] = int(fields[0]) * 1024
    total, available = info.get("MemTotal"), info.get("MemAvailable")
    if total is None or available is None or total <= 0:
        return None
    return MemoryReading("meminfo", total, min(total, max(0, available)))


def read_memory(root: Path = Path("/")) -> MemoryReading | None:
    """The process's memory limit and availability, from the first source that has a limit.

    ``root`` is where ``proc/`` and ``sys/fs/cgroup/`` are looked for (tests pass a directory
    of fake files).
    """
    return read_cgroup_v2(root) or read_cgroup_v1(root) or read_meminfo(root)


def under_pressure(reading: MemoryReading, threshold: float) -> bool:
    """Whether ``reading`` is at or below ``threshold`` (a fraction of the limit) available."""
    return threshold > 0 and reading.available <= threshold * reading.limit


class MemoryPressure:
    """The server's pressure flag and what was shed while it was up.

    The request path reads ``active`` and, when it sheds, adds one to ``shed_cache_inserts`` or
    ``shed_histograms``; only ``sample`` (on the event loop) changes ``active``.
    """

    __slots__ = (
        "threshold",
        "interval_s",
        "active",
        "reading",
        "shed_cache_inserts",
        "shed_histograms",
        "_read",
        "_task",
    )

    def __init__(
        self,
        threshold: float = 0.0,
        interval_s: float = 2.0,
        read: Callable[[], MemoryReading | None] = read_memory,
    ) -> None:
        if not 0.0 <= threshold <= 1.0:  # also refuses NaN
            raise ValueError(
                f"the memory pressure threshold must be a fraction between 0 and 1, got {threshold}"
            )
        if not interval_s > 0:
            raise ValueError(f"the memory sampling interval must be > 0 s, got {interval_s}")
        self.threshold = threshold
        self.interval_s = interval_s
        self.active = False
        self.reading: MemoryReading | None = None
        self.shed_cache_inserts = 0
        self.shed_histograms = 0
        self._read = read
        self._task: asyncio.Task[None] | None = None

    @property
    def enabled(self) -> bool:
        return self.threshold > 0

    def sample(self) -> bool:
        """Read memory once, update ``active`` (logging a change) and return it.

        An unreadable sample leaves ``active`` as it was: no reading is no evidence either way.
        """
        if not self.enabled:
            return False
        return self._apply(self._read())

    def _apply(self, reading: MemoryReading | None) -> bool:
        if reading is None:
            return self.active
        self.reading = reading
        now = under_pressure(reading, self.threshold)
        if now != self.active:
            self.active = now
            mib = 1 << 20
            if now:
                log.warning(
                    "memory pressure: %d MiB of %d MiB available (%s), at or below the "
                    "threshold %g; shedding response cache inserts and latency "
                    "histograms",
                    reading.available // mib,
                    reading.limit // mib,
                    reading.source,
                    self.threshold,
                )
            else:
                log.info(
                    "memory pressure over: %d MiB of %d MiB available (%s); cache inserts "
                    "and latency histograms resume",
                    reading.available // mib,
                    reading.limit // mib,
                    reading.source,
                )
        return now

    async def _poll(self) -> None:
        while True:
            await asyncio.sleep(self.interval_s)
            try:
                # the reads (cgroup and /proc files) on a worker thread, the state on the loop
                self._apply(await asyncio.to_thread(self._read))
            except Exception:  # a malformed reading; the next interval tries again
                log.exception("sampling memory pressure")

    def start(self) -> None:
        """Take the first sample now and keep sampling; call on the event loop. No-op when off."""
        if not self.enabled or self._task is not None:
            return
        reading = self._read()
        if reading is None:
            log.warning(
                "memory pressure monitoring unavailable: no cgroup memory limit or "
                "/proc/meminfo could be read"
            )
            return
        log.info(
            "Monitoring memory pressure: %s, limit %d MiB, threshold %g",
            reading.source,
            reading.limit >> 20,
            self.threshold,
        )
        self._apply(reading)
        self._task = asyncio.get_running_loop().create_task(self._poll())

    async def stop(self) -> None:
        if self._task is not None:
            self._task.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await self._task
            self._task = None


NO_PRESSURE = MemoryPressure()  # never started, never active: the default for caches/recorders
