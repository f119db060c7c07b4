"""Soak: many mixed inferences through the real clients, every response checked, RSS sampled.

One tritonlite child serves add_sub (FP32[16], dynamic batching). Worker processes, one per mode,
share ``--requests`` between them:

* ``http``: tritonclient.http, binary tensors;
* ``grpc``: tritonclient.grpc unary ModelInfer;
* ``stream``: tritonclient.grpc ModelStreamInfer, a window of 32 requests in flight;
* ``shm``: tritonclient.http with inputs and outputs in system shared memory;

and one request in ``--bad-every`` of each worker's is a client mistake (unknown model, wrong
shape): it must be refused with a 4xx / client status, never a 5xx / INTERNAL. Every other answer
is compared with a + b and a - b of its own random inputs. The server's RSS is sampled every
``--sample-s`` from /proc; growth is measured from the end of warm-up (the first 5% of the
requests) to the end.

    python bench/soak.py --requests 1000000 [--frontend native] [--json out.json]

``make soak`` runs the default 1,000,000 (``SOAK_REQUESTS=20000`` for a quick run): on two
shared cores 730-930 requests/s, so about 18-23 minutes.

Exit status 1 if any response was wrong or lost, a client mistake got a server error, or the
server died.
"""

from __future__ import annotations

import argparse
import json
import multiprocessing as mp
import os
import queue
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

import numpy as np

ROOT = Path(__file__).resolve().parents[1]
sys.path[:0] = [str(ROOT), str(ROOT / "tests")]

DIMS = 16
MODES = ("http", "grpc", "stream", "shm")
WINDOW = 32


class Tally:
    def __init__(self, mode: str) -> None:
        self.mode = mode
        self.ok = self.wrong = self.lost = self.bad_sent = self.bad_5xx = self.bad_ok = 0
        self.first_problems: list[str] = []

    def problem(self, what: str) -> None:
        if len(self.first_problems) < 5:
            self.first_problems.append(what[:300])


def _inputs(mod: Any, rng: np.random.Generator) -> tuple[list[Any], np.ndarray, np.ndarray]:
    a = rng.random((1, DIMS), dtype=np.float32)
    b = rng.random((1, DIMS), dtype=np.float32)
    ins = [mod.InferInput("INPUT0", [1, DIMS], "FP32"), mod.InferInput("INPUT1", [1, DIMS], "FP32")]
    ins[0].set_data_from_numpy(a)
    ins[1].set_data_from_numpy(b)
    return ins, a, b


def _check(t: Tally, o0: Any, o1: Any, a: np.ndarray, b: np.ndarray) -> None:
    if (
        o0 is not None
        and o1 is not None
        and np.array_equal(o0, a + b)
        and np.array_equal(o1, a - b)
    ):
        t.ok += 1
    else:
        t.wrong += 1
        t.problem(f"wrong output: {o0!r} {o1!r}")


def _bad(t: Tally, call: Any, mod: Any, rng: np.random.Generator) -> None:
    """One client mistake: refused with a client status, never a server error."""
    from tritonclient.utils import InferenceServerException

    t.bad_sent += 1
    kind = t.bad_sent % 2
    ins, _, _ = _inputs(mod, rng)
    if kind:
        ins[0] = mod.InferInput("INPUT0", [1, DIMS + 1], "FP32")
        ins[0].set_data_from_numpy(np.zeros((1, DIMS + 1), np.float32))
    try:
        call("add_sub" if kind else "no_such_model", ins)
    except InferenceServerException as exc:
        status = str(exc.status() or "")
        if status.startswith("5") or status in ("StatusCode.INTERNAL", "StatusCode.UNAVAILABLE"):
            t.bad_5xx += 1
            t.problem(f"client mistake got {status}: {exc.message()}")
        return
    t.bad_ok += 1
    t.problem("client mistake was answered as a success")


def _worker(mode: str, url: str, n: int, bad_every: int, seed: int, progress: Any) -> None:
    rng = np.random.default_rng(seed)
    t = Tally(mode)
    try:
        if mode == "stream":
            _stream(t, url, n, bad_every, rng, progress)
        else:
            _unary(t, mode, url, n, bad_every, rng, progress)
    except Exception as exc:  # noqa: BLE001 - what did not finish is reported as lost
        t.problem(f"worker stopped: {type(exc).__name__}: {exc}")
    done = t.ok + t.wrong + t.bad_sent
    t.lost += max(0, n - done)
    progress.put(("done", mode, vars(t)))


def _unary(
    t: Tally, mode: str, url: str, n: int, bad_every: int, rng: np.random.Generator, progress: Any
) -> None:
    if mode == "grpc":
        import tritonclient.grpc as mod
    else:
        import tritonclient.http as mod  # type: ignore[no-redef]
    client = mod.InferenceServerClient(url[mode])
    shm_handle = None
    if mode == "shm":
        import tritonclient.utils.shared_memory as shm

        key = f"/tritonlite_soak_{os.getpid()}"
        size = 4 * DIMS * 4
        shm_handle = shm.create_shared_memory_region("soak", key, size)
        client.unregister_system_shared_memory("soak")
        client.register_system_shared_memory("soak", key, size)

    def call(model: str, ins: list[Any]) -> Any:
        return client.infer(model, ins)

    try:
        for i in range(n):
            if i % 1000 == 999:
                progress.put(("tick", mode, 1000))
            if bad_every and i % bad_every == bad_every - 1:
                _bad(t, call, mod, rng)
                continue
            ins, a, b = _inputs(mod, rng)
            if shm_handle is not None:
                shm.set_shared_memory_region(shm_handle, [a, b])
                for k, inp in enumerate(ins):
                    inp.set_shared_memory("soak", DIMS * 4, offset=DIMS * 4 * k)
                outs = [mod.InferRequestedOutput(f"OUTPUT{k}") for k in (0, 1)]
                for k, out in enumerate(outs):
                    out.set_shared_memory("soak", DIMS * 4, offset=DIMS * 4 * (2 + k))
                client.infer("add_sub", ins, outputs=outs)
                o0 = shm.get_contents_as_numpy(shm_handle, np.float32, [1, DIMS], DIMS * 8)
                o1 = shm.get_contents_as_numpy(shm_handle, np.float32, [1, DIMS], DIMS * 12)
            else:
                r = client.infer("add_sub", ins)
                o0, o1 = r.as_numpy("OUTPUT0"), r.as_numpy("OUTPUT1")
            _check(t, o0, o1, a, b)
    finally:
        if shm_handle is not None:
            client.unregister_system_shared_memory("soak")
            shm.destroy_shared_memory_region(shm_handle)
        client.close()


def _stream(
    t: Tally, url: dict[str, str], n: int, bad_every: int, rng: np.random.Generator, progress: Any
) -> None:
    import tritonclient.grpc as mod

    client = mod.InferenceServerClient(url["grpc"])
    answers: queue.Queue[tuple[Any, Any]] = queue.Queue()
    client.start_stream(callback=lambda result, error: answers.put((result, error)))
    expected: dict[str, tuple[np.ndarray, np.ndarray]] = {}

    def take_one() -> None:
        result, error = answers.get(timeout=60)
        if error is not None:
            t.wrong += 1
            t.problem(f"stream error: {error}")
            expected.pop(min(expected, key=int), None)
            return
        a, b = expected.pop(result.get_response().id)
        _check(t, result.as_numpy("OUTPUT0"), result.as_numpy("OUTPUT1"), a, b)

    try:
        for i in range(n):
            if i % 1000 == 999:
                progress.put(("tick", "stream", 1000))
            if bad_every and i % bad_every == bad_every - 1:
                _bad(t, client.infer, mod, rng)
                continue
            ins, a, b = _inputs(mod, rng)
            expected[str(i)] = (a, b)
            client.async_stream_infer("add_sub", ins, request_id=str(i))
            while len(expected) >= WINDOW:
                take_one()
        while expected:
            take_one()
    finally:
        client.stop_stream()
        client.close()


def _rss_kib(pid: int) -> int:
    with open(f"/proc/{pid}/status") as f:
        for line in f:
            if line.startswith("VmRSS:"):
                return int(line.split()[1])
    return 0


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--requests", type=int, default=1_000_000)
    ap.add_argument("--frontend", default="native", choices=("aio", "native"))
    ap.add_argument("--bad-every", type=int, default=100)
    ap.add_argument("--sample-s", type=float, default=2.0)
    ap.add_argument("--json", default="")
    args = ap.parse_args()

    from conftest import start_server

    from tools.onnx_graphs import write_add_sub

    repo = Path(tempfile.mkdtemp(prefix="soak_repo_"))
    write_add_sub(repo, "add_sub", 8, dims=DIMS, extra_config="dynamic_batching { }")
    server = start_server(repo, "--frontend", args.frontend)
    pid = server.proc.pid
    url = {"http": server.http_url, "shm": server.http_url, "grpc": server.grpc_url}
    per = args.requests // len(MODES)
    progress: Any = mp.get_context("spawn").Queue()
    procs = [
        mp.get_context("spawn").Process(
            target=_worker, args=(mode, url, per, args.bad_every, 1000 + k, progress)
        )
        for k, mode in enumerate(MODES)
    ]
    t0 = time.monotonic()
    for p in procs:
        p.start()
    samples: list[tuple[float, int]] = [(0.0, _rss_kib(pid))]
    results: dict[str, dict[str, Any]] = {}
    count, warm_rss, next_sample = 0, 0, t0 + args.sample_s
    while len(results) < len(procs):
        try:
            kind, mode, value = progress.get(timeout=1.0)
        except queue.Empty:
            kind = ""
        if kind == "tick":
            count += value
            if not warm_rss and count >= 0.05 * args.requests:
                warm_rss = _rss_kib(pid)
        elif kind == "done":
            results[mode] = value
        now = time.monotonic()
        if now >= next_sample:
            if server.proc.poll() is not None:
                break
            samples.append((now - t0, _rss_kib(pid)))
            next_sample = now + args.sample_s
            print(
                f"{now - t0:7.1f}s {count:>9,} requests  RSS {samples[-1][1] / 1024:.1f} MiB",
                flush=True,
            )
    for p in procs:
        p.join(30)
    elapsed = time.monotonic() - t0
    alive = server.proc.poll() is None
    end_rss = _rss_kib(pid) if alive else 0
    exit_code = server.stop()
    total = {
        k: sum(r[k] for r in results.values())
        for k in ("ok", "wrong", "lost", "bad_sent", "bad_5xx", "bad_ok")
    }
    total["lost"] += sum(per for m in MODES if m not in results)
    warm_rss = warm_rss or samples[0][1]
    report = {
        "frontend": args.frontend,
        "requests": per * len(MODES),
        "elapsed_s": round(elapsed, 1),
        "rate_per_s": round(per * len(MODES) / elapsed, 1),
        "by_mode": results,
        **total,
        "server_alive_at_end": alive,
        "server_exit_code": exit_code,
        "rss_start_mib": round(samples[0][1] / 1024, 1),
        "rss_after_warmup_mib": round(warm_rss / 1024, 1),
        "rss_end_mib": round(end_rss / 1024, 1),
        "rss_max_mib": round(max(s for _, s in samples) / 1024, 1),
        "rss_growth_after_warmup_mib": round((end_rss - warm_rss) / 1024, 1),
        "rss_samples": samples,
    }
    print(json.dumps({k: v for k, v in report.items() if k != "rss_samples"}, indent=1))
    if args.json:
        Path(args.json).write_text(json.dumps(report, indent=1))
    failed = (
        total["wrong"]
        or total["lost"]
        or total["bad_5xx"]
        or total["bad_ok"]
        or not alive
        or exit_code != 0
    )
    return 1 if failed else 0


if __name__ == "__main__":
    raise SystemExit(main())
