"""The search logic against a model of a server: which candidates it probes, keeps and chooses.

``FakeServer`` stands in for the network only: ``load`` parses the config JSON the tuner sends
(with the project's own parser, so a malformed override fails here as it would on a server) and
``measure`` returns a deterministic throughput/latency for that config at that concurrency.
"""

from __future__ import annotations

import io
import sys
from pathlib import Path
from typing import Any

import pytest

from tritonlite.contracts.config import parse_json, parse_pbtxt
from tritonlite.tune import report, space
from tritonlite.tune.load import Sample, merge
from tritonlite.tune.runner import Settings, Tuner
from tritonlite.tune.server import ModelStats

pytestmark = pytest.mark.timeout(30)

MLP = """name: "mlp"
platform: "onnxruntime_onnx"
max_batch_size: 64
input [ { name: "INPUT0" data_type: TYPE_FP32 dims: [ 1024 ] } ]
output [ { name: "OUTPUT0" data_type: TYPE_FP32 dims: [ 1024 ] } ]
instance_group [ { kind: KIND_CPU count: 1 } ]
"""


class FakeServer:
    """Batching triples throughput under load; a queue delay costs its length at concurrency 1
    and half of it under load; two instances add 10%; a response cache fails to load."""

    def __init__(self, instance_gain: float = 1.1) -> None:
        self.instance_gain = instance_gain
        self.cand = space.Candidate()
        self.loads: list[space.Candidate] = []

    def load(self, model: str, config_json: str | None) -> str | None:
        assert model == "mlp" and config_json is not None
        cand = space.from_config(parse_json(config_json))
        self.loads.append(cand)
        if cand.response_cache:
            return "response cache: refused"
        self.cand = cand
        return None

    def measure(self, concurrency: int, window_s: float) -> Sample:
        c = self.cand
        per_request_us = 1000.0  # one sample alone
        if c.dynamic_batching and concurrency > 1:
            per_request_us /= 3
        if c.instance_count == 2:
            per_request_us /= self.instance_gain
        latency = per_request_us * concurrency
        if c.dynamic_batching:
            latency += c.max_queue_delay_us * (1 if concurrency == 1 else 0.5)
        s = Sample(
            concurrency,
            throughput=concurrency / latency * 1e6,
            p50_us=latency,
            p90_us=latency,
            p99_us=latency * 1.2,
            avg_us=latency,
            count=100,
            window_s=window_s,
            server=ModelStats(success=100, execution_count=10, inference_count=100),
        )
        return s


def tune(settings: Settings, repeats: bool = False) -> tuple[Any, FakeServer]:
    base = parse_pbtxt(MLP, "mlp")
    fake = FakeServer()
    ctx = space.Context(
        max_batch_size=64,
        ort=True,
        cores=2,
        max_concurrency=16,
        repeats=repeats,
        latency_budget_us=settings.latency_budget_us,
    )
    tuner = Tuner(fake, "mlp", base, ctx, settings, fake.measure, io.StringIO())  # type: ignore
    return tuner.run(), fake


def test_finds_batching_and_instances_and_keeps_them_through_the_final() -> None:
    result, fake = tune(Settings(concurrency=(16, 16), max_minutes=5, probe_s=0.01, sweep_s=0.01))
    c = result.chosen.candidate
    assert c.dynamic_batching and c.instance_count == 2
    assert result.chosen.score == pytest.approx(3 * 1.1 * 1000, rel=0.01)
    assert result.baseline.candidate == space.Candidate(instance_count=1)
    assert "3.30x" in result.reason
    # Pruned, not the grid: the queue-delay ladder stops after two probes that fell behind.
    delays = [t.candidate.max_queue_delay_us for t in result.trials if t.stage == "batching"]
    assert delays == [0, 100, 500, 2_000, 10_000]
    # The server is left serving the choice.
    assert fake.cand == c


def test_a_queue_delay_that_hurts_light_load_is_rejected() -> None:
    # At concurrency 1 a delay costs its length; the 1:16 range makes tune check it.
    result, _ = tune(Settings(concurrency=(1, 16), max_minutes=5, probe_s=0.01, sweep_s=0.01))
    assert result.chosen.candidate.max_queue_delay_us == 0
    assert result.chosen.candidate.dynamic_batching


class DelayHelpsUnderLoad(FakeServer):
    """A longer queue delay batches more under load (+0.1% throughput per µs) while it still
    costs its length at concurrency 1: the trade the light-load rule refuses."""

    def measure(self, concurrency: int, window_s: float) -> Sample:
        s = super().measure(concurrency, window_s)
        if concurrency > 1 and self.cand.dynamic_batching:
            s.throughput *= 1 + self.cand.max_queue_delay_us / 1000
        return s


def test_a_light_load_rejection_says_what_it_cost_under_load() -> None:
    base = parse_pbtxt(MLP, "mlp")
    fake = DelayHelpsUnderLoad()
    ctx = space.Context(max_batch_size=64, ort=True, cores=2, max_concurrency=16)
    settings = Settings(concurrency=(1, 16), max_minutes=5, probe_s=0.01, sweep_s=0.01)
    result = Tuner(fake, "mlp", base, ctx, settings, fake.measure, io.StringIO()).run()  # type: ignore
    rejected = [t for t in result.trials if t.status.startswith("rejected")]
    assert rejected  # the longer delays: better under load, >10% slower at concurrency 1
    for t in rejected:
        assert f"cost at concurrency 16: it scored {t.score:,.0f} vs" in t.status
        assert "x given up" in t.status
    section = report._rejections(result.trials)
    assert section[0] == "### Rejected at a lighter load"
    assert len(section) == len(rejected) + 3


class NoisyLightLoad(FakeServer):
    """The first light-load window of each batching candidate reads 40% of the truth (a slow
    spell of a shared machine)."""

    def __init__(self) -> None:
        super().__init__()
        self.light_windows: dict[space.Candidate, int] = {}

    def measure(self, concurrency: int, window_s: float) -> Sample:
        s = super().measure(concurrency, window_s)
        if concurrency == 1 and self.cand.dynamic_batching:
            n = self.light_windows.get(self.cand, 0)
            self.light_windows[self.cand] = n + 1
            if n == 0:
                s.throughput *= 0.4
        return s


def test_one_slow_light_load_window_does_not_reject_a_candidate() -> None:
    base = parse_pbtxt(MLP, "mlp")
    fake = NoisyLightLoad()
    ctx = space.Context(max_batch_size=64, ort=True, cores=2, max_concurrency=16)
    settings = Settings(concurrency=(1, 16), max_minutes=5, probe_s=0.01, sweep_s=0.01)
    tuner = Tuner(fake, "mlp", base, ctx, settings, fake.measure, io.StringIO())  # type: ignore
    result = tuner.run()
    assert result.chosen.candidate.dynamic_batching
    assert result.chosen.candidate.max_queue_delay_us == 0
    # the batching probe's light-load check read three windows, the first one slow
    batching = next(t for t in result.trials if t.candidate.dynamic_batching)
    light = [x.throughput for x in batching.samples if x.concurrency == 1]
    assert len(light) == 3 and light[0] == pytest.approx(0.4 * light[1])
    # with a single window (the old rule) the same slow spell rejects it
    one = Settings(concurrency=(1, 16), max_minutes=5, probe_s=0.01, sweep_s=0.01, light_rounds=1)
    fake = NoisyLightLoad()
    result = Tuner(fake, "mlp", base, ctx, one, fake.measure, io.StringIO()).run()  # type: ignore
    assert not result.chosen.candidate.dynamic_batching


def test_a_candidate_that_fails_to_load_is_reported_not_chosen() -> None:
    result, fake = tune(
        Settings(concurrency=(16, 16), max_minutes=5, probe_s=0.01, sweep_s=0.01), repeats=True
    )
    failed = [t for t in result.trials if t.stage == "response cache"]
    assert failed and failed[0].status == "load failed: response cache: refused"
    assert not result.chosen.candidate.response_cache


def test_nothing_better_keeps_the_original() -> None:
    # No batching possible, ORT stages off, a second instance within the noise margin.
    base = parse_pbtxt(MLP, "mlp")
    fake = FakeServer(instance_gain=1.03)
    ctx = space.Context(max_batch_size=0, ort=False, cores=1, max_concurrency=4)
    tuner = Tuner(
        fake,
        "mlp",
        base,
        ctx,
        Settings(
            concurrency=(4, 4),
            probe_s=0.01,  # type: ignore
            sweep_s=0.01,
        ),
        fake.measure,
        io.StringIO(),
    )
    result = tuner.run()
    assert result.chosen.candidate == result.baseline.candidate
    assert "the original configuration is kept" in result.reason


def test_merge_means_rounds_and_keeps_the_worst_p99() -> None:
    a = Sample(4, throughput=100, p50_us=10, p99_us=30, count=5, server=ModelStats(success=5))
    b = Sample(4, throughput=200, p50_us=20, p99_us=50, count=7, server=ModelStats(success=7))
    m = merge([a, b])
    assert (m.throughput, m.p50_us, m.p99_us, m.count, m.server.success) == (150, 15, 50, 12, 12)


@pytest.mark.parametrize("have_matplotlib", [False, True])
def test_outputs_without_matplotlib_are_the_config_and_report_with_a_note(
    have_matplotlib: bool, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    settings = Settings(concurrency=(16, 16), max_minutes=5, probe_s=0.01, sweep_s=0.01)
    result, _ = tune(settings)
    if have_matplotlib:
        pytest.importorskip("matplotlib")
    else:  # what ``import matplotlib`` does where it is not installed
        for name in [m for m in sys.modules if m == "matplotlib" or m.startswith("matplotlib.")]:
            monkeypatch.delitem(sys.modules, name)
        monkeypatch.setitem(sys.modules, "matplotlib", None)
    base = parse_pbtxt(MLP, "mlp")
    cfg_path, report_path, note = report.write_all(
        tmp_path, "mlp", result, settings, base, "built-in HTTP load generator", "tune"
    )
    tuned = parse_pbtxt(cfg_path.read_text(), "tuned")
    assert tuned.HasField("dynamic_batching")
    text = report_path.read_text()
    assert "## Choice" in text and "### Config diff" in text
    pngs = sorted(p.name for p in tmp_path.glob("*.png"))
    if have_matplotlib:
        assert note == "" and pngs == [report.PLOT_CANDIDATES, report.PLOT_FRONTIER]
        assert f"![{report.PLOT_FRONTIER}]({report.PLOT_FRONTIER})" in text
    else:
        assert pngs == []
        assert "matplotlib is not installed" in note
        assert "pip install 'tritonlite[tune]'" in note
        assert note in text  # the report says why it has no plots
