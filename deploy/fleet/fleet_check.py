"""The fleet check (``make fleet-check``): tritonlite replicas behind HAProxy and Prometheus.

Everything runs on 127.0.0.1 and stops by itself. What it does, in order:

1. ``promtool check config`` / ``check rules`` on the shipped Prometheus files.
2. Three replicas (``python -m tritonlite``) on loopback ports, serving add_sub, mlp and
   add_sub_cached (add_sub with the response cache), behind HAProxy (deploy/fleet/haproxy.cfg.in:
   HTTP/1.1 and gRPC over h2c, health checks on /v2/health/ready) and scraped by Prometheus every
   second with deploy/prometheus/rules.yml loaded.
3. The HPA metric (the prometheus-adapter query of deploy/k8s/prometheus-adapter.yaml, rendered
   as the adapter renders it) at idle and at two load levels.
4. Every dashboard query and every recording rule, through Prometheus's HTTP API: each must
   return data (the GPU panels only where nv_gpu_* series exist).
5. Throughput of one replica against the fleet through the balancer (same client, same load).
6. Rolling restarts under HTTP and gRPC load, every request accounted for on the client side:
   first as Kubernetes does it (the balancer stops sending, then SIGTERM), then bare SIGTERM.
7. SIGKILL of one replica under load: failures and the longest gap in service.
8. The image: podman builds deploy/docker/Dockerfile on a base made with mmdebstrap, runs it
   with the KServe ServingRuntime's args and calls it with tritonclient over HTTP and gRPC; where
   containers cannot run, the image's and the runtime's command lines run as plain processes.

    python deploy/fleet/fleet_check.py [--no-image] [--src DIR] [--json OUT]

Exit status 0 when every check passed, 1 otherwise; 0 with a SKIP line when a tool is missing.
"""

from __future__ import annotations

import argparse
import json
import math
import os
import shlex
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import time
import urllib.error
import urllib.parse
import urllib.request
from pathlib import Path
from typing import Any

import yaml

HERE = Path(__file__).resolve().parent
ROOT = HERE.parents[1]
sys.path.insert(0, str(HERE))
import image_check  # noqa: E402

NAMESPACE = "fleet"
FAILED: list[str] = []
LOADS: list[subprocess.Popen[bytes]] = []  # every load client, stopped at the end whatever failed


def say(msg: str) -> None:
    print(msg, flush=True)


def check(ok: bool, what: str) -> bool:
    say(f"  [{'PASS' if ok else 'FAIL'}] {what}")
    if not ok:
        FAILED.append(what)
    return ok


def free_ports(n: int) -> list[int]:
    socks = []
    for _ in range(n):
        s = socket.socket()
        s.bind(("127.0.0.1", 0))
        socks.append(s)
    ports = [s.getsockname()[1] for s in socks]
    for s in socks:
        s.close()
    return ports


def http_status(url: str, timeout: float = 1.0) -> int:
    try:
        with urllib.request.urlopen(url, timeout=timeout) as r:
            return int(r.status)
    except urllib.error.HTTPError as e:
        return int(e.code)
    except OSError:
        return 0


def wait_for(pred: Any, timeout: float, what: str, proc: subprocess.Popen[Any] | None = None,
             log: Path | None = None) -> None:
    """Poll pred() until true; fail loudly (with the log's tail) at the deadline or if proc dies."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if pred():
            return
        if proc is not None and proc.poll() is not None:
            tail = log.read_text()[-3000:] if log else ""
            raise RuntimeError(f"{what}: process exited with {proc.returncode}\n{tail}")
        time.sleep(0.05)
    tail = log.read_text()[-3000:] if log and log.exists() else ""
    raise RuntimeError(f"{what}: not within {timeout:.0f} s\n{tail}")


# -- the fleet ------------------------------------------------------------------------------------
class Replica:
    def __init__(self, name: str, ports: list[int], repo: Path, work: Path, src: Path,
                 extra: list[str]) -> None:
        self.name, self.repo, self.work, self.src = name, repo, work, src
        self.extra = extra
        self.http, self.grpc, self.metrics = ports
        self.proc: subprocess.Popen[bytes] | None = None
        self.starts = 0

    @property
    def log(self) -> Path:
        return self.work / f"{self.name}.{self.starts}.log"

    def args(self) -> list[str]:
        return [sys.executable, "-m", "tritonlite", f"--model-repository={self.repo}",
                f"--http-port={self.http}", f"--grpc-port={self.grpc}",
                f"--metrics-port={self.metrics}", "--http-address=127.0.0.1",
                "--grpc-address=127.0.0.1", "--metrics-address=127.0.0.1",
                "--exit-timeout-secs=20", "--metrics-interval-ms=1000",
                "--metrics-config=histogram_latencies=true",
                "--cache-config=local,size=1048576", f"--id={self.name}", *self.extra]

    def start(self) -> None:
        self.starts += 1
        env = dict(os.environ, PYTHONPATH=str(self.src))
        with open(self.log, "wb") as out:
            self.proc = subprocess.Popen(self.args(), stdout=out, stderr=subprocess.STDOUT,
                                         cwd=self.work, env=env)

    def ready(self) -> bool:
        return http_status(f"http://127.0.0.1:{self.http}/v2/health/ready") == 200

    def wait_ready(self, timeout: float = 120.0) -> None:
        wait_for(self.ready, timeout, f"replica {self.name} ready", self.proc, self.log)

    def signal(self, sig: int) -> None:
        assert self.proc is not None
        self.proc.send_signal(sig)

    def wait_exit(self, timeout: float = 40.0) -> int:
        assert self.proc is not None
        return self.proc.wait(timeout)

    def stop(self) -> None:
        if self.proc is not None and self.proc.poll() is None:
            self.proc.terminate()
            try:
                self.proc.wait(30)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait()


def make_repository(work: Path) -> Path:
    """add_sub, mlp (from the bundled repository) and add_sub_cached (response cache on)."""
    repo = work / "models"
    for name in ("add_sub", "mlp"):
        shutil.copytree(ROOT / "model_repository" / name, repo / name)
    cached = repo / "add_sub_cached"
    shutil.copytree(ROOT / "model_repository" / "add_sub", cached)
    cfg = (cached / "config.pbtxt").read_text().replace('name: "add_sub"',
                                                        'name: "add_sub_cached"')
    (cached / "config.pbtxt").write_text(cfg + "response_cache { enable: true }\n")
    return repo


class HAProxy:
    def __init__(self, work: Path, replicas: list[Replica]) -> None:
        self.work = work
        self.http_port, self.grpc_port = free_ports(2)
        self.socket_path = work / "haproxy.sock"
        http = "\n".join(f"    server {r.name} 127.0.0.1:{r.http} check" for r in replicas)
        grpc = "\n".join(f"    server {r.name} 127.0.0.1:{r.grpc} proto h2 check port {r.http} "
                         "check-proto h1" for r in replicas)
        text = (HERE / "haproxy.cfg.in").read_text()
        for key, value in (("@ADMIN_SOCKET@", str(self.socket_path)),
                           ("@HTTP_PORT@", str(self.http_port)),
                           ("@GRPC_PORT@", str(self.grpc_port)),
                           ("@HTTP_SERVERS@", http), ("@GRPC_SERVERS@", grpc)):
            text = text.replace(key, value)
        self.config = work / "haproxy.cfg"
        self.config.write_text(text)
        self.log = work / "haproxy.log"
        self.proc: subprocess.Popen[bytes] | None = None

    def start(self) -> None:
        subprocess.run(["haproxy", "-c", "-q", "-f", str(self.config)], check=True)
        with open(self.log, "wb") as out:
            self.proc = subprocess.Popen(["haproxy", "-db", "-f", str(self.config)],
                                         stdout=out, stderr=subprocess.STDOUT)
        wait_for(self.socket_path.exists, 10, "haproxy admin socket", self.proc, self.log)

    def command(self, cmd: str) -> str:
        with socket.socket(socket.AF_UNIX) as s:
            s.settimeout(5)
            s.connect(str(self.socket_path))
            s.sendall(cmd.encode() + b"\n")
            chunks = []
            while True:
                b = s.recv(65536)
                if not b:
                    break
                chunks.append(b)
        return b"".join(chunks).decode()

    def status(self) -> dict[tuple[str, str], str]:
        rows = self.command("show stat").splitlines()
        head = rows[0].lstrip("# ").split(",")
        out = {}
        for row in rows[1:]:
            f = dict(zip(head, row.split(","), strict=False))
            if f.get("svname") not in ("FRONTEND", "BACKEND", None):
                out[(f["pxname"], f["svname"])] = f["status"]
        return out

    def all_up(self, name: str) -> bool:
        st = self.status()
        return all(v == "UP" for (px, sv), v in st.items() if sv == name)

    def set_state(self, name: str, state: str) -> None:
        for backend in ("tritonlite_http", "tritonlite_grpc"):
            self.command(f"set server {backend}/{name} state {state}")

    def stop(self) -> None:
        if self.proc is not None and self.proc.poll() is None:
            self.proc.terminate()
            self.proc.wait(10)


class Prometheus:
    def __init__(self, work: Path, replicas: list[Replica]) -> None:
        self.port = free_ports(1)[0]
        targets = "\n".join(
            f"      - targets: ['127.0.0.1:{r.metrics}']\n"
            f"        labels: {{namespace: {NAMESPACE}, pod: {r.name}}}" for r in replicas)
        text = (HERE / "prometheus-fleet.yml.in").read_text()
        text = text.replace("@RULES@", str(ROOT / "deploy/prometheus/rules.yml"))
        self.config = work / "prometheus.yml"
        self.config.write_text(text.replace("@TARGETS@", targets))
        self.work = work
        self.log = work / "prometheus.log"
        self.proc: subprocess.Popen[bytes] | None = None

    def start(self) -> None:
        with open(self.log, "wb") as out:
            self.proc = subprocess.Popen(
                ["prometheus", f"--config.file={self.config}",
                 f"--storage.tsdb.path={self.work / 'tsdb'}",
                 f"--web.listen-address=127.0.0.1:{self.port}", "--storage.tsdb.retention.time=1h",
                 "--log.level=warn"], stdout=out, stderr=subprocess.STDOUT)
        wait_for(lambda: http_status(f"http://127.0.0.1:{self.port}/-/ready") == 200, 60,
                 "prometheus ready", self.proc, self.log)

    def api(self, path: str, **params: str) -> Any:
        url = f"http://127.0.0.1:{self.port}/api/v1/{path}?{urllib.parse.urlencode(params)}"
        with urllib.request.urlopen(url, timeout=10) as r:
            body = json.loads(r.read())
        if body.get("status") != "success":
            raise RuntimeError(f"prometheus {path}: {body}")
        return body["data"]

    def query(self, expr: str) -> list[dict[str, Any]]:
        return list(self.api("query", query=expr)["result"])

    def targets_up(self) -> int:
        data = self.api("targets", state="active")
        return sum(1 for t in data["activeTargets"] if t["health"] == "up")

    def stop(self) -> None:
        if self.proc is not None and self.proc.poll() is None:
            self.proc.terminate()
            self.proc.wait(20)


# -- load -----------------------------------------------------------------------------------------
class Load:
    """deploy/fleet/loadgen.py in a child process; result() waits for it and reads its JSON."""

    def __init__(self, work: Path, tag: str, url: str, protocol: str, model: str,
                 concurrency: int, duration: float, cached_share: float = 0.0,
                 keep_times: bool = False, stop_file: Path | None = None) -> None:
        self.out = work / f"load-{tag}.json"
        args = [sys.executable, str(HERE / "loadgen.py"), "--url", url, "--protocol", protocol,
                "--model", model, "--concurrency", str(concurrency), "--duration",
                str(duration), "--cached-share", str(cached_share), "--out", str(self.out)]
        if keep_times:
            args.append("--keep-times")
        if stop_file is not None:
            args += ["--stop-file", str(stop_file)]
        self.err = work / f"load-{tag}.err"
        with open(self.err, "wb") as err:
            self.proc = subprocess.Popen(args, stdout=subprocess.DEVNULL, stderr=err)
        LOADS.append(self.proc)

    def result(self, timeout: float = 400.0) -> dict[str, Any]:
        rc = self.proc.wait(timeout)
        if rc != 0:
            raise RuntimeError(f"load client failed ({rc}): {self.err.read_text()[-2000:]}")
        return dict(json.loads(self.out.read_text()))


# -- the phases -----------------------------------------------------------------------------------
def promtool_checks(work: Path) -> None:
    say("== promtool")
    r = subprocess.run(["promtool", "check", "rules", str(ROOT / "deploy/prometheus/rules.yml")],
                       capture_output=True, text=True)
    check(r.returncode == 0, f"promtool check rules deploy/prometheus/rules.yml: "
          f"{(r.stdout + r.stderr).strip().splitlines()[-1]}")
    # A copy beside the rules, as promtool resolves rule_files relative to the config.
    k8s = work / "k8s-prometheus"
    k8s.mkdir()
    for f in ("prometheus.yml", "rules.yml"):
        shutil.copy(ROOT / "deploy/prometheus" / f, k8s / f)
    r = subprocess.run(["promtool", "check", "config", str(k8s / "prometheus.yml")],
                       capture_output=True, text=True)
    out = (r.stdout + r.stderr).strip()
    if r.returncode != 0 and "kubernetes_sd_configs not found" in out:
        say("  [NOTE] promtool check config deploy/prometheus/prometheus.yml: this promtool was "
            "built without Kubernetes service discovery (Debian's is); checked the rest by "
            "dropping kubernetes_sd_configs")
        cfg = yaml.safe_load((k8s / "prometheus.yml").read_text())
        for job in cfg["scrape_configs"]:
            job.pop("kubernetes_sd_configs", None)
        (k8s / "prometheus.yml").write_text(yaml.safe_dump(cfg))
        r = subprocess.run(["promtool", "check", "config", str(k8s / "prometheus.yml")],
                           capture_output=True, text=True)
        out = (r.stdout + r.stderr).strip()
    check(r.returncode == 0, f"promtool check config deploy/prometheus/prometheus.yml: "
          f"{out.splitlines()[-1] if out else ''}")


def adapter_queries() -> dict[str, str]:
    """The prometheus-adapter metricsQuery of each HPA metric, rendered for the fleet's pods."""
    cm = yaml.safe_load((ROOT / "deploy/k8s/prometheus-adapter.yaml").read_text())
    rules = yaml.safe_load(cm["data"]["config.yaml"])["rules"]
    matchers = f'namespace="{NAMESPACE}",pod=~"r1|r2|r3"'
    return {r["name"]["as"]: r["metricsQuery"].replace("<<.LabelMatchers>>", matchers)
            .replace("<<.GroupBy>>", "pod") for r in rules}


def hpa_values(prom: Prometheus) -> dict[str, dict[str, float]]:
    out = {}
    for name, expr in adapter_queries().items():
        out[name] = {s["metric"].get("pod", "?"): float(s["value"][1]) for s in prom.query(expr)}
    return out


def fmt_hpa(vals: dict[str, dict[str, float]]) -> str:
    parts = []
    for name, per_pod in vals.items():
        if not per_pod:
            parts.append(f"{name}: no data yet")
            continue
        avg = sum(per_pod.values()) / len(per_pod) if per_pod else float("nan")
        pods = " ".join(f"{p}={v:.0f}" for p, v in sorted(per_pod.items()))
        parts.append(f"{name}: avg {avg:.1f} ({pods})")
    return "; ".join(parts)


def hpa_phase(work: Path, prom: Prometheus, lb: HAProxy, level_s: float,
              report: dict[str, Any]) -> None:
    say(f"== HPA metric at two load levels (mlp through the balancer, {level_s:.0f} s each)")
    idle = hpa_values(prom)
    say(f"  idle:    {fmt_hpa(idle)}")
    levels = []
    for tag, conc in (("level1", 1), ("level2", 24)):
        load = Load(work, f"hpa-{tag}", f"127.0.0.1:{lb.http_port}", "http", "mlp", conc,
                    level_s)
        # The side load gives the cache and add_sub panels their series.
        side = Load(work, f"hpa-{tag}-side", f"127.0.0.1:{lb.http_port}", "http", "add_sub", 1,
                    level_s, cached_share=0.5)
        time.sleep(max(1.0, level_s - 2.0))
        vals = hpa_values(prom)
        res = load.result()
        side.result()
        q = vals.get("tritonlite_queue_us_per_request", {})
        avg = sum(q.values()) / len(q) if q else float("nan")
        levels.append(avg)
        say(f"  {tag} (concurrency {conc}, {res['throughput']:.0f} infer/s, p50 "
            f"{res['p50_ms']:.1f} ms): {fmt_hpa(vals)}")
        report[f"hpa_{tag}"] = {"concurrency": conc, "values": vals, "avg_queue_us": avg,
                                "throughput": res["throughput"]}
    check(levels[1] > levels[0], f"HPA metric rises with load: {levels[0]:.0f} -> "
          f"{levels[1]:.0f} us queue per request")


def dashboard_exprs() -> list[tuple[str, str, bool]]:
    dash = json.loads((ROOT / "deploy/grafana/tritonlite-dashboard.json").read_text())
    out = []
    for p in dash["panels"]:
        for t in p.get("targets", []):
            expr = (t["expr"].replace("$__rate_interval", "15s").replace("$namespace", ".*")
                    .replace("$pod", ".*").replace("$model", ".*"))
            out.append((p["title"], expr, "gpu" in p.get("tags", [])))
    return out


def has_data(result: list[dict[str, Any]]) -> bool:
    """At least one series with a number (a 0/0 or an empty histogram gives NaN)."""
    return any(not math.isnan(float(s["value"][1])) for s in result)


def queries_phase(work: Path, prom: Prometheus, lb: HAProxy, report: dict[str, Any]) -> None:
    say("== every dashboard query and recording rule on the live Prometheus (under load)")
    load = Load(work, "queries", f"127.0.0.1:{lb.http_port}", "http", "add_sub", 4, 12,
                cached_share=0.5)
    mlp = Load(work, "queries-mlp", f"127.0.0.1:{lb.http_port}", "http", "mlp", 2, 12)
    time.sleep(8)
    has_gpu = bool(prom.query("nv_gpu_utilization"))
    empty: list[str] = []
    n = skipped = 0
    for title, expr, gpu in dashboard_exprs():
        if gpu and not has_gpu:
            skipped += 1
            continue
        n += 1
        if not has_data(prom.query(expr)):
            empty.append(f"{title}: {expr}")
    check(not empty, f"{n} dashboard queries return numbers ({skipped} GPU queries skipped: no "
          f"nv_gpu_* series on this machine)" + "".join(f"\n      empty: {e}" for e in empty))
    rules = yaml.safe_load((ROOT / "deploy/prometheus/rules.yml").read_text())
    records = [r["record"] for g in rules["groups"] for r in g["rules"] if "record" in r]
    alerts = [r["alert"] for g in rules["groups"] for r in g["rules"] if "alert" in r]
    empty = [r for r in records if not has_data(prom.query(r))]
    check(not empty, f"{len(records)} recording rules return numbers"
          + "".join(f"\n      empty: {e}" for e in empty))
    health = prom.api("rules")
    bad = [r["name"] for g in health["groups"] for r in g["rules"]
           if r.get("health") not in ("ok", "unknown")]
    check(not bad, f"{len(records)} recording + {len(alerts)} alerting rules evaluate "
          f"without error{': ' + ', '.join(bad) if bad else ''}")
    for rec in ("tritonlite:batch_size:avg1m", "tritonlite:request_latency_us:p99_1m"):
        vals = {s["metric"].get("model"): round(float(s["value"][1]), 1)
                for s in prom.query(rec)}
        say(f"  {rec}: {vals}")
    hits = prom.query('sum(nv_cache_num_hits_per_model{model="add_sub_cached"})')
    say(f"  add_sub_cached cache hits so far: {hits[0]['value'][1] if hits else 0}")
    load.result()
    mlp.result()
    report["dashboard_queries"] = n
    report["recording_rules"] = len(records)


def throughput_phase(work: Path, replicas: list[Replica], lb: HAProxy, secs: float,
                     report: dict[str, Any]) -> None:
    say(f"== throughput: one replica vs the fleet (add_sub over HTTP, concurrency 16, "
        f"{secs:.0f} s each, two alternating rounds)")
    rounds = []
    lost = 0
    for i in range(2):
        one = Load(work, f"one{i}", f"127.0.0.1:{replicas[0].http}", "http", "add_sub", 16,
                   secs).result()
        fleet = Load(work, f"fleet{i}", f"127.0.0.1:{lb.http_port}", "http", "add_sub", 16,
                     secs).result()
        lost += one["lost"] + fleet["lost"]
        ratio = fleet["throughput"] / one["throughput"] if one["throughput"] else float("nan")
        rounds.append({"one": one["throughput"], "fleet": fleet["throughput"], "ratio": ratio,
                       "one_p50_ms": one["p50_ms"], "fleet_p50_ms": fleet["p50_ms"]})
        say(f"  round {i + 1}: one replica {one['throughput']:.0f} infer/s (p50 "
            f"{one['p50_ms']:.1f} ms); {len(replicas)} replicas through HAProxy "
            f"{fleet['throughput']:.0f} infer/s (p50 {fleet['p50_ms']:.1f} ms); "
            f"ratio {ratio:.2f}")
    say(f"  ({os.cpu_count()} cores, shared with the client, HAProxy and Prometheus)")
    check(lost == 0, "no request lost in the throughput runs")
    report["throughput"] = {"rounds": rounds, "cores": os.cpu_count()}


def rolling_phase(work: Path, replicas: list[Replica], lb: HAProxy, predrain: bool,
                  report: dict[str, Any]) -> None:
    how = ("balancer drains first, then SIGTERM (the Kubernetes order)" if predrain
           else "bare SIGTERM")
    say(f"== rolling restart under HTTP and gRPC load: {how}")
    tag = "drain" if predrain else "sigterm"
    stop_file = work / f"stop-{tag}"
    loads = {p: Load(work, f"roll-{tag}-{p}", f"127.0.0.1:{port}", p, "add_sub", 8, 240,
                     cached_share=0.0, stop_file=stop_file)
             for p, port in (("http", lb.http_port), ("grpc", lb.grpc_port))}
    time.sleep(2)
    t0 = time.monotonic()
    codes = []
    for r in replicas:
        if predrain:
            lb.set_state(r.name, "drain")
            time.sleep(1.0)  # preStop: requests already routed to r finish arriving
        r.signal(signal.SIGTERM)
        codes.append(r.wait_exit())
        r.start()
        r.wait_ready()
        if predrain:
            lb.set_state(r.name, "ready")
        wait_for(lambda r=r: lb.all_up(r.name), 20, f"haproxy sees {r.name} up")
    took = time.monotonic() - t0
    time.sleep(2)
    stop_file.touch()
    res = {p: load.result() for p, load in loads.items()}
    for p, x in res.items():
        kinds = f" {x['failure_kinds']}" if x["failure_kinds"] else ""
        say(f"  {p}: sent {x['sent']}, answered {x['ok']}, failed {x['failed']}, wrong "
            f"{x['wrong']} ({x['throughput']:.0f} infer/s){kinds}")
    check(all(c == 0 for c in codes), f"every replica exited 0 after SIGTERM ({codes}); "
          f"3 restarts took {took:.1f} s")
    check(res["http"]["lost"] == 0, f"rolling restart ({how}): HTTP lost "
          f"{res['http']['lost']} of {res['http']['sent']}")
    if predrain:
        check(res["grpc"]["lost"] == 0, f"rolling restart ({how}): gRPC lost "
              f"{res['grpc']['lost']} of {res['grpc']['sent']}")
    else:
        say(f"  [NOTE] gRPC lost {res['grpc']['lost']} of {res['grpc']['sent']} with bare "
            "SIGTERM: gRPC errors (UNAVAILABLE while draining, CANCELLED from grpc.aio's stop) "
            "arrive in trailers or stream resets, which HAProxy cannot retry (the Kubernetes "
            "order above is the zero-loss one)")
    report[f"rolling_{tag}"] = {p: {k: x[k] for k in ("sent", "ok", "failed", "wrong", "lost",
                                                       "failure_kinds")} for p, x in res.items()}
    report[f"rolling_{tag}"]["seconds"] = took


def sigkill_phase(work: Path, replicas: list[Replica], lb: HAProxy,
                  report: dict[str, Any]) -> None:
    say("== SIGKILL of one replica under HTTP and gRPC load")
    loads = {p: Load(work, f"kill-{p}", f"127.0.0.1:{port}", p, "add_sub", 8, 12,
                     keep_times=True)
             for p, port in (("http", lb.http_port), ("grpc", lb.grpc_port))}
    time.sleep(5)
    victim = replicas[1]
    t_kill = time.time()
    victim.signal(signal.SIGKILL)
    victim.wait_exit()
    wait_for(lambda: "DOWN" in {v for (px, sv), v in lb.status().items()
                                if sv == victim.name}, 10, "haproxy marks the killed replica")
    t_down = time.time() - t_kill
    res = {p: load.result() for p, load in loads.items()}
    out: dict[str, Any] = {"haproxy_down_after_s": t_down}
    for p, x in res.items():
        done = x["done_at"]
        before = [b - a for a, b in zip(done, done[1:], strict=False) if b < t_kill]
        after = [(b - a, a) for a, b in zip(done, done[1:], strict=False)
                 if b >= t_kill and a <= t_kill + 5]
        gap, at = max(after) if after else (float("nan"), t_kill)
        ft = [t - t_kill for t in x["failure_times"]]
        span = f"{min(ft):.3f}..{max(ft):.3f} s after the kill" if ft else "none"
        say(f"  {p}: sent {x['sent']}, failed {x['failed']} ({span}), longest gap between "
            f"answers around the kill {1e3 * gap:.0f} ms (at +{at - t_kill:.2f} s; before the "
            f"kill: {1e3 * max(before, default=0):.0f} ms); {x['failure_kinds'] or ''}")
        out[p] = {"sent": x["sent"], "failed": x["failed"] + x["wrong"], "gap_ms": 1e3 * gap,
                  "gap_before_ms": 1e3 * max(before, default=0.0),
                  "failure_window_s": [min(ft), max(ft)] if ft else None,
                  "failure_kinds": x["failure_kinds"]}
    say(f"  HAProxy marked {victim.name} DOWN {1e3 * t_down:.0f} ms after the kill")
    check(all(x["sent"] > 0 for x in res.values()), "load ran through the SIGKILL")
    report["sigkill"] = out
    victim.start()
    victim.wait_ready()


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description="tritonlite fleet check")
    p.add_argument("--src", default=str(ROOT), help="tritonlite source tree the replicas run")
    p.add_argument("--no-image", action="store_true", help="leave out the container image")
    p.add_argument("--replica-args", default="",
                   help="more tritonlite flags for the replicas, e.g. --frontend=native")
    p.add_argument("--level-seconds", type=float, default=20.0)
    p.add_argument("--throughput-seconds", type=float, default=10.0)
    p.add_argument("--json", default="", help="write the figures here too")
    p.add_argument("--keep", action="store_true", help="keep the work directory")
    args = p.parse_args(argv)
    missing = [t for t in ("haproxy", "prometheus", "promtool") if not shutil.which(t)]
    if missing:
        say(f"SKIP fleet check: {', '.join(missing)} not installed (Debian: apt-get install "
            "haproxy prometheus; make fleet-check installs them when run as root)")
        return 0
    work = Path(tempfile.mkdtemp(prefix="tritonlite-fleet-"))
    say(f"fleet check in {work}")
    report: dict[str, Any] = {"started": time.strftime("%Y-%m-%d %H:%M:%S %Z")}
    src = Path(args.src).resolve()
    repo = make_repository(work)
    extra = shlex.split(args.replica_args)
    replicas = [Replica(f"r{i + 1}", free_ports(3), repo, work, src, extra) for i in range(3)]
    lb = HAProxy(work, replicas)
    prom = Prometheus(work, replicas)
    t_start = time.monotonic()
    try:
        promtool_checks(work)
        say("== start: 3 replicas, HAProxy, Prometheus")
        for r in replicas:
            r.start()
        for r in replicas:
            r.wait_ready()
        lb.start()
        check(True, f"haproxy -c {lb.config.name}: configuration valid")
        r = subprocess.run(["promtool", "check", "config", str(prom.config)],
                           capture_output=True, text=True)
        check(r.returncode == 0, f"promtool check config (the fleet's, from "
              f"prometheus-fleet.yml.in): {(r.stdout + r.stderr).strip().splitlines()[-1]}")
        prom.start()
        wait_for(lambda: all(lb.all_up(r.name) for r in replicas), 20, "haproxy: all up")
        wait_for(lambda: prom.targets_up() == 3, 30, "prometheus: 3 targets up")
        say(f"  replica flags: {' '.join(replicas[0].args()[3:])}")
        say(f"  replicas {[(r.name, r.http, r.grpc, r.metrics) for r in replicas]}, haproxy "
            f"http {lb.http_port} grpc {lb.grpc_port}, prometheus {prom.port}")
        hpa_phase(work, prom, lb, args.level_seconds, report)
        queries_phase(work, prom, lb, report)
        throughput_phase(work, replicas, lb, args.throughput_seconds, report)
        rolling_phase(work, replicas, lb, True, report)
        rolling_phase(work, replicas, lb, False, report)
        sigkill_phase(work, replicas, lb, report)
    except Exception as exc:  # a broken fleet is a failed check, reported with its cause
        check(False, f"fleet: {type(exc).__name__}: {exc}")
    finally:
        for proc in LOADS:
            if proc.poll() is None:
                proc.kill()
                proc.wait()
        for r in replicas:
            r.stop()
        lb.stop()
        prom.stop()
    report["fleet_seconds"] = time.monotonic() - t_start
    if not args.no_image:
        try:
            report["image"] = image_check.run(work, src, say, check)
        except Exception as exc:
            check(False, f"image: {type(exc).__name__}: {exc}")
    report["failed"] = FAILED
    if args.json:
        Path(args.json).write_text(json.dumps(report, indent=2, default=str) + "\n")
    say(f"fleet check took {time.monotonic() - t_start:.0f} s; "
        f"{'all checks passed' if not FAILED else f'{len(FAILED)} FAILED'}")
    if not args.keep and not FAILED:
        shutil.rmtree(work, ignore_errors=True)
    return 1 if FAILED else 0


if __name__ == "__main__":
    sys.exit(main())
