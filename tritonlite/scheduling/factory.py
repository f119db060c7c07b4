"""Picks a model's scheduler from its config."""

from __future__ import annotations

from tritonlite.scheduling.base import InstancePool, Scheduler
from tritonlite.scheduling.direct import DirectScheduler


def make_scheduler(model: InstancePool) -> Scheduler:
    """``model``: the loaded model; an ensemble's is also the ``EnsembleHost`` its scheduler
    runs steps through, a router's the ``SplitHost`` it routes through."""
    cfg = model.config
    if cfg.platform == "tritonlite_split":
        from tritonlite.scheduling.split import SplitHost, SplitScheduler

        assert isinstance(model, SplitHost)
        return SplitScheduler(model)
    if cfg.HasField("ensemble_scheduling"):
        from tritonlite.scheduling.ensemble import EnsembleHost, EnsembleScheduler

        assert isinstance(model, EnsembleHost)
        return EnsembleScheduler(model)
    if cfg.HasField("sequence_batching"):
        from tritonlite.scheduling.sequence import SequenceBatchScheduler

        return SequenceBatchScheduler(model)
    if cfg.HasField("dynamic_batching") and model.signature.max_batch_size > 0:
        from tritonlite.scheduling.dynamic import DynamicBatchScheduler

        return DynamicBatchScheduler(model)
    return DirectScheduler(model)
