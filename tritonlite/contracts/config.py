"""Model configuration: config.pbtxt -> ``pb.ModelConfig``, completed the way Triton completes it.

``load_model_config`` is the whole load-time pipeline, in Triton's order:

1. parse ``config.pbtxt`` (protobuf text format, strict) or the load request's JSON override;
2. ``resolve_platform``: Triton core's auto-fill of name, platform, backend and default model
   file name, which runs even with auto-complete disabled (PROTOCOL.md §3.2);
3. backend auto-complete when enabled: the completer the caller's registry holds for the
   resolved backend (``tritonlite.backends.AUTO_COMPLETERS``: ONNX Runtime's
   ``AutoCompleteConfig``, the python backend's ``auto_complete_config`` hook);
4. ``normalize``: Triton's ``NormalizeModelConfig`` + ``NormalizeInstanceGroup`` defaults;
5. ``validate`` (``config_validate``): Triton's ``ValidateModelConfig`` /
   ``ValidateModelIOConfig`` / ``ValidateInstanceGroup`` checks, with Triton's messages.

Rendering to JSON lives in ``config_json`` and is re-exported here. Every function raises
``TritonliteError`` (INVALID_ARG) for a bad config; none of them logs on success.
"""

from __future__ import annotations

import logging
import re
from collections.abc import Callable, Mapping
from pathlib import Path
from typing import Any, TypeAlias

from google.protobuf import text_format

from tritonlite._proto import pb
from tritonlite.contracts.config_json import parse_json, render_json, render_json_bytes
from tritonlite.contracts.config_validate import (
    ENSEMBLE,
    KIND_AUTO,
    KIND_CPU,
    KIND_GPU,
    KNOWN_BACKENDS,
    ModelConfig,
    validate,
)
from tritonlite.contracts.errors import TritonliteError, invalid_arg

__all__ = [
    "CONFIG_FILENAME",
    "AutoCompleteError",
    "AutoCompleter",
    "instance_names",
    "load_model_config",
    "normalize",
    "parse_json",
    "parse_pbtxt",
    "render_json",
    "render_json_bytes",
    "resolve_platform",
    "select_versions",
    "version_dirs",
]

log = logging.getLogger(__name__)

# A backend's auto-complete: (config after platform resolution, model directory, the server's
# --backend-config default-max-batch-size). Changes the config in place; raises TritonliteError.
AutoCompleter: TypeAlias = Callable[[Any, Path, int], None]


class AutoCompleteError(TritonliteError):
    """A backend's auto-complete failed in its model code (in Triton, each version's load
    fails with it, as INTERNAL)."""


CONFIG_FILENAME = "config.pbtxt"

_PLATFORM_BACKEND = {p: b for b, (p, _) in KNOWN_BACKENDS.items() if p}
# tritonlite's A/B router (scheduling/split.py): no model file; the repository builds it.
_PLATFORM_BACKEND["tritonlite_split"] = "tritonlite_split"
_FILE_BACKEND = {f: b for b, (_, f) in KNOWN_BACKENDS.items()}
# Triton's detection order; True when the default file may also be a directory.
_DETECT = (("model.plan", False), ("model.onnx", True), ("model.pt", False), ("model.py", True))
# Triton's SetDefaultInstanceCount: these backends get 2 instances per CPU group.
_TWO_CPU_INSTANCES = frozenset({"onnxruntime", "tensorflow"})

_VERSION_RE = re.compile(r"[1-9][0-9]*")


def parse_pbtxt(text: str, source: str) -> ModelConfig:
    """Parse protobuf text format into a ``pb.ModelConfig``; unknown fields are errors.

    Parameters
    ----------
    text
        The contents of a config.pbtxt.
    source
        What to call the text in the error message (normally its path).

    Raises
    ------
    TritonliteError
        INVALID_ARG ``failed to parse <source>: <parser detail>``.
    """
    cfg = pb.ModelConfig()
    try:
        text_format.Parse(text, cfg)
    except text_format.ParseError as exc:
        raise invalid_arg(f"failed to parse {source}: {exc}") from None
    return cfg


def version_dirs(model_dir: Path) -> list[int]:
    """The model's version directories, ascending.

    Only directories whose names are positive integers without leading zeros count (Triton
    ignores ``0``, ``01``, ``latest`` ...).
    """
    try:
        entries = list(Path(model_dir).iterdir())
    except OSError:
        return []
    return sorted(int(p.name) for p in entries if _VERSION_RE.fullmatch(p.name) and p.is_dir())


def select_versions(cfg: ModelConfig, available: list[int]) -> list[int]:
    """The versions the config's version policy loads out of ``available``, ascending.

    ``latest {num_versions: N}`` takes the N highest (none when N is 0, as in Triton), ``all``
    takes every one, ``specific`` takes the listed ones that exist: like Triton, a listed version
    without a directory is logged and skipped rather than failing the model. No policy at all
    means latest 1.
    """
    have = sorted(set(available))
    policy = cfg.version_policy
    choice = policy.WhichOneof("policy_choice") if cfg.HasField("version_policy") else None
    if choice == "all":
        return have
    if choice == "specific":
        chosen = []
        for v in sorted(set(policy.specific.versions)):
            if v in have:
                chosen.append(int(v))
            else:
                log.error(
                    "version %d is specified for model '%s', but the version directory is "
                    "not present",
                    v,
                    cfg.name,
                )
        return chosen
    n = int(policy.latest.num_versions) if choice == "latest" else 1
    return have[len(have) - n :] if n > 0 else []


def _detect_backend(model_dir: Path) -> str | None:
    for v in version_dirs(model_dir):
        vdir = Path(model_dir, str(v))
        for filename, dir_ok in _DETECT:
            p = vdir / filename
            if p.is_file() or (dir_ok and p.is_dir()):
                return _FILE_BACKEND[filename]
    return None


def resolve_platform(cfg: ModelConfig, model_dir: Path, *, model_name: str | None = None) -> None:
    """Fill name, platform, backend and default model file name (Triton's core auto-fill).

    Parameters
    ----------
    cfg
        The parsed config; changed in place.
    model_dir
        ``<repo>/<model>``; its version directories are searched (ascending) for a default
        model file when the config names neither platform, backend nor file name.
    model_name
        The model's name; defaults to ``model_dir.name`` (differs for load requests whose
        files live in a temporary directory).

    Notes
    -----
    Pairs: onnxruntime_onnx/onnxruntime (model.onnx, a file or a directory), pytorch_libtorch/
    pytorch (model.pt), tensorrt_plan/tensorrt (model.plan), python with platform "" (model.py),
    ensemble with no backend. Unlike Triton, which inspects only the first version directory in
    string order, every version directory is tried; and ``default_model_filename`` is filled
    for every known backend (Triton leaves it empty when ``platform: "pytorch_libtorch"`` is
    given explicitly — the backend then uses model.pt anyway).

    Raises
    ------
    TritonliteError
        INVALID_ARG when the config's name differs from the model's, the platform is unknown,
        or nothing tells which backend serves the model.
    """
    name = model_name if model_name is not None else Path(model_dir).name
    if not cfg.name:
        cfg.name = name
    elif cfg.name != name:
        raise invalid_arg(
            f"unexpected directory name '{name}' for model '{cfg.name}', directory name must "
            "equal model name"
        )
    if cfg.platform == ENSEMBLE:
        return
    if not cfg.backend:
        if cfg.platform:
            backend = _PLATFORM_BACKEND.get(cfg.platform)
            if backend is None:
                raise invalid_arg(f"unexpected platform type '{cfg.platform}' for {cfg.name}")
        elif cfg.default_model_filename:
            backend = _FILE_BACKEND.get(cfg.default_model_filename)
        else:
            backend = _detect_backend(Path(model_dir))
        if backend is None:
            raise invalid_arg(
                f"unable to determine platform and backend for model '{cfg.name}': the config "
                "sets neither 'platform' nor 'backend' and no version directory holds "
                "model.onnx, model.pt, model.plan or model.py"
            )
        cfg.backend = backend
    known = KNOWN_BACKENDS.get(cfg.backend)
    if known is not None:
        platform, filename = known
        if not cfg.platform:
            cfg.platform = platform
        if not cfg.default_model_filename:
            cfg.default_model_filename = filename


def normalize(cfg: ModelConfig, *, gpu_count: int = 0) -> None:
    """Apply Triton's normalization defaults in place (what ``/config`` shows).

    Parameters
    ----------
    cfg
        Config after platform resolution and auto-complete.
    gpu_count
        GPUs usable by this server (device ids ``0 .. gpu_count-1``); pass 0 when the model's
        backend cannot use them (e.g. no CUDA execution provider), so KIND_AUTO becomes CPU.

    Notes
    -----
    ``version_policy`` defaults to ``latest {num_versions: 1}``; ``dynamic_batching`` and
    ``sequence_batching.oldest`` without preferred sizes get ``[max_batch_size]`` when it is
    > 0; ``sequence_batching.max_sequence_idle_microseconds`` 0 becomes 1 s. Models without
    ``ensemble_scheduling`` get ``optimization.{input,output}_pinned_memory.enable: true``
    when unset and instance groups per Triton's ``NormalizeInstanceGroup``: no group -> one
    group named ``<model>``; an unnamed group at index i -> ``<model>_<i>``; KIND_AUTO ->
    KIND_GPU when GPUs exist and every listed gpu is one of them, else KIND_CPU; count < 1 ->
    1, or 2 for KIND_CPU groups of onnxruntime (and tensorflow) models; KIND_GPU without
    ``gpus`` -> every GPU.
    """
    if not cfg.HasField("version_policy"):
        cfg.version_policy.latest.num_versions = 1
    mbs = int(cfg.max_batch_size)
    if cfg.HasField("dynamic_batching") and not cfg.dynamic_batching.preferred_batch_size:
        if mbs > 0:
            cfg.dynamic_batching.preferred_batch_size.append(mbs)
    if cfg.HasField("sequence_batching"):
        seq = cfg.sequence_batching
        if seq.max_sequence_idle_microseconds == 0:
            seq.max_sequence_idle_microseconds = 1_000_000
        if seq.HasField("oldest") and not seq.oldest.preferred_batch_size and mbs > 0:
            seq.oldest.preferred_batch_size.append(mbs)
    if cfg.HasField("ensemble_scheduling"):
        return
    opt = cfg.optimization
    if not opt.HasField("input_pinned_memory"):
        opt.input_pinned_memory.enable = True
    if not opt.HasField("output_pinned_memory"):
        opt.output_pinned_memory.enable = True

    gpus = list(range(max(gpu_count, 0)))
    if not cfg.instance_group:
        cfg.instance_group.add().name = cfg.name
    for index, group in enumerate(cfg.instance_group):
        if not group.name:
            group.name = f"{cfg.name}_{index}"
        if group.kind == KIND_AUTO:
            on_gpu = bool(gpus) and all(0 <= g < len(gpus) for g in group.gpus)
            group.kind = KIND_GPU if on_gpu else KIND_CPU
        if group.count < 1:
            two = group.kind == KIND_CPU and cfg.backend in _TWO_CPU_INSTANCES
            group.count = 2 if two else 1
        if group.kind == KIND_GPU and not group.gpus:
            group.gpus.extend(gpus)


def instance_names(cfg: ModelConfig) -> list[tuple[str, str, int, int]]:
    """Every model instance as ``(group name, instance name, kind, device id)``.

    Triton names instance k of a group ``<group>_<k>`` (``add_sub_0_0``: group ``add_sub_0``,
    first instance). A KIND_GPU group makes ``count`` instances on each of its gpus, the ones
    on different devices sharing a name; other kinds use device 0. Ensembles have none.
    """
    if cfg.HasField("ensemble_scheduling"):
        return []
    out: list[tuple[str, str, int, int]] = []
    for group in cfg.instance_group:
        for k in range(group.count):
            inst = f"{group.name}_{k}"
            if group.kind == KIND_GPU:
                out.extend((group.name, inst, KIND_GPU, int(g)) for g in group.gpus)
            else:
                out.append((group.name, inst, int(group.kind), 0))
    return out


def load_model_config(
    model_dir: Path,
    *,
    auto_complete: bool = True,
    default_max_batch_size: int = 4,
    override_json: str | None = None,
    gpu_count: int | Callable[[str], int] = 0,
    auto_completers: Mapping[str, AutoCompleter] | None = None,
    model_name: str | None = None,
) -> ModelConfig:
    """Read, complete, normalize and validate one model's config.

    Parameters
    ----------
    model_dir
        ``<repo>/<model>`` (or the temporary directory of a load request's file overrides).
    auto_complete
        Triton's auto-complete (off with ``--disable-auto-complete-config``). Platform
        resolution and normalization run either way.
    default_max_batch_size
        Passed to the backend's auto-complete (ONNX Runtime's ``max_batch_size`` for models
        that can batch).
    override_json
        The load request's ``config`` JSON; used instead of config.pbtxt.
    gpu_count
        GPUs usable by the model's backend (see ``normalize``), or a function of the backend
        name giving it (called once the backend is known).
    auto_completers
        Backend name -> auto-complete (the backends' registry, ``AUTO_COMPLETERS``): the
        resolved backend's entry is called as ``completer(cfg, model_dir,
        default_max_batch_size)`` when ``auto_complete`` is true; it changes ``cfg`` in place
        and raises ``TritonliteError`` on a conflict. None or a missing entry: no backend
        auto-complete.
    model_name
        The model's name when it is not ``model_dir.name``.

    Returns
    -------
    pb.ModelConfig
        The normalized, validated config (what ``/config`` renders).

    Raises
    ------
    TritonliteError
        INVALID_ARG for unparsable, incomplete or invalid configs, or a missing config.pbtxt
        with auto-complete disabled.

    """
    model_dir = Path(model_dir)
    name = model_name if model_name is not None else model_dir.name
    if override_json is not None:
        cfg = parse_json(override_json)
    else:
        path = model_dir / CONFIG_FILENAME
        if path.is_file():
            try:
                text = path.read_text(encoding="utf-8")
            except (OSError, UnicodeDecodeError) as exc:
                raise invalid_arg(f"failed to read {path}: {exc}") from None
            cfg = parse_pbtxt(text, str(path))
        elif not auto_complete:
            # Triton's words, plus why the file is needed.
            raise invalid_arg(
                f"failed to open text file for read {path}: No such file or directory "
                f"(model '{name}' needs a {CONFIG_FILENAME} when model configuration "
                "auto-complete is disabled)"
            )
        else:
            cfg = pb.ModelConfig()
    resolve_platform(cfg, model_dir, model_name=name)
    if auto_complete and auto_completers:
        completer = auto_completers.get(cfg.backend)
        if completer is not None:
            completer(cfg, model_dir, default_max_batch_size)
    gpus = gpu_count(cfg.backend) if callable(gpu_count) else gpu_count
    normalize(cfg, gpu_count=gpus)
    validate(cfg, gpu_count=gpus)
    return cfg
