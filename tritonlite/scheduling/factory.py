"""Picks a model's scheduler from its config."""

from __future__ import annotations

from typing import TYPE_CHECKING

from tritonlite.scheduling.base import Scheduler
from tritonlite.scheduling.direct import DirectScheduler

if TYPE_CHECKING:
    from tritonlite.core.model import Model


def make_scheduler(model: Model) -> Scheduler:
    cfg = model.config
    if cfg.HasField("ensemble_scheduling"):
        from tritonlite.core.ensemble import EnsembleScheduler

        return EnsembleScheduler(model)
    if cfg.HasField("sequence_batching"):
        from tritonlite.scheduling.sequence import SequenceBatchScheduler

        return SequenceBatchScheduler(model)
    if cfg.HasField("dynamic_batching") and model.signature.max_batch_size > 0:
        from tritonlite.scheduling.dynamic import DynamicBatchScheduler

        return DynamicBatchScheduler(model)
    return DirectScheduler(model)
