"""``tritonlite tune``: flags, checks, and one run from server start to the written report.

    tritonlite tune --model-repository DIR --model NAME [--protocol http|grpc]
        [--concurrency 1:64] [--latency-budget-ms P99] [--max-minutes N] [--output DIR]
        [--url HOST:PORT [--grpc-url HOST:PORT]]

Without ``--url`` tune starts its own server on DIR (loopback, free ports, explicit model
control); with it, tune loads candidates into that server (which must run with
``--model-control-mode explicit``) and reloads the model from its repository at the end.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import shlex
import sys
from pathlib import Path
from typing import Any

from tritonlite.contracts.config import parse_json, parse_pbtxt
from tritonlite.contracts.errors import TritonliteError
from tritonlite.tune import load, report, space
from tritonlite.tune.perfa import PerfAnalyzer, find_perf_analyzer
from tritonlite.tune.runner import Settings, Tuner
from tritonlite.tune.server import Control, ManagedServer, TuneError

PROG = "tritonlite tune"


def build_parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(
        prog=PROG,
        allow_abbrev=False,
        description=(
            "Search a model's serving config (dynamic batching, queue delay, preferred batch "
            "sizes, instances, ONNX Runtime threads, response cache) by measuring candidates; "
            "writes the best config.pbtxt, a Markdown report and plots."
        ),
    )
    a = p.add_argument
    a(
        "--model-repository",
        metavar="DIR",
        help="the repository holding the model (tune "
        "starts its own server on it unless --url is given)",
    )
    a("--model", required=True, metavar="NAME")
    a("--protocol", default="http", choices=("http", "grpc"), help="the load's protocol")
    a(
        "--concurrency",
        default="1:64",
        metavar="LOW:HIGH",
        help="requests in flight: probes run at HIGH, final sweeps at LOW..HIGH (default 1:64)",
    )
    a(
        "--latency-budget-ms",
        type=float,
        default=None,
        metavar="P99",
        help="the p99 latency a config must keep (default: none)",
    )
    a("--max-minutes", type=float, default=10.0, metavar="N", help="time limit (default 10)")
    a("--output", default=None, metavar="DIR", help="where to write (default tune-<model>)")
    a(
        "--url",
        default=None,
        metavar="HOST:PORT",
        help="a running server's HTTP address (run with --model-control-mode explicit)",
    )
    a(
        "--grpc-url",
        default=None,
        metavar="HOST:PORT",
        help="with --url and --protocol grpc: that server's gRPC address",
    )
    a(
        "--load",
        default="auto",
        choices=("auto", "builtin", "perf_analyzer"),
        help="the load generator: perf_analyzer ($PERF_ANALYZER or on PATH) when auto finds "
        "it, else the built-in one",
    )
    a(
        "--input-pool",
        type=int,
        default=0,
        metavar="N",
        help="requests cycle through N distinct inputs (the stream repeats, so the response "
        "cache is tried); 0: every request differs (default)",
    )
    a(
        "--shape",
        action="append",
        default=[],
        metavar="NAME:D1,D2",
        help="the shape of a variable-size input, without the batch dimension (repeatable)",
    )
    a(
        "--probe-seconds",
        type=float,
        default=2.0,
        metavar="S",
        help="measurement window of a probe (default 2)",
    )
    a(
        "--sweep-seconds",
        type=float,
        default=None,
        metavar="S",
        help="measurement window of each final sweep point (default 2 x probe)",
    )
    a(
        "--server-arg",
        action="append",
        default=[],
        metavar="ARG",
        help="an extra flag for the server tune starts (repeatable), e.g. "
        "--server-arg=--frontend=native",
    )
    return p


def _check(p: argparse.ArgumentParser, ns: argparse.Namespace) -> tuple[Settings, dict[str, Any]]:
    try:
        lo_hi = space.parse_range(ns.concurrency, "--concurrency")
    except ValueError as exc:
        p.error(str(exc))
    if ns.latency_budget_ms is not None and not ns.latency_budget_ms > 0:
        p.error(f"--latency-budget-ms: expected a positive number, got {ns.latency_budget_ms:g}")
    if not ns.max_minutes > 0:
        p.error(f"--max-minutes: expected a positive number, got {ns.max_minutes:g}")
    if not ns.probe_seconds > 0 or (ns.sweep_seconds is not None and not ns.sweep_seconds > 0):
        p.error("--probe-seconds and --sweep-seconds must be positive")
    if ns.input_pool < 0:
        p.error(f"--input-pool: expected N >= 0, got {ns.input_pool}")
    if ns.url is None and not ns.model_repository:
        p.error("--model-repository is required (or --url of a running server)")
    if ns.url and ns.protocol == "grpc" and not ns.grpc_url:
        p.error("--protocol grpc with --url needs --grpc-url (the server's gRPC address)")
    if ns.model_repository:
        repo = Path(ns.model_repository)
        if not repo.is_dir():
            p.error(f"--model-repository: '{repo}' is not a directory")
        if ns.url is None and not (repo / ns.model).is_dir():
            p.error(
                f"model '{ns.model}' not found in the model repository '{repo}' "
                f"(no directory '{repo / ns.model}')"
            )
    shapes: dict[str, Any] = {}
    for item in ns.shape:
        name, colon, dims = item.partition(":")
        try:
            shapes[name] = tuple(int(d) for d in dims.split(","))
        except ValueError:
            colon = ""
        if not colon or not name or any(d < 1 for d in shapes.get(name, (0,))):
            p.error(f"--shape: expected NAME:D1,D2,... (positive integers), got '{item}'")
    settings = Settings(
        concurrency=lo_hi,
        latency_budget_us=ns.latency_budget_ms * 1000 if ns.latency_budget_ms else None,
        max_minutes=ns.max_minutes,
        probe_s=ns.probe_seconds,
        sweep_s=ns.sweep_seconds if ns.sweep_seconds else 2 * ns.probe_seconds,
    )
    return settings, shapes


def _base_config(ns: argparse.Namespace, server_cfg: Any) -> Any:
    """The model's config as written (its config.pbtxt), else as the server reports it."""
    if ns.model_repository:
        path = Path(ns.model_repository) / ns.model / "config.pbtxt"
        if path.is_file():
            return parse_pbtxt(path.read_text(encoding="utf-8"), str(path))
    return server_cfg


def _devices(cfg: Any) -> int:
    gpus: set[int] = set()
    for g in cfg.instance_group:
        if g.kind == 1:  # KIND_GPU
            gpus.update(g.gpus)
    return len(gpus)


def run(ns: argparse.Namespace, settings: Settings, shapes: dict[str, Any], argv: list[str]) -> int:
    out = Path(ns.output or f"tune-{ns.model}")
    out.mkdir(parents=True, exist_ok=True)
    managed: ManagedServer | None = None
    if ns.url:
        http_url, grpc_url = ns.url.removeprefix("http://"), ns.grpc_url or ""
    else:
        print(f"{PROG}: starting tritonlite on {ns.model_repository}", file=sys.stderr)
        managed = ManagedServer(
            Path(ns.model_repository), ns.model, ns.server_arg, log_path=out / "server.log"
        )
        try:
            managed.wait_started()
        except BaseException:
            managed.stop()
            raise
        http_url, grpc_url = managed.http_url, managed.grpc_url
    control = Control(http_url)
    touched = False  # a candidate was loaded into a server that is not ours
    try:
        server_cfg = parse_json(json.dumps(control.config(ns.model)))
        base = _base_config(ns, server_cfg)
        meta = control.metadata(ns.model)
        specs = load.request_specs(meta, server_cfg.max_batch_size, shapes)
        outputs = [o.name for o in server_cfg.output]
        ctx = space.Context(
            max_batch_size=server_cfg.max_batch_size,
            ort=space.is_ort(server_cfg),
            cores=space.available_cores(),
            devices=_devices(server_cfg),
            max_concurrency=settings.concurrency[1],
            repeats=ns.input_pool > 0,
            latency_budget_us=settings.latency_budget_us,
        )
        pool = load.make_pool(specs, ns.input_pool or load.DISTINCT_POOL)
        url = http_url if ns.protocol == "http" else grpc_url
        measure, load_name = _measure(
            ns, control, specs, outputs, pool, url, server_cfg.max_batch_size > 0, out
        )
        print(
            f"{PROG}: {ns.model} over {ns.protocol} with {load_name}; writing to {out}",
            file=sys.stderr,
        )
        tuner = Tuner(control, ns.model, base, ctx, settings, measure, sys.stderr)
        touched = ns.url is not None
        result = tuner.run()
        command = "tritonlite tune " + " ".join(shlex.quote(a) for a in argv)
        cfg_path, report_path, note = report.write_all(
            out, ns.model, result, settings, base, load_name, command
        )
    finally:
        if managed:
            managed.stop()
        elif touched:  # back to the repository's own config, however the run ended
            try:
                err = control.load(ns.model, None)
            except TuneError as exc:
                err = str(exc)
            if err:
                print(
                    f"{PROG}: warning: could not reload '{ns.model}' from its repository: {err}",
                    file=sys.stderr,
                )
    if note:
        print(f"{PROG}: {note}", file=sys.stderr)
    c = result.chosen
    print(f"chosen: {c.candidate.label()} ({result.reason})")
    print(f"config: {cfg_path}")
    print(f"report: {report_path}")
    return 0


def _measure(
    ns: argparse.Namespace,
    control: Control,
    specs: list[load.TensorSpec],
    outputs: list[str],
    pool: list[list[bytes]],
    url: str,
    batched: bool,
    out: Path,
) -> tuple[Any, str]:
    model = ns.model

    def stats() -> Any:
        return control.stats(model)

    pa = find_perf_analyzer() if ns.load in ("auto", "perf_analyzer") else None
    if ns.load == "perf_analyzer" and pa is None:
        raise TuneError("--load perf_analyzer: no perf_analyzer ($PERF_ANALYZER or on PATH)")
    if pa:
        driver = PerfAnalyzer(pa, model, url, ns.protocol, specs, pool, batched, out / "pa")
        return (lambda c, w: driver.run(c, w, stats)), f"perf_analyzer ({pa})"
    warmup = 0.5
    if ns.protocol == "http":
        reqs = load.http_requests(model, url, specs, outputs, pool)
        return (
            lambda c, w: asyncio.run(load.http_load(url, reqs, c, warmup, w, stats)),
            "the built-in HTTP load generator",
        )
    reqs = load.grpc_requests(model, specs, outputs, pool)
    return (
        lambda c, w: asyncio.run(load.grpc_load(url, reqs, c, warmup, w, stats)),
        "the built-in gRPC load generator",
    )


def main(argv: list[str] | None = None) -> int:
    args = sys.argv[1:] if argv is None else argv
    p = build_parser()
    ns = p.parse_args(args)
    settings, shapes = _check(p, ns)
    try:
        return run(ns, settings, shapes, args)
    except (TuneError, TritonliteError, RuntimeError) as exc:
        print(f"{PROG}: error: {exc}", file=sys.stderr)
        return 1
    except KeyboardInterrupt:
        print(f"{PROG}: interrupted", file=sys.stderr)
        return 130
