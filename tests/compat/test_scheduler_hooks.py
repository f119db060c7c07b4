"""Triton's scheduler test hooks on a real server, with the schedules of Triton's own QA.

Each case of ``hook_schedules.CASES`` starts tritonlite with its ``TRITONSERVER_DELAY_SCHEDULER``
/ ``TRITONSERVER_BACKLOG_DELAY_SCHEDULER`` setting, plays the QA case's requests with the real
tritonclient (HTTP and gRPC for the dynamic batcher, gRPC streams for sequences) and compares
the statistics extension's batch sizes, execution and inference counts with what Triton's test
asserts (and what tritonserver 2.51 answered for the same schedule: see
``tests/compare/compare_hooks.py``).
"""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path

import pytest
from conftest import Server
from hook_schedules import CASES, DELAY, Case, Urls, run_case, statistics, write_model
from repos import write_add_sub

pytestmark = pytest.mark.timeout(120)


@pytest.mark.parametrize("case", CASES, ids=[c.name for c in CASES])
def test_qa_schedule(case: Case, tmp_path: Path, server_factory: Callable[..., Server]) -> None:
    write_model(tmp_path, case.model)
    server = server_factory(tmp_path, env=case.env)
    urls = Urls(server.http_url, server.grpc_url, server.metrics_url)
    batches, executions, inferences, _ = run_case(case, urls)
    assert (batches, executions, inferences) == (case.batches, case.executions, case.inferences)


def test_without_the_hook_batches_form_as_requests_arrive(
    tmp_path: Path, server_factory: Callable[..., Server]
) -> None:
    """The control for the cases above: unset, the first request runs alone at once."""
    write_model(tmp_path, "pref46")
    server = server_factory(tmp_path, env={})
    urls = Urls(server.http_url, server.grpc_url, server.metrics_url)
    case = next(c for c in CASES if c.name == "test_preferred_batch_only_use_no_preferred_size")
    case.run(urls, "pref46")
    batches, executions, _, _ = statistics(urls, "pref46")
    assert sum(batches.values()) == executions
    assert 1 in batches  # no hold: the first request found the instance idle


@pytest.mark.parametrize("value", ["0", "", "x3", " 3abc"])
def test_values_read_as_atoi(
    value: str, tmp_path: Path, server_factory: Callable[..., Server]
) -> None:
    """Triton reads the count with atoi: no digits is 0 (no hold), trailing text is ignored."""
    write_add_sub(
        tmp_path,
        "pref46",
        8,
        extra_config="instance_group [ { kind: KIND_CPU count: 1 } ]\n"
        "dynamic_batching { preferred_batch_size: [ 4, 6 ] }",
    )
    server = server_factory(tmp_path, env={DELAY: value})
    urls = Urls(server.http_url, server.grpc_url, server.metrics_url)
    case = next(c for c in CASES if c.name == "test_preferred_batch_only_use_no_preferred_size")
    case.run(urls, "pref46")
    batches, _, inferences, _ = statistics(urls, "pref46")
    assert inferences == 3
    if value.strip().startswith("3"):
        assert batches == {3: 1}
    else:
        assert 1 in batches
