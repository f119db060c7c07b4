"""Memory pressure (core/pressure.py): reading cgroup v2 / v1 / meminfo from fake file trees,
the threshold, logged transitions, the option's validation, and what sheds (cache inserts,
histogram observations) when the flag is up."""

from __future__ import annotations

import asyncio
import logging
import re
from pathlib import Path

import numpy as np
import pytest

from tritonlite.cli import options_from_args
from tritonlite.contracts.types import InferOutput, InferResponse
from tritonlite.core.observability.latency import LatencyRecorder
from tritonlite.core.observability.pressure import (
    MemoryPressure,
    MemoryReading,
    read_cgroup_v1,
    read_cgroup_v2,
    read_meminfo,
    read_memory,
    under_pressure,
)
from tritonlite.core.request.cache import ResponseCache
from tritonlite.core.tensors.shm import SharedMemoryManager
from tritonlite.options import ServerOptions

pytestmark = pytest.mark.timeout(30)

MIB = 1 << 20
MEMINFO = "MemTotal:        1024000 kB\nMemFree:          100000 kB\nMemAvailable:     512000 kB\n"


def _files(root: Path, files: dict[str, str]) -> Path:
    for rel, text in files.items():
        p = root / rel
        p.parent.mkdir(parents=True, exist_ok=True)
        p.write_text(text)
    return root


# -- sources -------------------------------------------------------------------------------


def test_cgroup_v2_limit_usage_and_reclaimable_page_cache(tmp_path: Path) -> None:
    root = _files(
        tmp_path,
        {
            "proc/self/cgroup": "0::/\n",
            "sys/fs/cgroup/memory.max": f"{1000 * MIB}\n",
            "sys/fs/cgroup/memory.current": f"{900 * MIB}\n",
            "sys/fs/cgroup/memory.stat": f"anon 1\nfile 2\ninactive_file {300 * MIB}\n",
            "proc/meminfo": MEMINFO,
        },
    )
    assert read_memory(root) == MemoryReading("cgroup v2", 1000 * MIB, 400 * MIB)


def test_cgroup_v2_max_falls_back_to_meminfo(tmp_path: Path) -> None:
    root = _files(
        tmp_path,
        {
            "proc/self/cgroup": "0::/\n",
            "sys/fs/cgroup/memory.max": "max\n",
            "sys/fs/cgroup/memory.current": "12345\n",
            "proc/meminfo": MEMINFO,
        },
    )
    assert read_cgroup_v2(root) is None
    assert read_memory(root) == MemoryReading("meminfo", 1024000 * 1024, 512000 * 1024)


def test_cgroup_v2_nested_cgroup_and_the_tightest_level(tmp_path: Path) -> None:
    # The process's own cgroup has no limit; its parent has two; without a namespace the
    # path from /proc/self/cgroup is found under the mount.
    root = _files(
        tmp_path,
        {
            "proc/self/cgroup": "0::/kubepods/pod1/ctr\n",
            "sys/fs/cgroup/kubepods/pod1/ctr/memory.max": "max\n",
            "sys/fs/cgroup/kubepods/pod1/ctr/memory.current": f"{50 * MIB}\n",
            "sys/fs/cgroup/kubepods/pod1/memory.max": f"{200 * MIB}\n",
            "sys/fs/cgroup/kubepods/pod1/memory.current": f"{150 * MIB}\n",
            "sys/fs/cgroup/kubepods/memory.max": f"{4000 * MIB}\n",
            "sys/fs/cgroup/kubepods/memory.current": f"{1000 * MIB}\n",
        },
    )
    assert read_cgroup_v2(root) == MemoryReading("cgroup v2", 200 * MIB, 50 * MIB)


def test_cgroup_v1_limit_and_unlimited(tmp_path: Path) -> None:
    base = {
        "proc/self/cgroup": "5:cpu,cpuacct:/\n4:memory:/docker/abc\n0::/\n",
        "sys/fs/cgroup/memory/docker/abc/memory.limit_in_bytes": f"{512 * MIB}\n",
        "sys/fs/cgroup/memory/docker/abc/memory.usage_in_bytes": f"{500 * MIB}\n",
        "sys/fs/cgroup/memory/docker/abc/memory.stat": f"inactive_file 1\ntotal_inactive_file {100 * MIB}\n",
        "sys/fs/cgroup/memory/memory.limit_in_bytes": "9223372036854771712\n",
        "sys/fs/cgroup/memory/memory.usage_in_bytes": f"{900 * MIB}\n",
        "proc/meminfo": MEMINFO,
    }
    root = _files(tmp_path / "limited", base)
    assert read_cgroup_v2(root) is None  # hybrid: no memory.max on the v2 mount
    assert read_memory(root) == MemoryReading("cgroup v1", 512 * MIB, 112 * MIB)
    # v1's "unlimited" is a huge page-rounded number: not a limit
    unlimited = dict(base)
    unlimited["sys/fs/cgroup/memory/docker/abc/memory.limit_in_bytes"] = "9223372036854771712\n"
    root = _files(tmp_path / "unlimited", unlimited)
    assert read_cgroup_v1(root) is None
    fallback = read_memory(root)
    assert fallback is not None and fallback.source == "meminfo"


def test_usage_above_the_limit_reads_as_nothing_available(tmp_path: Path) -> None:
    root = _files(
        tmp_path,
        {
            "proc/self/cgroup": "0::/\n",
            "sys/fs/cgroup/memory.max": "1000\n",
            "sys/fs/cgroup/memory.current": "5000\n",
        },
    )
    assert read_cgroup_v2(root) == MemoryReading("cgroup v2", 1000, 0)


@pytest.mark.parametrize(
    "files",
    [
        {},  # nothing readable at all
        {"proc/meminfo": "MemTotal: 100 kB\n"},  # no MemAvailable (kernels before 3.14)
        {"proc/meminfo": "MemTotal: lots kB\nMemAvailable: 5 kB\n"},
        {"proc/meminfo": "MemTotal: 0 kB\nMemAvailable: 0 kB\n"},
        {
            "proc/self/cgroup": "0::/\n",
            "sys/fs/cgroup/memory.max": "garbage\n",
            "sys/fs/cgroup/memory.current": "1\n",
        },
        {"proc/self/cgroup": "0::/\n", "sys/fs/cgroup/memory.max": "1000\n"},  # no current
        {
            "proc/self/cgroup": "0::/\n",
            "sys/fs/cgroup/memory.max": "0\n",
            "sys/fs/cgroup/memory.current": "1\n",
        },
        {
            "proc/self/cgroup": "4:memory:/x\n",
            "sys/fs/cgroup/memory/memory.limit_in_bytes": "-1\n",
            "sys/fs/cgroup/memory/memory.usage_in_bytes": "1\n",
        },
    ],
)
def test_unreadable_or_malformed_sources_read_as_none(
    tmp_path: Path, files: dict[str, str]
) -> None:
    assert read_memory(_files(tmp_path, files)) is None


def test_meminfo_reads_kilobytes_as_bytes(tmp_path: Path) -> None:
    root = _files(tmp_path, {"proc/meminfo": MEMINFO})
    assert read_meminfo(root) == MemoryReading("meminfo", 1024000 * 1024, 512000 * 1024)


def test_this_machine_has_a_reading() -> None:
    r = read_memory()
    assert r is not None and 0 <= r.available <= r.limit and r.limit > 0


# -- the threshold and the monitor -----------------------------------------------------------


@pytest.mark.parametrize(
    "available, threshold, expected",
    [
        (49, 0.05, True),
        (50, 0.05, True),
        (51, 0.05, False),
        (0, 0.0, False),  # 0: off, whatever the reading
        (1000, 1.0, True),  # 1: always
        (1000, 0.999, False),
    ],
)
def test_threshold_is_a_fraction_of_the_limit(
    available: int, threshold: float, expected: bool
) -> None:
    assert under_pressure(MemoryReading("meminfo", 1000, available), threshold) is expected


@pytest.mark.parametrize("threshold", [-0.01, 1.01, float("nan"), float("inf")])
def test_monitor_refuses_bad_thresholds(threshold: float) -> None:
    with pytest.raises(ValueError, match="fraction between 0 and 1"):
        MemoryPressure(threshold)


def test_monitor_refuses_a_bad_interval() -> None:
    with pytest.raises(ValueError, match="interval"):
        MemoryPressure(0.05, 0.0)


def test_transitions_are_logged_once_each(caplog: pytest.LogCaptureFixture) -> None:
    readings: list[MemoryReading | None] = [
        MemoryReading("cgroup v2", 1000 * MIB, 10 * MIB),
        MemoryReading("cgroup v2", 1000 * MIB, 20 * MIB),
        None,  # an unreadable sample keeps the state
        MemoryReading("cgroup v2", 1000 * MIB, 500 * MIB),
        MemoryReading("cgroup v2", 1000 * MIB, 600 * MIB),
    ]
    p = MemoryPressure(0.05, read=lambda: readings.pop(0))
    with caplog.at_level(logging.INFO, logger="tritonlite"):
        states = [p.sample() for _ in range(5)]
    assert states == [True, True, True, False, False]
    records = [(r.levelno, r.getMessage()) for r in caplog.records]
    assert len(records) == 2
    assert records[0][0] == logging.WARNING and "10 MiB of 1000 MiB" in records[0][1]
    assert records[1][0] == logging.INFO and "memory pressure over" in records[1][1]


def test_an_off_monitor_never_reads() -> None:
    def boom() -> MemoryReading | None:
        raise AssertionError("read while off")

    p = MemoryPressure(0.0, read=boom)
    assert p.sample() is False
    p.start()  # off: no task, no read (outside a loop on purpose: start must not need one)


def test_the_monitor_samples_on_its_interval(tmp_path: Path) -> None:
    root = _files(
        tmp_path,
        {
            "proc/self/cgroup": "0::/\n",
            "sys/fs/cgroup/memory.max": "1000\n",
            "sys/fs/cgroup/memory.current": "100\n",
        },
    )

    async def main() -> list[bool]:
        p = MemoryPressure(0.5, 0.01, read=lambda: read_memory(root))
        p.start()
        seen = [p.active]
        (root / "sys/fs/cgroup/memory.current").write_text("900\n")
        for _ in range(500):
            if p.active:
                break
            await asyncio.sleep(0.01)
        seen.append(p.active)
        await p.stop()
        return seen

    assert asyncio.run(main()) == [False, True]


@pytest.mark.parametrize("value", ["-0.1", "1.5", "nan", "inf"])
def test_bad_threshold_option_is_a_cli_error(value: str) -> None:
    with pytest.raises(
        SystemExit,
        match=re.escape("--memory-pressure-threshold expects a fraction of the memory limit"),
    ):
        options_from_args(["--model-repository", "/tmp", f"--memory-pressure-threshold={value}"])


def test_non_numeric_threshold_option_is_a_cli_error(capsys: pytest.CaptureFixture[str]) -> None:
    with pytest.raises(SystemExit):
        options_from_args(["--model-repository", "/tmp", "--memory-pressure-threshold", "5%"])
    assert "--memory-pressure-threshold: invalid float value: '5%'" in capsys.readouterr().err


def test_threshold_option_default_and_value() -> None:
    assert options_from_args(["--model-repository", "/tmp"]).memory_pressure_threshold == 0.05
    o = options_from_args(["--model-repository", "/tmp", "--memory-pressure-threshold", "0.2"])
    assert o.memory_pressure_threshold == 0.2
    with pytest.raises(ValueError, match="memory-pressure-threshold"):
        ServerOptions(model_repositories=(Path("/tmp"),), memory_pressure_threshold=2.0)


# -- what sheds ------------------------------------------------------------------------------


def _response(n: int = 4) -> InferResponse:
    out = InferOutput("OUTPUT0", "FP32", (n,), np.arange(n, dtype=np.float32))
    return InferResponse("m", "1", "", [out], {})


def test_cache_inserts_shed_under_pressure_and_lookups_still_hit() -> None:
    p = MemoryPressure(0.05, read=lambda: MemoryReading("meminfo", 100, 50))
    cache = ResponseCache(1 << 20, p)
    shm = SharedMemoryManager()
    assert cache.insert(b"old", _response(), shm)
    p.active = True
    assert not cache.insert(b"new", _response(), shm)
    assert cache.insert(b"old", _response(), shm)  # already there: refreshed, nothing copied
    assert (len(cache), p.shed_cache_inserts) == (1, 1)
    assert cache.lookup(b"old") is not None and cache.lookup(b"new") is None
    p.active = False
    assert cache.insert(b"new", _response(), shm)
    assert (len(cache), p.shed_cache_inserts) == (2, 1)


def test_histograms_shed_under_pressure_summaries_do_not() -> None:
    p = MemoryPressure(0.05)
    rec = LatencyRecorder(True, (10.0, 100.0), p)
    assert rec.histograms is not None and rec.summaries is not None
    rec.request(5_000, 1_000, (1_000, 2_000, 1_000))
    p.active = True
    rec.request(50_000, 1_000, None)
    rec.request(50_000, 1_000, None)
    assert rec.histograms["request"].count == 1 and rec.histograms["queue"].count == 1
    assert rec.summaries["request"].count == 3
    assert p.shed_histograms == 2
    p.active = False
    rec.request(50_000, 1_000, None)
    assert rec.histograms["request"].cumulative() == [1, 2, 2]


def test_recorders_and_caches_without_a_monitor_never_shed() -> None:
    rec = LatencyRecorder(False, (10.0,))
    rec.request(1_000, 0, None)
    assert rec.histograms is not None and rec.histograms["request"].count == 1
    assert ResponseCache(1 << 20).insert(b"k", _response(), SharedMemoryManager())


def test_no_readable_source_is_logged_and_never_sheds(caplog: pytest.LogCaptureFixture) -> None:
    async def main() -> MemoryPressure:
        p = MemoryPressure(1.0, 0.01, read=lambda: None)
        p.start()
        await p.stop()
        return p

    with caplog.at_level(logging.INFO, logger="tritonlite"):
        p = asyncio.run(main())
    assert not p.active and p.reading is None
    assert [r.getMessage() for r in caplog.records] == [
        "memory pressure monitoring unavailable: no cgroup memory limit or /proc/meminfo could "
        "be read"
    ]
