"""The image part of the fleet check: build deploy/docker/Dockerfile with podman on a base made
with mmdebstrap, run it as KServe's ServingRuntime runs it, call it with tritonclient.

Where podman or mmdebstrap is missing, or containers cannot run here, it says so and runs the
image's command line (ENTRYPOINT + CMD) and the ServingRuntime's (command + args) as plain
processes against the bundled repository instead, on free ports.

Containers in a sandbox: crun refuses cgroup v1/v2 hybrid hosts and a raised RLIMIT_NPROC
without CAP_SYS_RESOURCE, so runs try the default runtime first, then runc, with lowered
ulimits; builds use chroot isolation (no OCI runtime for RUN steps).
"""

from __future__ import annotations

import json
import os
import shlex
import shutil
import socket
import subprocess
import sys
import time
import urllib.error
import urllib.request
from collections.abc import Callable
from pathlib import Path
from typing import Any

import numpy as np
import yaml

HERE = Path(__file__).resolve().parent
ROOT = HERE.parents[1]
BASE = "localhost/tritonlite-base:bookworm"
IMAGE = "localhost/tritonlite:fleet-check"
ULIMITS = ["--ulimit", "nofile=8192:8192", "--ulimit", "nproc=8192:8192"]


def _free_ports(n: int) -> list[int]:
    socks = [socket.socket() for _ in range(n)]
    for s in socks:
        s.bind(("127.0.0.1", 0))
    ports = [s.getsockname()[1] for s in socks]
    for s in socks:
        s.close()
    return ports


def _status(url: str) -> int:
    try:
        with urllib.request.urlopen(url, timeout=1) as r:
            return int(r.status)
    except urllib.error.HTTPError as e:
        return int(e.code)
    except OSError:
        return 0


def _wait_ready(url: str, timeout: float, alive: Callable[[], bool]) -> bool:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if _status(url) == 200:
            return True
        if not alive():
            return False
        time.sleep(0.1)
    return False


def _infer_both(http: str, grpc: str) -> dict[str, bool]:
    """add_sub over HTTP and gRPC with tritonclient; True where the answer is right."""
    import tritonclient.grpc as g
    import tritonclient.http as h

    out = {}
    a = np.arange(16, dtype=np.float32).reshape(1, 16)
    b = np.ones((1, 16), dtype=np.float32)
    for name, mod, url in (("http", h, http), ("grpc", g, grpc)):
        client: Any = mod.InferenceServerClient(url)
        inputs = [mod.InferInput("INPUT0", [1, 16], "FP32"),
                  mod.InferInput("INPUT1", [1, 16], "FP32")]
        inputs[0].set_data_from_numpy(a)
        inputs[1].set_data_from_numpy(b)
        r = client.infer("add_sub", inputs)
        out[name] = bool(client.is_server_ready()
                         and np.array_equal(r.as_numpy("OUTPUT0"), a + b)
                         and np.array_equal(r.as_numpy("OUTPUT1"), a - b))
        client.close()
    return out


def runtime_command(path: str = "deploy/kserve/servingruntime.yaml") -> list[str]:
    """The ServingRuntime container's command + args, as the kubelet would run them."""
    rt = yaml.safe_load((ROOT / path).read_text())
    c = rt["spec"]["containers"][0]
    return list(c.get("command", [])) + list(c["args"])


def image_command() -> list[str]:
    """ENTRYPOINT + CMD of deploy/docker/Dockerfile's final stage (exec form)."""
    entry: list[str] = []
    cmd: list[str] = []
    for line in (ROOT / "deploy/docker/Dockerfile").read_text().splitlines():
        if line.startswith("ENTRYPOINT "):
            entry = json.loads(line.split(" ", 1)[1])
        elif line.startswith("CMD "):
            cmd = json.loads(line.split(" ", 1)[1])
    return entry + cmd


def _sh(args: list[str], timeout: float = 120,
        check: bool = False) -> subprocess.CompletedProcess[str]:
    return subprocess.run(args, capture_output=True, text=True, timeout=timeout, check=check)


def _container_runtime() -> list[str] | None:
    """podman run options that work here, or None when containers cannot run."""
    for extra in ([], ["--runtime", shutil.which("runc") or "runc"]):
        r = _sh(["podman", *extra, "run", "--rm", *ULIMITS, IMAGE, "--version"], timeout=120)
        if r.returncode == 0 and "tritonlite" in r.stdout:
            return extra
        last = (r.stderr or r.stdout).strip().splitlines()[-1:] or [""]
        print(f"  podman run{' ' + ' '.join(extra) if extra else ''}: {last[0]}", flush=True)
    return None


def _run_container(podman: list[str], name: str, ports: dict[int, int], entry: list[str],
                   env: dict[str, str], volume: str | None, extra: tuple[str, ...] = ()) -> None:
    args = [*podman, "run", "-d", "--name", name, *ULIMITS, *extra]
    for host, cont in ports.items():
        args += ["-p", f"127.0.0.1:{host}:{cont}"]
    for k, v in env.items():
        args += ["-e", f"{k}={v}"]
    if volume:
        args += ["-v", volume]
    if entry:
        args += ["--entrypoint", entry[0]]
    _sh([*args, IMAGE, *entry[1:]], check=True)


def _container_exit(podman: list[str], name: str) -> tuple[int, str]:
    _sh([*podman, "stop", "-t", "30", name], timeout=60)
    code = _sh(["podman", "inspect", "--format", "{{.State.ExitCode}}", name]).stdout.strip()
    logs = _sh(["podman", "logs", name]).stderr
    _sh(["podman", "rm", "-f", name])
    return int(code or -1), logs


def _build(work: Path, src: Path, say: Callable[[str], None]) -> bool:
    r = subprocess.run([str(HERE / "make_base.sh"), BASE, str(work / "base")],
                       capture_output=True, text=True, timeout=900)
    if r.returncode != 0:
        say(f"  base: make_base.sh failed: {(r.stderr or r.stdout)[-1500:]}")
        return False
    say(f"  {r.stdout.strip()}")
    t0 = time.monotonic()
    log = work / "image-build.log"
    with open(log, "w") as out:
        r2 = subprocess.run(
            ["podman", "build", "--isolation=chroot", "--network=host", "--format=docker",
             *ULIMITS, "--build-arg", f"BASE_IMAGE={BASE}", "-f",
             str(ROOT / "deploy/docker/Dockerfile"), "--ignorefile",
             str(ROOT / "deploy/docker/Dockerfile.dockerignore"), "-t", IMAGE, str(src)],
            stdout=out, stderr=subprocess.STDOUT, timeout=1200)
    if r2.returncode != 0:
        say(f"  podman build failed (log {log}):\n{log.read_text()[-2500:]}")
        return False
    say(f"  podman build: {IMAGE} in {time.monotonic() - t0:.0f} s")
    return True


def _inspect(check: Callable[[bool, str], bool]) -> dict[str, Any]:
    info = json.loads(_sh(["podman", "image", "inspect", IMAGE], check=True).stdout)[0]
    cfg = info.get("Config", {})
    hc = info.get("Healthcheck") or cfg.get("Healthcheck") or {}
    ports = sorted(cfg.get("ExposedPorts", {}))
    check(cfg.get("User") == "1000", f"image user is 1000 ({cfg.get('User')!r})")
    check(ports == ["8000/tcp", "8001/tcp", "8002/tcp"], f"image exposes {ports}")
    check(cfg.get("Entrypoint") == ["tritonlite"], f"entrypoint {cfg.get('Entrypoint')}")
    check("/v2/health/ready" in json.dumps(hc) or "TRITONLITE_HEALTH_URL" in json.dumps(hc),
          "image has a HEALTHCHECK on /v2/health/ready")
    size = int(info.get("Size", 0))
    return {"size_mb": round(size / 2**20), "user": cfg.get("User"), "ports": ports}


def run(work: Path, src: Path, say: Callable[[str], None],
        check: Callable[[bool, str], bool]) -> dict[str, Any]:
    say("== the image: podman build on a base made with mmdebstrap, run with KServe's args")
    report: dict[str, Any] = {}
    missing = [t for t in ("podman", "mmdebstrap") if not shutil.which(t)]
    podman = None
    if missing:
        say(f"  [NOTE] {', '.join(missing)} missing: the image cannot be built here")
    elif _build(work, src, say):
        report.update(_inspect(check))
        podman = _container_runtime()
        if podman is None:
            say("  [NOTE] containers cannot run in this sandbox (above)")
    else:
        check(False, "podman build of deploy/docker/Dockerfile")
    if podman is None:
        report["mode"] = "processes"
        _as_processes(src, say, check, report)
        return report
    report["mode"] = "containers" + (f" ({' '.join(podman)})" if podman else "")
    pod = ["podman", *podman]
    hp, gp, mp = _free_ports(3)
    # 1. KServe: the ServingRuntime's command and args, the repository at /mnt/models.
    cmd = runtime_command()
    name = f"tritonlite-kserve-{os.getpid()}"
    _sh(["podman", "rm", "-f", name])
    _run_container(pod, name, {hp: 8080, gp: 9000, mp: 8002}, cmd,
                   {"TRITONLITE_HEALTH_URL": "http://127.0.0.1:8080/v2/health/ready"},
                   f"{ROOT / 'model_repository'}:/mnt/models:ro")
    say(f"  container {name}: {' '.join(cmd)}")
    alive = lambda: "running" in _sh(["podman", "inspect", "--format", "{{.State.Status}}",  # noqa: E731
                                      name]).stdout
    try:
        ok = _wait_ready(f"http://127.0.0.1:{hp}/v2/health/ready", 120, alive)
        check(ok, "KServe args: ready on 8080")
        if ok:
            calls = _infer_both(f"127.0.0.1:{hp}", f"127.0.0.1:{gp}")
            check(all(calls.values()), f"tritonclient add_sub through the container: {calls}")
            check(_status(f"http://127.0.0.1:{mp}/metrics") == 200, "metrics on 8002")
            uid = _sh(["podman", "exec", name, "id", "-u"]).stdout.strip()
            check(uid == "1000", f"the server runs as uid {uid}")
            cc = _sh(["podman", "exec", name, "sh", "-c",
                      "command -v gcc cc c++ x86_64-linux-gnu-gcc-12 || true"]).stdout.strip()
            check(cc == "", f"no compiler in the final image{': ' + cc if cc else ''}")
            hc = _sh(["podman", "healthcheck", "run", name])
            check(hc.returncode == 0, f"HEALTHCHECK passes ({(hc.stdout + hc.stderr).strip()})")
    finally:
        code, logs = _container_exit(pod, name)
    check(code == 0, f"SIGTERM (podman stop): exit code {code}")
    # 1b. One port: HTTP and gRPC both on 8080 (servingruntime-oneport.yaml).
    one = runtime_command("deploy/kserve/servingruntime-oneport.yaml")
    name = f"tritonlite-oneport-{os.getpid()}"
    _sh(["podman", "rm", "-f", name])
    _run_container(pod, name, {hp: 8080}, one, {}, f"{ROOT / 'model_repository'}:/mnt/models:ro")
    say(f"  container {name}: {' '.join(one)}")
    try:
        ok = _wait_ready(f"http://127.0.0.1:{hp}/v2/health/ready", 120, alive)
        check(ok, "one-port args: ready on 8080")
        if ok:
            calls = _infer_both(f"127.0.0.1:{hp}", f"127.0.0.1:{hp}")
            check(all(calls.values()), f"tritonclient HTTP and gRPC on the one port: {calls}")
    finally:
        code, _ = _container_exit(pod, name)
    check(code == 0, f"one port: SIGTERM exit code {code}")
    # 1c. k8s/deployment.yaml's command and args, under its securityContext: read-only root
    # file system with /tmp an emptyDir, no capabilities, the repository read-only at /models.
    dep = yaml.safe_load((ROOT / "deploy/k8s/deployment.yaml").read_text())
    c = dep["spec"]["template"]["spec"]["containers"][0]
    cmd = [*c["command"], *c["args"]]
    name = f"tritonlite-deployment-{os.getpid()}"
    _sh(["podman", "rm", "-f", name])
    _run_container(pod, name, {hp: 8000, gp: 8001, mp: 8002}, cmd, {},
                   f"{ROOT / 'model_repository'}:/models:ro",
                   ("--read-only", "--tmpfs", "/tmp", "--cap-drop", "ALL", "--user", "1000:1000",
                    "--security-opt", "no-new-privileges"))
    say(f"  container {name}: {' '.join(cmd)} (read-only root, /tmp tmpfs, no capabilities)")
    try:
        ok = _wait_ready(f"http://127.0.0.1:{hp}/v2/health/ready", 120, alive)
        check(ok, "Deployment args under its securityContext: ready")
        if ok:
            calls = _infer_both(f"127.0.0.1:{hp}", f"127.0.0.1:{gp}")
            check(all(calls.values()), f"Deployment container answers: {calls}")
            check(_status(f"http://127.0.0.1:{hp}/v2/health/live") == 200, "liveness probe path")
    finally:
        code, _ = _container_exit(pod, name)
    check(code == 0, f"Deployment container: SIGTERM exit code {code}")
    # 2. The image's own command line: ENTRYPOINT + CMD, the bundled examples.
    name = f"tritonlite-default-{os.getpid()}"
    _sh(["podman", "rm", "-f", name])
    _run_container(pod, name, {hp: 8000, gp: 8001, mp: 8002}, [], {}, None)
    try:
        ok = _wait_ready(f"http://127.0.0.1:{hp}/v2/health/ready", 120, alive)
        check(ok, f"default command {image_command()}: ready")
        if ok:
            calls = _infer_both(f"127.0.0.1:{hp}", f"127.0.0.1:{gp}")
            check(all(calls.values()), f"bundled examples answer: {calls}")
            hc = _sh(["podman", "healthcheck", "run", name])
            check(hc.returncode == 0, "HEALTHCHECK passes on the default ports")
    finally:
        code, _ = _container_exit(pod, name)
    # 3. ModelMesh's variant: explicit model control over an empty repository.
    mm = runtime_command("deploy/kserve/servingruntime-modelmesh.yaml")
    name = f"tritonlite-modelmesh-{os.getpid()}"
    _sh(["podman", "rm", "-f", name])
    _run_container(pod, name, {hp: 8000, gp: 8001}, mm, {}, None)
    try:
        ok = _wait_ready(f"http://127.0.0.1:{hp}/v2/health/ready", 120, alive)
        check(ok, "ModelMesh variant (explicit mode, empty repository): ready")
    finally:
        _container_exit(pod, name)
    return report


def _as_processes(src: Path, say: Callable[[str], None], check: Callable[[bool, str], bool],
                  report: dict[str, Any]) -> None:
    """The image's and the ServingRuntime's command lines as processes, on free ports."""
    repo = str(ROOT / "model_repository")
    for label, cmd in (("image", image_command()), ("ServingRuntime", runtime_command()),
                       ("one-port ServingRuntime",
                        runtime_command("deploy/kserve/servingruntime-oneport.yaml"))):
        one_port = "--grpc-port=8080" in cmd
        hp, gp, mp = _free_ports(3)
        args = []
        for a in cmd[1:]:
            flag, eq, value = a.partition("=")
            if flag in ("--model-store", "--model-repository"):
                value = repo
            elif flag == "--http-port":
                value = str(hp)
            elif flag == "--grpc-port":
                value = str(hp if one_port else gp)
            args.append(f"{flag}{eq}{value}" if eq else a)
        if not any(a.startswith("--http-port") for a in args):
            args += [f"--http-port={hp}", f"--grpc-port={gp}"]
        args += [f"--metrics-port={mp}"]
        say(f"  {label} command line as a process: tritonlite {shlex.join(args)} "
            "(ports and repository path replaced)")
        proc = subprocess.Popen([sys.executable, "-m", "tritonlite", *args],
                                stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
                                env=dict(os.environ, PYTHONPATH=str(src)))
        try:
            ok = _wait_ready(f"http://127.0.0.1:{hp}/v2/health/ready", 120,
                             lambda p=proc: p.poll() is None)
            check(ok, f"{label} command line: ready")
            if ok:
                calls = _infer_both(f"127.0.0.1:{hp}", f"127.0.0.1:{hp if one_port else gp}")
                check(all(calls.values()), f"{label} command line: tritonclient {calls}")
        finally:
            proc.terminate()
            rc = proc.wait(40)
        check(rc == 0, f"{label} command line: SIGTERM exit code {rc}")
        report[label] = " ".join(cmd)
