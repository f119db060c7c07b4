"""A router's (``platform: "tritonlite_split"``) place in the repository: its variants are
loaded before it and its config is checked against theirs.

The rules, as for an ensemble's composing models (ensemble_deps.py):

* loading a router first loads each variant that is not ready (in explicit mode this is how
  variants get loaded; at startup in the other modes they were loaded first); a load already
  in progress is waited for, not repeated;
* a variant that is not in the repository, fails to load, is decoupled or is itself a router
  fails the router's load with a message naming it, while every other model stays as it is;
* the router's inputs and outputs must fit every variant: each router input exists in the
  variant with the same datatype and compatible dims, each required variant input is a router
  input, each router output exists in the variant likewise, and both batch (the router's
  max_batch_size at most the variant's) or neither does;
* a router has no batcher, cache, warm-up or instances of its own: ``dynamic_batching``,
  ``sequence_batching``, ``response_cache``, ``model_warmup``, ``decoupled``, an
  ``instance_group`` and ``optimization`` are refused (set them on the variants);
* unloading a variant leaves the router loaded: its share goes to the ready variants.
"""

from __future__ import annotations

import logging
import re
from pathlib import Path
from typing import TYPE_CHECKING, Any

from tritonlite.contracts.config import CONFIG_FILENAME
from tritonlite.contracts.config_validate import KIND_CPU
from tritonlite.contracts.errors import invalid_arg, unsupported
from tritonlite.contracts.names import component_problem
from tritonlite.contracts.signature import Signature, TensorSpec
from tritonlite.core.models.deps import ensure_loaded, ready_versions
from tritonlite.core.observability.latency import DEFAULT_HISTOGRAM_BUCKETS_US
from tritonlite.core.runtime.split import SplitBackend, SplitMetrics, SplitModel
from tritonlite.scheduling.split import SPLIT, VARIANTS_KEY, Variants, parse_variants

if TYPE_CHECKING:
    from tritonlite.core.models.repository import ModelRepository

log = logging.getLogger("tritonlite")

_PLATFORM_RE = re.compile(r'^\s*(platform|backend)\s*:\s*"tritonlite_split"', re.MULTILINE)
_REFUSED = (
    ("dynamic_batching", "dynamic_batching"),
    ("sequence_batching", "sequence_batching"),
    ("ensemble_scheduling", "ensemble_scheduling"),
)


def is_split(cfg: Any) -> bool:
    return bool(cfg.platform == SPLIT)


def is_split_dir(model_dir: Path | None) -> bool:
    """Whether a model directory's config.pbtxt declares a router (a cheap text check used to
    order the startup load and to refuse a router as a variant before loading it)."""
    if model_dir is None:
        return False
    try:
        return bool(_PLATFORM_RE.search((model_dir / CONFIG_FILENAME).read_text("utf-8")))
    except (OSError, UnicodeDecodeError):
        return False


def _where(cfg: Any) -> str:
    return f"model '{cfg.name}' (platform {SPLIT})"


def router_variants(cfg: Any) -> Variants:
    """The router's variants table; INVALID_ARG for a config a router cannot have."""
    where = _where(cfg)
    if VARIANTS_KEY not in cfg.parameters:
        raise invalid_arg(
            f'{where} must set parameters {{ key: "{VARIANTS_KEY}" value {{ string_value: '
            '"name:weight,..." } }'
        )
    variants = parse_variants(cfg.name, cfg.parameters[VARIANTS_KEY].string_value)
    for name in variants.names:
        problem = component_problem(name)
        if problem is not None:
            raise invalid_arg(f"{where}: variant name '{name}' is not a model name: {problem}")
    for field, shown in _REFUSED:
        if cfg.HasField(field):
            raise invalid_arg(f"{where} cannot set {shown}: set it on its variants")
    if cfg.response_cache.enable:
        raise invalid_arg(
            f"{where} cannot enable response_cache: enable it on its variants (the router's "
            "choice depends on more than its inputs)"
        )
    if cfg.model_warmup:
        raise invalid_arg(f"{where} cannot set model_warmup: set it on its variants")
    if cfg.model_transaction_policy.decoupled:
        raise unsupported(f"{where} cannot be decoupled")
    _drop_instance_defaults(cfg, where)
    return variants


def _drop_instance_defaults(cfg: Any, where: str) -> None:
    """A router has no instances: the instance group and pinned-memory settings that config
    normalization gives every model are removed (so ``/config`` shows none, as for an
    ensemble); any other instance group or optimization is refused."""
    groups = list(cfg.instance_group)
    added = (
        len(groups) == 1
        and groups[0].name == cfg.name
        and groups[0].count == 1
        and groups[0].kind == KIND_CPU
        and not groups[0].gpus
    )
    if groups and not added:
        raise invalid_arg(f"{where} cannot set instance_group: a router has no instances")
    default = type(cfg.optimization)()
    default.input_pinned_memory.enable = True
    default.output_pinned_memory.enable = True
    if cfg.HasField("optimization") and cfg.optimization != default:
        raise invalid_arg(f"{where} cannot set optimization: set it on its variants")
    cfg.ClearField("instance_group")
    cfg.ClearField("optimization")


async def load_variants(repo: ModelRepository, cfg: Any, explicit: bool) -> None:
    """Make every variant of router ``cfg`` ready, then check ``cfg`` against them.

    ``explicit``: the server is in explicit control mode, where a variant that is not ready is
    (re)loaded for the router.
    """
    where = _where(cfg)
    variants = router_variants(cfg)
    on_disk = repo.scan()
    for dep in variants.names:
        if on_disk.get(dep) is None and not ready_versions(repo, dep):
            raise invalid_arg(f"{where}: variant '{dep}' is not in the model repository")
        if is_split_dir(on_disk.get(dep)):
            raise invalid_arg(f"{where}: variant '{dep}' is itself a {SPLIT} model")
    for dep in variants.names:
        await _ensure_loaded(repo, cfg, dep, explicit)
    sig = Signature.from_config(cfg, Path())
    for dep in variants.names:
        model = repo.get(dep)
        if is_split(model.config):
            raise invalid_arg(f"{where}: variant '{dep}' is itself a {SPLIT} model")
        if model.signature.decoupled:
            raise unsupported(
                f"{where}: variant '{dep}' is decoupled: a router's variants must answer each "
                "request with one response"
            )
        check_signature(cfg.name, sig, dep, model.signature)
    total = variants.total
    log.info(
        "model '%s' splits its traffic: %s",
        cfg.name,
        ", ".join(
            f"'{n}' {100 * w / total:.4g}%" for n, w in zip(variants.names, variants.weights)
        ),
    )


async def _ensure_loaded(repo: ModelRepository, cfg: Any, dep: str, explicit: bool) -> None:
    _, error = await ensure_loaded(repo, dep, explicit)
    if error is not None:
        error = (error or "it has no loaded version").rstrip("\n")
        raise invalid_arg(f"{_where(cfg)}: variant '{dep}' failed to load: {error}")


def _compatible(a: tuple[int, ...], b: tuple[int, ...]) -> bool:
    return len(a) == len(b) and all(x == -1 or y == -1 or x == y for x, y in zip(a, b))


def _dims(spec: TensorSpec) -> str:
    return "[" + ",".join(str(d) for d in spec.dims) + "]"


def check_signature(router: str, sig: Signature, variant: str, var: Signature) -> None:
    """INVALID_ARG unless a request the router accepts is one ``variant`` accepts, and the
    variant answers with the router's outputs."""
    where = f"model '{router}' (platform {SPLIT})"
    if (sig.max_batch_size > 0) != (var.max_batch_size > 0):
        raise invalid_arg(
            f"{where} has max_batch_size {sig.max_batch_size} but variant '{variant}' has "
            f"{var.max_batch_size}: both must batch or neither"
        )
    if sig.max_batch_size > var.max_batch_size:
        raise invalid_arg(
            f"{where} allows max_batch_size {sig.max_batch_size} but variant '{variant}' "
            f"only {var.max_batch_size}"
        )
    for kind, mine, theirs in (
        ("input", sig.inputs, var.inputs),
        ("output", sig.outputs, var.outputs),
    ):
        for name, spec in mine.items():
            other = theirs.get(name)
            if other is None:
                raise invalid_arg(
                    f"{where}: {kind} '{name}' is not an {kind} of variant '{variant}'"
                )
            if other.datatype != spec.datatype:
                raise invalid_arg(
                    f"{where}: {kind} '{name}' is {spec.datatype} but {other.datatype} in "
                    f"variant '{variant}'"
                )
            if not _compatible(spec.dims, other.dims):
                raise invalid_arg(
                    f"{where}: {kind} '{name}' has dims {_dims(spec)} but {_dims(other)} in "
                    f"variant '{variant}'"
                )
    missing = sorted(var.required_inputs - set(sig.inputs))
    if missing:
        raise invalid_arg(
            f"{where}: variant '{variant}' requires input '{missing[0]}', which the router "
            "does not declare"
        )


def make_backend(repo: ModelRepository, cfg: Any) -> SplitBackend:
    """The backend of a router version; a reload keeps the loaded version's metrics."""
    metrics: SplitMetrics | None = None
    entry = repo.models.get(cfg.name)
    if entry is not None:
        for state in entry.versions.values():
            if isinstance(state.model, SplitModel):
                metrics = state.model.metrics
                break
    if metrics is None:
        settings = getattr(repo.options, "metrics_config", None)  # a CoreOptions, when served
        bounds = getattr(settings, "histogram_buckets_us", DEFAULT_HISTOGRAM_BUCKETS_US)
        metrics = SplitMetrics(bounds)
    return SplitBackend(router_variants(cfg), repo, metrics)
