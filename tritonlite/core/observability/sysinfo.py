"""CPU, memory and GPU readings behind the nv_cpu_* and nv_gpu_* gauges (PROTOCOL.md §5).

Each sampler keeps its latest readings; ``Samplers`` holds both and, while the metrics service
runs, calls ``sample()`` every ``--metrics-interval-ms`` (off the event loop: NVML calls can
block); the metrics snapshot (snapshot.py) reads the attributes. Readings are Triton's: CPU utilization from ``/proc/stat`` deltas between samples
(busy = user + nice + system + irq + softirq + steal, idle = idle + iowait), used memory =
MemTotal - MemAvailable, GPU values through NVML (``pynvml``, from the ``nvidia-ml-py``
package; import-guarded, so a machine without it or without a GPU just has no GPU families).
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import os
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Protocol

log = logging.getLogger("tritonlite")


def read_cpu_times(path: Path) -> tuple[int, int] | None:
    """(busy, idle) jiffies from the aggregate ``cpu`` line of ``/proc/stat``."""
    try:
        with open(path, encoding="ascii") as f:
            first = f.readline().split()
    except OSError:
        return None
    if not first or first[0] != "cpu":
        return None
    v = [int(x) for x in first[1:]] + [0] * 8
    user, nice, system, idle, iowait, irq, softirq, steal = v[:8]
    return user + nice + system + irq + softirq + steal, idle + iowait


def read_memory(path: Path) -> tuple[int, int] | None:
    """(total, used) bytes from ``/proc/meminfo``."""
    try:
        with open(path, encoding="ascii") as f:
            info = {line.split(":")[0]: int(line.split()[1]) * 1024 for line in f if ":" in line}
    except (OSError, ValueError, IndexError):
        return None
    total, available = info.get("MemTotal"), info.get("MemAvailable")
    if total is None or available is None or available > total:
        return None
    return total, total - available


class CpuSampler:
    """nv_cpu_utilization, nv_cpu_memory_total_bytes, nv_cpu_memory_used_bytes."""

    def __init__(self, proc: Path = Path("/proc")) -> None:
        self._stat = proc / "stat"
        self._meminfo = proc / "meminfo"
        self._last = read_cpu_times(self._stat)
        self.utilization = 0.0  # as Triton: 0 until the first interval has passed
        self.memory_total = 0
        self.memory_used = 0
        mem = read_memory(self._meminfo)
        if mem is not None:
            self.memory_total, self.memory_used = mem

    @property
    def available(self) -> bool:
        return self._last is not None

    def sample(self) -> None:
        now = read_cpu_times(self._stat)
        if now is not None and self._last is not None:
            busy = max(0, now[0] - self._last[0])
            idle = max(0, now[1] - self._last[1])
            self.utilization = busy / (busy + idle) if busy + idle else 0.0
        if now is not None:
            self._last = now
        mem = read_memory(self._meminfo)
        if mem is not None:
            self.memory_total, self.memory_used = mem


class Nvml(Protocol):
    """The part of ``pynvml`` the GPU sampler uses (a fake stands in for it in tests)."""

    def nvmlInit(self) -> None: ...
    def nvmlShutdown(self) -> None: ...
    def nvmlDeviceGetCount(self) -> int: ...
    def nvmlDeviceGetHandleByIndex(self, index: int) -> Any: ...
    def nvmlDeviceGetUUID(self, handle: Any) -> str | bytes: ...
    def nvmlDeviceGetUtilizationRates(self, handle: Any) -> Any: ...  # .gpu: percent
    def nvmlDeviceGetMemoryInfo(self, handle: Any) -> Any: ...  # .total, .used: bytes
    def nvmlDeviceGetPowerUsage(self, handle: Any) -> int: ...  # milliwatts
    def nvmlDeviceGetEnforcedPowerLimit(self, handle: Any) -> int: ...  # milliwatts
    def nvmlDeviceGetTotalEnergyConsumption(self, handle: Any) -> int: ...  # millijoules


def load_nvml() -> Nvml | None:
    """``pynvml`` initialized, or None (not installed, no driver, no GPU)."""
    try:
        import pynvml  # type: ignore[import-not-found,unused-ignore]
    except ImportError:
        return None
    try:
        pynvml.nvmlInit()
    except Exception as exc:  # pynvml.NVMLError: no driver / no device
        log.info("GPU metrics unavailable: %s", exc)
        return None
    return pynvml  # type: ignore[no-any-return]


@dataclass(slots=True)
class GpuReading:
    uuid: str
    utilization: float | None = None  # 0..1
    memory_total: int | None = None
    memory_used: int | None = None
    power_usage: float | None = None  # W
    power_limit: float | None = None  # W
    energy: float = 0.0  # J since the sampler started
    _energy_start_mj: int | None = None


def _visible(index: int, uuid: str, spec: str | None) -> bool:
    """Whether CUDA_VISIBLE_DEVICES (indices or UUID prefixes) lets CUDA see this device."""
    if spec is None:
        return True
    for item in (s.strip() for s in spec.split(",")):
        if item.isdigit() and int(item) == index:
            return True
        if item and not item.isdigit() and uuid.startswith(item):
            return True
    return False


class GpuSampler:
    """nv_gpu_* readings for every CUDA-visible device NVML reports."""

    def __init__(self, nvml: Nvml, visible: str | None = None) -> None:
        self._nvml = nvml
        if visible is None:
            visible = os.environ.get("CUDA_VISIBLE_DEVICES")
        self._devices: list[tuple[Any, GpuReading]] = []
        for i in range(nvml.nvmlDeviceGetCount()):
            handle = nvml.nvmlDeviceGetHandleByIndex(i)
            uuid = nvml.nvmlDeviceGetUUID(handle)
            uuid = uuid.decode() if isinstance(uuid, bytes) else str(uuid)
            if _visible(i, uuid, visible):
                self._devices.append((handle, GpuReading(uuid)))
                log.info("Collecting metrics for GPU %d: %s", i, uuid)
        self.sample()

    @property
    def readings(self) -> list[GpuReading]:
        return [r for _, r in self._devices]

    def sample(self) -> None:
        n = self._nvml
        for handle, r in self._devices:
            # Each reading on its own: a device without power sensors still reports the rest.
            try:
                r.utilization = n.nvmlDeviceGetUtilizationRates(handle).gpu / 100.0
            except Exception:
                r.utilization = None
            try:
                mem = n.nvmlDeviceGetMemoryInfo(handle)
                r.memory_total, r.memory_used = int(mem.total), int(mem.used)
            except Exception:
                r.memory_total = r.memory_used = None
            try:
                r.power_usage = n.nvmlDeviceGetPowerUsage(handle) / 1000.0
            except Exception:
                r.power_usage = None
            try:
                r.power_limit = n.nvmlDeviceGetEnforcedPowerLimit(handle) / 1000.0
            except Exception:
                r.power_limit = None
            try:
                mj = int(n.nvmlDeviceGetTotalEnergyConsumption(handle))
                if r._energy_start_mj is None:
                    r._energy_start_mj = mj
                r.energy = max(0, mj - r._energy_start_mj) / 1000.0
            except Exception:
                pass

    def close(self) -> None:
        try:
            self._nvml.nvmlShutdown()
        except Exception:
            pass


class Samplers:
    """The CPU/GPU samplers and the task that refreshes them every metrics interval."""

    def __init__(self, cpu: bool, gpu: bool, interval_ms: int) -> None:
        self._want_cpu, self._want_gpu = cpu, gpu
        self.interval_s = interval_ms / 1000.0
        self.cpu: CpuSampler | None = None
        self.gpu: GpuSampler | None = None
        self._task: asyncio.Task[None] | None = None

    def _open(self) -> None:
        if self._want_cpu:
            cpu = CpuSampler()
            self.cpu = cpu if cpu.available else None
            if self.cpu is not None:
                log.info("Collecting CPU metrics")
        if self._want_gpu:
            nvml = load_nvml()
            if nvml is not None:
                gpu = GpuSampler(nvml)
                if gpu.readings:
                    self.gpu = gpu
                else:
                    gpu.close()

    def _sample(self) -> None:
        if self.cpu is not None:
            self.cpu.sample()
        if self.gpu is not None:
            self.gpu.sample()

    async def _poll(self) -> None:
        while True:
            await asyncio.sleep(self.interval_s)
            try:
                await asyncio.to_thread(self._sample)
            except Exception:  # a reading failed; the next interval tries again
                log.exception("polling CPU/GPU metrics")

    async def start(self, _app: object = None) -> None:
        if not (self._want_cpu or self._want_gpu):
            return
        await asyncio.to_thread(self._open)
        if self.cpu is not None or self.gpu is not None:
            self._task = asyncio.create_task(self._poll())

    async def stop(self, _app: object = None) -> None:
        if self._task is not None:
            self._task.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await self._task
            self._task = None
        if self.gpu is not None:
            self.gpu.close()
            self.gpu = None
