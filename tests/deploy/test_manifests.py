"""deploy/: every manifest parses, the container args are what tritonlite's own parser accepts,
and every metric the dashboard, rules and autoscaler read is one a live server exports.

The fleet itself (HAProxy, Prometheus, rolling restarts) is ``make fleet-check``, not this suite.
"""

from __future__ import annotations

import json
import re
import shlex
import shutil
import urllib.request
from collections.abc import Callable
from pathlib import Path
from typing import Any

import numpy as np
import pytest

import tritonlite.frontends.metrics as metrics_module
from tritonlite.cli import options_from_args

yaml = pytest.importorskip("yaml")

ROOT = Path(__file__).resolve().parents[2]
DEPLOY = ROOT / "deploy"
KSERVE_ARGS = [  # kserve-tritonserver's, then the histograms the dashboard's latency panels read
    "--model-store=/mnt/models",
    "--grpc-port=9000",
    "--http-port=8080",
    "--allow-grpc=true",
    "--allow-http=true",
    "--metrics-config=histogram_latencies=true",
]
MANIFESTS = sorted(p for p in DEPLOY.rglob("*") if p.suffix in (".yaml", ".yml"))
# A metric name in PromQL: Triton's nv_* and tritonlite's own families (a recording rule's
# name, tritonlite:..., has a colon after 'tritonlite' and is not one).
_METRIC = re.compile(r"(?<![\w:])((?:nv|tritonlite)_[a-z0-9_]+)")


def _docs(path: Path) -> list[Any]:
    return [d for d in yaml.safe_load_all(path.read_text()) if d is not None]


def _one(path: str) -> dict[str, Any]:
    docs = _docs(DEPLOY / path)
    assert len(docs) == 1
    return dict(docs[0])


def _container(doc: dict[str, Any]) -> dict[str, Any]:
    spec = doc["spec"]
    if doc["kind"] == "Deployment":
        spec = spec["template"]["spec"]
    return dict(spec["containers"][0])


def test_manifest_list_is_complete() -> None:
    names = {str(p.relative_to(DEPLOY)) for p in MANIFESTS}
    assert {
        "kserve/servingruntime.yaml",
        "kserve/servingruntime-gpu.yaml",
        "kserve/servingruntime-modelmesh.yaml",
        "kserve/servingruntime-oneport.yaml",
        "kserve/inferenceservice.yaml",
        "k8s/deployment.yaml",
        "k8s/service.yaml",
        "k8s/pdb.yaml",
        "k8s/hpa.yaml",
        "k8s/prometheus-adapter.yaml",
        "prometheus/prometheus.yml",
        "prometheus/rules.yml",
    } <= names


@pytest.mark.parametrize("path", MANIFESTS, ids=lambda p: str(p.relative_to(DEPLOY)))
def test_manifest_parses(path: Path) -> None:
    docs = _docs(path)
    assert docs, f"{path} is empty"
    for doc in docs:
        assert isinstance(doc, dict)
        if "apiVersion" in doc and doc.get("kind") != "Kustomization":  # a Kubernetes object
            assert doc.get("kind") and doc.get("metadata", {}).get("name"), path
    if path.name == "kustomization.yaml":
        for res in docs[0]["resources"]:
            assert (path.parent / res).exists(), res


def test_adapter_config_parses() -> None:
    cm = _one("k8s/prometheus-adapter.yaml")
    rules = yaml.safe_load(cm["data"]["config.yaml"])["rules"]
    names = {r["name"]["as"] for r in rules}
    assert names == {"tritonlite_queue_us_per_request", "tritonlite_pending_requests"}
    hpa = _one("k8s/hpa.yaml")
    assert hpa["apiVersion"] == "autoscaling/v2"
    used = {m["pods"]["metric"]["name"] for m in hpa["spec"]["metrics"] if m["type"] == "Pods"}
    assert used == names


def test_queue_metric_divides_sums_per_pod() -> None:
    """Sum over a pod's models first, then divide: no per-model average (Triton's chart)."""
    cm = _one("k8s/prometheus-adapter.yaml")
    rules = yaml.safe_load(cm["data"]["config.yaml"])["rules"]
    q = next(
        r["metricsQuery"] for r in rules if r["name"]["as"] == "tritonlite_queue_us_per_request"
    )
    flat = " ".join(q.split())
    assert flat.startswith("sum by (<<.GroupBy>>) (rate(nv_inference_queue_duration_us")
    assert "/ clamp_min(sum by (<<.GroupBy>>) (rate(nv_inference_request_success" in flat
    assert "avg(" not in flat and "1+" not in flat.replace(" ", "")


@pytest.mark.parametrize("path", ["kserve/servingruntime.yaml", "kserve/servingruntime-gpu.yaml"])
def test_servingruntime_is_kserve_tritonserver_dropin(path: str) -> None:
    rt = _one(path)
    assert rt["apiVersion"] == "serving.kserve.io/v1alpha1" and rt["kind"] == "ServingRuntime"
    spec = rt["spec"]
    assert spec["protocolVersions"] == ["v2", "grpc-v2"]
    formats = {f["name"] for f in spec["supportedModelFormats"]}
    want = {"triton", "onnx", "pytorch"} | ({"tensorrt"} if "gpu" in path else set())
    assert formats == want
    assert spec["annotations"]["prometheus.kserve.io/port"] == "8002"
    assert spec["annotations"]["prometheus.kserve.io/path"] == "/metrics"
    c = _container(rt)
    assert c["command"] == ["tritonlite"]
    assert c["args"] == KSERVE_ARGS
    assert c["securityContext"]["runAsUser"] == 1000


def _parse(args: list[str]) -> Any:
    try:
        return options_from_args(args)
    except SystemExit as exc:  # argparse and options_from_args exit on a bad flag
        raise AssertionError(f"tritonlite refuses {args}: {exc}") from None


@pytest.mark.parametrize("path", ["kserve/servingruntime.yaml", "kserve/servingruntime-gpu.yaml"])
def test_servingruntime_args_parse(path: str) -> None:
    opts = _parse(_container(_one(path))["args"])
    assert opts.model_repositories == (Path("/mnt/models"),)
    assert (opts.http_port, opts.grpc_port, opts.metrics_port) == (8080, 9000, 8002)
    assert opts.allow_http and opts.allow_grpc
    assert opts.metrics_config.histogram_latencies  # the dashboard's percentiles need them


def test_oneport_args_parse() -> None:
    rt = _one("kserve/servingruntime-oneport.yaml")
    c = _container(rt)
    assert rt["spec"]["protocolVersions"] == ["v2", "grpc-v2"]
    assert c["command"] == ["tritonlite"]
    opts = _parse(c["args"])
    assert opts.http_port == opts.grpc_port == 8080 and opts.shared_port
    assert opts.model_repositories == (Path("/mnt/models"),)
    assert opts.metrics_config.histogram_latencies


def test_modelmesh_args_parse() -> None:
    c = _container(_one("kserve/servingruntime-modelmesh.yaml"))
    assert c["command"] == ["/bin/sh"] and c["args"][0] == "-c"
    words = shlex.split(c["args"][1])
    args = words[words.index("tritonlite", words.index("exec")) + 1 :]
    for flag in (
        "--model-control-mode=explicit",
        "--strict-model-config=false",
        "--strict-readiness=false",
    ):
        assert flag in args
    opts = _parse(args)
    assert opts.model_control_mode == "explicit"
    assert opts.metrics_config.histogram_latencies
    assert not opts.strict_readiness and opts.auto_complete_config
    # upstream's runtime also passes --allow-sagemaker=false: accepted (there is no such front end)
    options_from_args([*args, "--allow-sagemaker=false"])
    with pytest.raises(SystemExit, match="--allow-sagemaker"):  # asking for it is refused
        options_from_args([*args, "--allow-sagemaker=true"])


def test_deployment_args_and_probes() -> None:
    dep = _one("k8s/deployment.yaml")
    c = _container(dep)
    assert c["command"] == ["tritonlite"]
    opts = _parse(c["args"])
    ports = {p["name"]: p["containerPort"] for p in c["ports"]}
    assert ports == {"http": opts.http_port, "grpc": opts.grpc_port, "metrics": opts.metrics_port}
    assert opts.metrics_config.histogram_latencies  # the dashboard's percentiles need them
    assert c["readinessProbe"]["httpGet"]["path"] == "/v2/health/ready"
    assert c["livenessProbe"]["httpGet"]["path"] == "/v2/health/live"
    assert "startupProbe" in c
    grace = dep["spec"]["template"]["spec"]["terminationGracePeriodSeconds"]
    pre_stop = int(c["lifecycle"]["preStop"]["exec"]["command"][-1])
    assert grace > pre_stop + opts.exit_timeout_secs
    assert dep["spec"]["template"]["spec"]["securityContext"]["runAsUser"] == 1000
    pdb = _one("k8s/pdb.yaml")
    assert pdb["spec"]["selector"] == dep["spec"]["selector"]


def test_dockerfile_command_parses() -> None:
    text = (DEPLOY / "docker/Dockerfile").read_text()
    entry = json.loads(re.search(r"^ENTRYPOINT (.+)$", text, re.M).group(1))  # type: ignore
    cmd = json.loads(re.search(r"^CMD (.+)$", text, re.M).group(1))  # type: ignore
    assert entry == ["tritonlite"]
    _parse(cmd)
    assert re.search(r"^EXPOSE 8000 8001 8002$", text, re.M)
    assert re.search(r"^USER 1000$", text, re.M)
    assert "/v2/health/ready" in text and "HEALTHCHECK" in text
    assert text.count("FROM ${BASE_IMAGE}") == 2  # two stages on the base given at build time


def _queries() -> dict[str, list[str]]:
    """Every PromQL expression the deploy files hold, by where it comes from."""
    dash = json.loads((DEPLOY / "grafana/tritonlite-dashboard.json").read_text())
    out: dict[str, list[str]] = {"dashboard": [], "rules": [], "adapter": []}
    for panel in dash["panels"]:
        out["dashboard"] += [t["expr"] for t in panel.get("targets", [])]
    for var in dash["templating"]["list"]:
        if var.get("type") == "query":
            out["dashboard"].append(var["query"]["query"])
    rules = yaml.safe_load((DEPLOY / "prometheus/rules.yml").read_text())
    out["rules"] = [r["expr"] for g in rules["groups"] for r in g["rules"]]
    cm = _one("k8s/prometheus-adapter.yaml")
    for r in yaml.safe_load(cm["data"]["config.yaml"])["rules"]:
        out["adapter"] += [r["seriesQuery"], r["metricsQuery"]]
    return out


def test_dashboard_json_is_valid() -> None:
    dash = json.loads((DEPLOY / "grafana/tritonlite-dashboard.json").read_text())
    assert dash["uid"] and dash["title"] and dash["panels"]
    ids = [p["id"] for p in dash["panels"]]
    assert len(ids) == len(set(ids))
    titles = " ".join(p["title"].lower() for p in dash["panels"])
    for want in ("throughput", "latency", "queue", "batch size", "cache hit", "failover", "gpu"):
        assert want in titles, want
    for p in dash["panels"]:
        if p["type"] != "row":
            assert p["targets"] and all(t["expr"].strip() for t in p["targets"])
            assert p["datasource"]["uid"] == "${datasource}"


def _sample_names(text: str) -> set[str]:
    return {
        line.split("{")[0].split(" ")[0]
        for line in text.splitlines()
        if line and not line.startswith("#")
    }


def _cached_repo(onnx_repo: Path, tmp: Path) -> Path:
    """add_sub, and add_sub_cached with the response cache on (for the nv_cache_* families)."""
    repo = tmp / "repo"
    shutil.copytree(onnx_repo / "add_sub", repo / "add_sub")
    shutil.copytree(onnx_repo / "add_sub", repo / "add_sub_cached")
    cfg = repo / "add_sub_cached" / "config.pbtxt"
    text = re.sub(r'name:\s*"add_sub"', 'name: "add_sub_cached"', cfg.read_text())
    cfg.write_text(text + "\nresponse_cache { enable: true }\n")
    return repo


def test_every_metric_used_is_exported(
    onnx_repo: Path, tmp_path: Path, server_factory: Callable[..., Any]
) -> None:
    import tritonclient.http as httpclient

    srv = server_factory(
        _cached_repo(onnx_repo, tmp_path),
        "--metrics-config=histogram_latencies=true",
        "--cache-config=local,size=1048576",
    )
    client = httpclient.InferenceServerClient(srv.http_url)
    for model in ("add_sub", "add_sub_cached", "add_sub_cached"):  # a miss, then a hit
        a = np.ones((1, 16), dtype=np.float32)
        inputs = [
            httpclient.InferInput("INPUT0", [1, 16], "FP32"),
            httpclient.InferInput("INPUT1", [1, 16], "FP32"),
        ]
        for i in inputs:
            i.set_data_from_numpy(a)
        client.infer(model, inputs)
    client.close()
    with urllib.request.urlopen(f"http://{srv.metrics_url}/metrics", timeout=10) as r:
        exported = _sample_names(r.read().decode())
    # nv_gpu_* exist only where NVML sees a GPU: those names must be ones the metrics module
    # writes (its source), all others must be on the live endpoint.
    source = Path(metrics_module.__file__).read_text()
    missing = []
    used: set[str] = set()
    for where, exprs in _queries().items():
        for expr in exprs:
            for name in _METRIC.findall(expr):
                used.add(name)
                if name.startswith("nv_gpu_"):
                    if f'"{name}"' not in source:
                        missing.append(f"{where}: {name} (not a GPU metric tritonlite writes)")
                elif name not in exported:
                    missing.append(f"{where}: {name}")
    assert not missing, "not exported:\n" + "\n".join(sorted(set(missing)))
    # The check would notice: the dashboard reads these families.
    assert {
        "nv_inference_request_histogram_us_bucket",
        "nv_cache_num_hits_per_model",
        "nv_inference_queue_duration_us",
        "tritonlite_instance_failovers",
        "nv_gpu_utilization",
    } <= used
