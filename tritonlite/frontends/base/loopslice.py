"""The event loop thread's CPU slice (``--loop-slice-us``, off by default): a longer one, so that
the loop reads more per wake-up.

One thread serves every connection. Under Linux's EEVDF scheduler (6.6 on) a task's slice sets
how soon its virtual deadline comes: a woken task with a shorter slice than the running one
takes its CPU at once (PREEMPT_SHORT), one with a longer slice waits for the running task's
turn. With a longer slice than the kernel's default the loop gives way to the model's threads
and to the clients it answers, and wakes less often, finding several requests waiting when it
runs. Measured on a 2-CPU VM (bench/RESULTS.md, issue 31 round 6), 10 ms against the default:

* a dynamically batched ONNX MLP over HTTP at concurrency 4 (perf_analyzer): the loop slept
  0.24-0.47 times per request instead of 0.72-1.06, the batcher's mean batch went from 1.7-2.1
  to 3.0-3.9, throughput 1.2-1.9x, p99 lower;
* add_sub without batching, run on the loop itself, over HTTP at concurrency 16: 9-12% fewer
  requests per second (the woken loop waits behind the clients), the same CPU per request;
  wrk's JSON at concurrency 16 level.

Asking for it only while a batched run is off the loop kept neither gain nor loss (the loop's
own writes and reads around the run are where it counts), so it is a choice for a deployment
whose traffic is mostly dynamically batched, and off unless asked for.

Since Linux 6.12 a task may ask for its own slice (``sched_setattr``'s ``sched_runtime`` for a
SCHED_OTHER task, 0.1-100 ms, no privilege needed). The request carries
SCHED_FLAG_RESET_ON_FORK, so threads started later (a model's instance thread, ONNX Runtime's
pool) keep the default slice. Older kernels accept the call and ignore the slice; where the
call is refused (another OS or architecture, a seccomp filter, a policy other than SCHED_OTHER
chosen by whoever started the server) nothing changes but a log line.
"""

from __future__ import annotations

import ctypes
import os
import platform
import struct

from tritonlite.options import LOOP_SLICE_MAX_US, LOOP_SLICE_MIN_US

__all__ = ["MAX_US", "MIN_US", "current_slice_us", "request_slice"]

MIN_US = LOOP_SLICE_MIN_US  # the kernel's bounds for a SCHED_OTHER task's slice
MAX_US = LOOP_SLICE_MAX_US

# sched_setattr / sched_getattr: no libc wrapper before glibc 2.41, so the raw syscalls
_SYSCALLS = {"x86_64": (314, 315), "aarch64": (274, 275)}
_ATTR = struct.Struct("IIQiIQQQII")  # struct sched_attr, SCHED_ATTR_SIZE_VER1 (56 bytes)
_RESET_ON_FORK = 0x01


def _syscall(number: int, *args: object) -> int:
    libc = ctypes.CDLL(None, use_errno=True)
    result = int(libc.syscall(number, *args))
    if result < 0:
        err = ctypes.get_errno()
        raise OSError(err, os.strerror(err))
    return result


def _numbers() -> tuple[int, int]:
    numbers = _SYSCALLS.get(platform.machine())
    if numbers is None or not hasattr(os, "sched_getaffinity"):  # not Linux
        raise OSError(f"no sched_setattr here ({platform.system()} {platform.machine()})")
    return numbers


def request_slice(us: int) -> None:
    """Ask for a ``us`` µs slice for the calling thread (not for threads it starts later).

    Raises OSError where the kernel or the platform refuses it, or where the thread runs under
    another policy than SCHED_OTHER (its priority is then someone's choice, kept as it is)."""
    if not MIN_US <= us <= MAX_US:
        raise ValueError(f"a slice is {MIN_US}-{MAX_US} µs, got {us}")
    set_nr, _ = _numbers()
    # (an earlier request of ours shows as SCHED_RESET_ON_FORK set on the policy)
    policy = os.sched_getscheduler(0) & ~getattr(os, "SCHED_RESET_ON_FORK", 0)
    if policy != os.SCHED_OTHER:  # chosen by whoever started the server (chrt): kept
        raise OSError(f"the thread runs under scheduling policy {policy}, not SCHED_OTHER")
    attr = ctypes.create_string_buffer(
        _ATTR.pack(
            _ATTR.size,
            os.SCHED_OTHER,
            _RESET_ON_FORK,
            os.getpriority(os.PRIO_PROCESS, 0),
            0,
            us * 1000,
            0,
            0,
            0,
            0,
        ),
        _ATTR.size,
    )
    _syscall(set_nr, 0, attr, 0)


def current_slice_us(tid: int = 0) -> int:
    """The slice the kernel holds for thread ``tid`` (0: the calling thread), in µs: the
    default one where none was asked for. Raises OSError where it cannot be read."""
    _, get_nr = _numbers()
    out = ctypes.create_string_buffer(_ATTR.size)
    _syscall(get_nr, tid, out, _ATTR.size, 0)
    return int(_ATTR.unpack(out.raw)[5]) // 1000
