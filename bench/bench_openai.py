"""Server CPU per request of the OpenAI-compatible layer against ``/generate_stream``.

    python bench/bench_openai.py [--requests 1500] [--clients 4] [--rounds 3] [--frontend native]

One server (``--frontend``) serves the bundled decoupled ``textgen`` example (copied from
``tools/examples``); each variant sends the same 8-word prompt with ``max_tokens`` 8, so the
model streams 8 responses and a final flag for every request, over ``--clients`` keep-alive
HTTP/1.1 connections (one thread each), ``--requests`` requests a round:

* ``generate_stream``: ``POST /v2/models/textgen/generate_stream`` (Triton's generate extension),
* ``completions_stream``: ``POST /v1/completions`` with ``"stream": true``,
* ``chat_stream``: ``POST /v1/chat/completions`` with ``"stream": true`` (the chat template too),
* ``completions``: ``/v1/completions`` not streamed (the model then sends one response: not
  the same work, shown for scale).

Server CPU per request is ``bench/cpu.py``'s (every thread's user + system time over the model's
success count). Variants alternate within each round; prints each round and the medians with
their ratio to ``generate_stream``.
"""

from __future__ import annotations

import argparse
import http.client
import json
import shutil
import statistics
import sys
import tempfile
import threading
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
from cpu import measure  # noqa: E402
from perf import HOST, ROOT, TritonliteServer  # noqa: E402

PROMPT = "one two three four five six seven eight"
BODIES = {
    "generate_stream": (
        "/v2/models/textgen/generate_stream",
        {"text_input": PROMPT, "max_tokens": 8},
    ),
    "completions_stream": (
        "/v1/completions",
        {"model": "textgen", "prompt": PROMPT, "max_tokens": 8, "stream": True},
    ),
    "chat_stream": (
        "/v1/chat/completions",
        {
            "model": "textgen",
            "messages": [{"role": "user", "content": PROMPT}],
            "max_tokens": 8,
            "stream": True,
        },
    ),
    "completions": (
        "/v1/completions",
        {"model": "textgen", "prompt": PROMPT, "max_tokens": 8},
    ),
}


def _client(port: int, path: str, body: bytes, n: int, failures: list[str]) -> None:
    conn = http.client.HTTPConnection(HOST, port, timeout=60)
    try:
        for _ in range(n):
            conn.request("POST", path, body=body, headers={"Content-Type": "application/json"})
            resp = conn.getresponse()
            data = resp.read()
            if resp.status != 200 or b"error" in data:
                failures.append(f"{resp.status} {data[:200]!r}")
                return
    finally:
        conn.close()


def load(port: int, variant: str, requests: int, clients: int) -> None:
    path, doc = BODIES[variant]
    body = json.dumps(doc).encode()
    failures: list[str] = []
    threads = [
        threading.Thread(target=_client, args=(port, path, body, requests // clients, failures))
        for _ in range(clients)
    ]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    if failures:
        raise RuntimeError(f"{variant}: {failures[0]}")


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--requests", type=int, default=1500)
    ap.add_argument("--clients", type=int, default=4)
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("--frontend", default="native")
    args = ap.parse_args()
    tmp = Path(tempfile.mkdtemp(prefix="bench_openai_"))
    shutil.copytree(ROOT / "tools" / "examples" / "textgen", tmp / "repo" / "textgen")
    server = TritonliteServer(
        tmp / "repo", tmp / "server.log", ("--frontend", args.frontend, "--allow-metrics=false")
    )
    ports = server.start()
    results: dict[str, list[float]] = {v: [] for v in BODIES}
    try:
        for variant in BODIES:  # warm-up
            load(ports["http"], variant, 200, args.clients)
        for r in range(args.rounds):
            for variant in BODIES:
                cpu = measure(
                    server.pid,
                    ports["http"],
                    "textgen",
                    lambda v=variant: load(ports["http"], v, args.requests, args.clients),
                )
                results[variant].append(cpu.cpu_us)
                print(
                    f"round {r + 1} {variant:>20}: {cpu.cpu_us:7.1f} µs/request, "
                    f"{cpu.rate:7.1f} req/s, loop busy {cpu.loop_busy}",
                    flush=True,
                )
    finally:
        server.stop()
        shutil.rmtree(tmp, ignore_errors=True)
    base = statistics.median(results["generate_stream"])
    print("\n| variant | server CPU µs/request (median) | rounds | vs generate_stream |")
    print("|---|---|---|---|")
    for variant, values in results.items():
        med = statistics.median(values)
        rounds = ", ".join(f"{v:.0f}" for v in values)
        print(f"| {variant} | {med:.0f} | {rounds} | {med / base:.3f}x |")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
