"""tune's search space and pruning as units: candidates <-> configs, the stages, the rules."""

from __future__ import annotations

import pytest
from google.protobuf import text_format

from tritonlite._proto import pb
from tritonlite.contracts.config import parse_pbtxt
from tritonlite.tune import space
from tritonlite.tune.report import pbtxt

pytestmark = pytest.mark.timeout(30)

ADD_SUB = """name: "add_sub"
platform: "onnxruntime_onnx"
max_batch_size: 8
input [ { name: "INPUT0" data_type: TYPE_FP32 dims: [ 16 ] } ]
output [ { name: "OUTPUT0" data_type: TYPE_FP32 dims: [ 16 ] } ]
dynamic_batching { max_queue_delay_microseconds: 100 priority_levels: 2
                   default_priority_level: 1 }
parameters { key: "custom" value: { string_value: "kept" } }
"""

NOBATCH = """name: "mlp"
platform: "onnxruntime_onnx"
max_batch_size: 64
input [ { name: "INPUT0" data_type: TYPE_FP32 dims: [ 1024 ] } ]
output [ { name: "OUTPUT0" data_type: TYPE_FP32 dims: [ 1024 ] } ]
instance_group [ { kind: KIND_CPU count: 1 }, { kind: KIND_CPU count: 2 } ]
"""


def cfg(text: str) -> object:
    return parse_pbtxt(text, "test")


def ctx(**kw: object) -> space.Context:
    base: dict[str, object] = dict(max_batch_size=8, ort=True, cores=2, max_concurrency=16)
    base.update(kw)
    return space.Context(**base)  # type: ignore[arg-type]


def test_baseline_round_trips_to_the_same_config() -> None:
    for text in (ADD_SUB, NOBATCH):
        c = cfg(text)
        assert space.apply(c, space.from_config(c)) == c


def test_from_config_reads_the_tuned_fields() -> None:
    c = space.from_config(cfg(ADD_SUB))
    assert c == space.Candidate(dynamic_batching=True, max_queue_delay_us=100)
    n = space.from_config(cfg(NOBATCH))
    assert not n.dynamic_batching and n.instance_count is None  # two groups: not one count


def test_apply_changes_only_the_tuned_fields_and_keeps_the_rest() -> None:
    base = cfg(ADD_SUB)
    cand = space.Candidate(
        dynamic_batching=True,
        max_queue_delay_us=2000,
        preferred_batch_sizes=(4, 8),
        instance_count=3,
        intra_op_threads=1,
        spinning=True,
        response_cache=True,
    )
    out = space.apply(base, cand)
    assert out.dynamic_batching.max_queue_delay_microseconds == 2000
    assert list(out.dynamic_batching.preferred_batch_size) == [4, 8]
    assert out.dynamic_batching.priority_levels == 2  # the user's other batcher fields stay
    assert [g.count for g in out.instance_group] == [3]
    assert out.parameters[space.INTRA_OP_PARAMETER].string_value == "1"
    assert out.parameters[space.SPINNING_PARAMETER].string_value == "1"
    assert out.parameters["custom"].string_value == "kept"
    assert out.response_cache.enable
    assert base.dynamic_batching.max_queue_delay_microseconds == 100  # base untouched
    assert space.from_config(out) == cand
    # What is written is valid text format that parses back to the same config.
    again = pb.ModelConfig()
    text_format.Parse(pbtxt(out), again)
    assert again == out


def test_apply_turns_batching_off_and_collapses_groups() -> None:
    out = space.apply(cfg(ADD_SUB), space.Candidate(dynamic_batching=False, instance_count=2))
    assert not out.HasField("dynamic_batching")
    two = space.apply(cfg(NOBATCH), space.Candidate(instance_count=2))
    assert [(g.kind, g.count) for g in two.instance_group] == [(2, 2)]  # KIND_CPU kept


def test_batching_stage_ladder_and_budget_cap() -> None:
    start = space.Candidate()
    ladder = space.batching_stage(start, ctx())
    assert [c.max_queue_delay_us for c in ladder] == list(space.QUEUE_DELAYS_US)
    assert all(c.dynamic_batching for c in ladder)  # "off" is the start itself: skipped
    capped = space.batching_stage(start, ctx(latency_budget_us=5_000))
    assert max(c.max_queue_delay_us for c in capped) <= 2_500
    assert space.batching_stage(start, ctx(max_batch_size=0)) == []


def test_preferred_sizes_follow_the_load_and_the_model() -> None:
    assert space.preferred_sizes(64, 16) == [(), (16,), (8, 16), (4, 8, 16), (64,)]
    assert space.preferred_sizes(8, 64) == [(), (8,), (4, 8), (2, 4, 8)]
    assert space.preferred_stage(space.Candidate(), ctx()) == []  # no batching, no stage
    on = space.Candidate(dynamic_batching=True)
    assert on not in space.preferred_stage(on, ctx())


def test_instances_up_to_one_and_a_half_times_cores_or_devices() -> None:
    assert space.max_instances(ctx(cores=2)) == 3
    assert space.max_instances(ctx(cores=16)) == 24
    assert space.max_instances(ctx(devices=1)) == 2  # per GPU
    assert space.max_instances(ctx(devices=4)) == 2
    counts = [c.instance_count for c in space.instance_stage(space.Candidate(), ctx(cores=2))]
    assert counts == [1, 2, 3]


def test_ort_stages_only_for_ort_on_cpu() -> None:
    assert [c.intra_op_threads for c in space.intra_op_stage(space.Candidate(), ctx(cores=8))] == [
        1,
        2,
        4,
        8,
    ]
    # On 2 cores the backend's default is 2 threads, measured already by the start candidate.
    assert [c.intra_op_threads for c in space.intra_op_stage(space.Candidate(), ctx(cores=2))] == [
        1
    ]
    assert space.intra_op_stage(space.Candidate(), ctx(ort=False)) == []
    assert space.intra_op_stage(space.Candidate(), ctx(devices=1)) == []
    assert space.spinning_stage(space.Candidate(), ctx())[0].spinning is True
    assert space.spinning_stage(space.Candidate(intra_op_threads=1), ctx()) == []


def test_cache_stage_only_when_the_stream_repeats() -> None:
    assert space.cache_stage(space.Candidate(), ctx()) == []
    assert space.cache_stage(space.Candidate(), ctx(repeats=True))[0].response_cache


def test_score_penalises_latency_over_budget() -> None:
    assert space.score(1000, 5_000, None) == 1000
    assert space.score(1000, 5_000, 10_000) == 1000
    assert space.score(1000, 20_000, 10_000) == 500
    assert space.score(0, 1, None) == 0


def test_ladder_stops_after_two_falling_probes() -> None:
    lad = space.Ladder(margin=0.05, patience=2)
    assert not lad.add(100)
    assert not lad.add(120)
    assert not lad.add(90)
    assert not lad.add(118)  # within the margin of the best: the run of losses resets
    assert not lad.add(80)
    assert lad.add(70)


def test_better_needs_the_margin_and_acceptable_guards_light_load() -> None:
    assert space.better(106, 100, 0.05) and not space.better(104, 100, 0.05)
    assert space.acceptable(95, 1_000, 100, None)
    assert not space.acceptable(80, 1_000, 100, None)
    assert space.acceptable(80, 1_000, 100, 2_000)  # within the budget: allowed
    assert not space.acceptable(80, 3_000, 100, 2_000)


@pytest.mark.parametrize(("text", "want"), [("1:64", (1, 64)), ("16", (16, 16)), ("4:4", (4, 4))])
def test_parse_range(text: str, want: tuple[int, int]) -> None:
    assert space.parse_range(text, "--concurrency") == want


@pytest.mark.parametrize("text", ["0:4", "8:4", "a:b", "1:2:3", "", "-1"])
def test_parse_range_refuses(text: str) -> None:
    with pytest.raises(ValueError, match="--concurrency"):
        space.parse_range(text, "--concurrency")


def test_concurrency_points() -> None:
    assert space.concurrency_points(1, 64) == [1, 4, 16, 64]
    assert space.concurrency_points(16, 16) == [16]
    assert space.concurrency_points(2, 10) == [2, 4, 10]
