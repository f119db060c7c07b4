"""A model's tensor signature, precomputed from its config once at load.

Validation, metadata and output shaping read this instead of walking the protobuf per request.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from tritonlite._proto import pb
from tritonlite.contracts.datatypes import config_to_wire


@dataclass(frozen=True, slots=True)
class TensorSpec:
    name: str
    datatype: str  # wire name
    dims: tuple[int, ...]  # without the batch dim; -1 = variable
    reshape: tuple[int, ...] | None  # what the framework sees instead of dims
    optional: bool = False
    labels: tuple[str, ...] = ()  # classification labels (outputs with label_filename)


@dataclass(frozen=True, slots=True)
class Signature:
    name: str
    platform: str  # what metadata reports: config.platform, else config.backend
    max_batch_size: int
    inputs: dict[str, TensorSpec]
    outputs: dict[str, TensorSpec]
    decoupled: bool = False
    required_inputs: frozenset[str] = field(default_factory=frozenset)

    @classmethod
    def from_config(cls, cfg: Any, model_dir: Path) -> Signature:
        def spec(t: Any, is_input: bool) -> TensorSpec:
            reshape = tuple(int(d) for d in t.reshape.shape) if t.HasField("reshape") else None
            labels: tuple[str, ...] = ()
            if not is_input and t.label_filename:
                path = model_dir / t.label_filename
                if path.is_file():
                    labels = tuple(path.read_text(encoding="utf-8").splitlines())
            return TensorSpec(
                name=t.name,
                datatype=config_to_wire(pb.DataType.values_by_number[t.data_type].name),
                dims=tuple(int(d) for d in t.dims),
                reshape=reshape,
                optional=bool(getattr(t, "optional", False)) if is_input else False,
                labels=labels,
            )

        inputs = {t.name: spec(t, True) for t in cfg.input}
        outputs = {t.name: spec(t, False) for t in cfg.output}
        return cls(
            name=cfg.name,
            platform=cfg.platform or cfg.backend,
            max_batch_size=int(cfg.max_batch_size),
            inputs=inputs,
            outputs=outputs,
            decoupled=bool(
                cfg.HasField("model_transaction_policy") and cfg.model_transaction_policy.decoupled
            ),
            required_inputs=frozenset(n for n, s in inputs.items() if not s.optional),
        )

    def metadata_shape(self, spec: TensorSpec) -> list[int]:
        """Metadata shape: ``[-1] + dims`` for batching models, else ``dims``."""
        return ([-1] if self.max_batch_size > 0 else []) + list(spec.dims)
