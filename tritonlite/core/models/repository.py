"""The model repository: what is on disk, what is loaded, and loading/unloading it.

Loads build configs, backends and instances on worker threads; the table of versions is
only touched on the event loop. A reload builds the new versions first and swaps them in,
so the old ones serve until the new ones are ready; a failed reload keeps the old ones.

Over 500 lines: the table of versions is one piece of state, changed by loads, reloads,
unloads, polling and ensembles' composing models under one lock per model, and reads best in
one place (``file:`` overrides live in ``overrides``, config parsing in ``contracts.config``).
"""

from __future__ import annotations

import asyncio
import concurrent.futures
import functools
import logging
import os
from collections.abc import Awaitable, Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Protocol

from tritonlite._proto import pb
from tritonlite.backends import AUTO_COMPLETERS, create_backend
from tritonlite.backends.base import InstanceSpec, ModelContext, ServerAccess
from tritonlite.contracts import config as model_config
from tritonlite.contracts import names
from tritonlite.contracts.errors import (
    ErrorCode,
    TritonliteError,
    invalid_arg,
    not_found,
    unavailable,
)
from tritonlite.contracts.signature import Signature
from tritonlite.contracts.timing import ExecTiming
from tritonlite.contracts.types import InferRequest, InferResponse
from tritonlite.core.models import ensemble_deps, split_deps
from tritonlite.core.models import lifecycle as lc
from tritonlite.core.models.lifecycle import VersionState
from tritonlite.core.models.overrides import (
    OverrideDir,
    check_override_files,
    remove_override_dir,
    write_override_files,
)
from tritonlite.core.observability.stats import LatencyFactory
from tritonlite.core.runtime.ensemble import EnsembleBackend, EnsembleModel
from tritonlite.core.runtime.health import HealthSettings
from tritonlite.core.runtime.lane import DirectLane
from tritonlite.core.runtime.model import Model, ModelInstance
from tritonlite.core.runtime.split import SplitBackend, SplitModel
from tritonlite.core.runtime.warmup import WarmupSample, build_samples, record_runs, run_samples
from tritonlite.core.tensors.shm import SharedMemoryManager
from tritonlite.gpu.devices import usable_gpus
from tritonlite.scheduling.ensemble import EnsembleGraph

log = logging.getLogger("tritonlite")

_KINDS = {0: "CPU", 1: "GPU", 2: "CPU", 3: "MODEL"}
_KEPT_MAX = 1024  # lookups ``keep`` holds; the record starts over when full


@dataclass(slots=True)
class ModelEntry:
    name: str
    versions: dict[int, VersionState] = field(default_factory=dict)
    override: OverrideDir | None = None  # the temp dir of a load with file: overrides
    fingerprint: tuple[Any, ...] = ()
    lock: asyncio.Lock = field(default_factory=asyncio.Lock)
    # Its config did not parse: Triton lists the model by name only.
    poll_failed: bool = False


@dataclass(slots=True)
class _Built:
    ctx: ModelContext
    signature: Signature
    backend: Any
    instances: list[ModelInstance]
    warmup: list[WarmupSample]
    warmup_runs: list[tuple[int, ExecTiming]] = field(default_factory=list)  # for the stats


def _fingerprint(model_dir: Path) -> tuple[Any, ...]:
    items = []
    for root, dirs, files in os.walk(model_dir):
        dirs.sort()
        for f in sorted(files):
            p = Path(root, f)
            try:
                st = p.stat()
            except OSError:
                continue
            items.append((str(p.relative_to(model_dir)), st.st_size, st.st_mtime_ns))
    return tuple(items)


def _warm_up(
    instances: list[ModelInstance],
    samples: list[WarmupSample],
    signature: Signature,
    timeout_s: float,
) -> list[tuple[int, ExecTiming]]:
    """Run the warm-up samples on every instance, each on its own thread (Triton does this
    before the model is READY); raises the first failure, else returns the runs."""
    futures = [
        (i, i.call_soon(functools.partial(run_samples, i.impl, samples, signature)))
        for i in instances
    ]
    runs: list[tuple[int, ExecTiming]] = []
    for inst, fut in futures:
        try:
            runs += fut.result(timeout_s if timeout_s > 0 else None)
        except concurrent.futures.TimeoutError:
            inst.abandon()  # hung: closing it must not wait for it
            raise unavailable(
                f"warm-up of instance {inst.spec.name} timed out after {timeout_s:g} s"
            ) from None
    return runs


def _build_version(ctx: ModelContext, health: HealthSettings) -> _Built:
    """Make the backend and every instance of one version (on a worker thread)."""
    signature = Signature.from_config(ctx.config, ctx.model_dir)
    samples = build_samples(ctx.config, ctx.model_dir, signature)
    if ctx.config.HasField("sequence_batching"):
        from tritonlite.scheduling.sequence_state import load_states

        load_states(ctx.config, ctx.model_dir)  # a bad initial_state fails the load, as in Triton
    backend = create_backend(ctx)
    instances: list[ModelInstance] = []
    try:
        for _group, inst_name, kind, device in model_config.instance_names(ctx.config):
            spec = InstanceSpec(inst_name, _KINDS.get(kind, "CPU"), device)
            instances.append(ModelInstance(spec, functools.partial(backend.new_instance, spec)))
        runs = (
            _warm_up(instances, samples, signature, health.execution_timeout_s) if samples else []
        )
    except BaseException:
        for inst in instances:
            inst.close()
        backend.close()
        raise
    if not instances:
        raise unavailable(f"model '{ctx.name}' has no instances")
    return _Built(ctx, signature, backend, instances, samples, runs)


# read_onnx_io's failures, which load_model_config raises from ONNX Runtime auto-complete.
_ONNX_AUTO_COMPLETE_ERRORS = ("unable to read ONNX model ", "unable to find ONNX model file ")


def _is_auto_complete_failure(exc: TritonliteError) -> bool:
    return isinstance(exc, model_config.AutoCompleteError) or exc.message.startswith(
        _ONNX_AUTO_COMPLETE_ERRORS
    )


def _policy_versions(
    model_dir: Path, config_json: str | None, auto_complete: bool
) -> list[int] | None:
    """The versions the config as written selects; None when it cannot be read or parsed."""
    try:
        if config_json is not None:
            raw = model_config.parse_json(config_json)
        else:
            path = model_dir / model_config.CONFIG_FILENAME
            if path.is_file():
                raw = model_config.parse_pbtxt(path.read_text(encoding="utf-8"), str(path))
            elif auto_complete:
                raw = pb.ModelConfig()
            else:
                return None
    except (TritonliteError, OSError, UnicodeDecodeError):
        return None
    return model_config.select_versions(raw, model_config.version_dirs(model_dir))


class RepositoryOptions(Protocol):
    """The server options the repository reads (``core_options.CoreOptions`` extends it)."""

    @property
    def model_repositories(self) -> tuple[Path, ...]: ...
    @property
    def model_control_mode(self) -> str: ...
    @property
    def load_models(self) -> tuple[str, ...]: ...
    @property
    def repository_poll_secs(self) -> float: ...
    @property
    def exit_timeout_secs(self) -> float: ...
    @property
    def auto_complete_config(self) -> bool: ...
    @property
    def default_max_batch_size(self) -> int: ...
    @property
    def backend_execution_timeout_s(self) -> float: ...
    @property
    def health_probe_interval_s(self) -> float: ...


class ModelRepository:
    def __init__(
        self,
        options: RepositoryOptions,
        shm: SharedMemoryManager,
        step_infer: Callable[[InferRequest], Awaitable[InferResponse]],
        latency: LatencyFactory | None = None,
    ) -> None:
        """``step_infer``: the core's admission of an ensemble step (``InferenceCore``);
        ``latency``: each loaded version's latency observer, when the metrics ask for one."""
        self.options = options
        self.step_infer = step_infer
        self.latency = latency
        self.shm = shm
        self.models: dict[str, ModelEntry] = {}
        # Lookups kept by the core (``InferenceCore._lane``): (name, version) -> (model, its
        # lane or None). Emptied at every change of the table of versions (``_changed``: a
        # model added or dropped, a version's state replaced), so that one holds only while
        # ``get`` would answer the same for a model still ready, and keeps no retired model.
        self.kept: dict[tuple[str, int], tuple[Model, DirectLane | None]] = {}
        # Explicit mode: models loaded only as some ensemble's composing models.
        self.loaded_for_ensembles: set[str] = set()
        self.health = HealthSettings(
            options.backend_execution_timeout_s, options.health_probe_interval_s
        )
        self._poll_task: asyncio.Task[None] | None = None
        # What loaded models reach the server through (BLS): set by InferenceCore.start.
        self.server: ServerAccess | None = None

    # -- disk ------------------------------------------------------------------------------
    def scan(self) -> dict[str, Path | None]:
        """Model name -> its directory; None when the name is in several repositories."""
        found: dict[str, Path | None] = {}
        for repo in self.options.model_repositories:
            try:
                children = sorted(repo.iterdir())
            except OSError as exc:
                log.error("failed to read model repository '%s': %s", repo, exc)
                continue
            for child in children:
                if child.is_dir() and not child.name.startswith("."):
                    found[child.name] = None if child.name in found else child
        return found

    def _changed(self) -> None:
        """The table of versions changed: no kept lookup holds."""
        self.kept.clear()

    def keep(self, name: str, version: int, model: Model, lane: DirectLane | None) -> None:
        """Keep the core's lookup of ``name`` ``version`` (``get`` gave ``model``) in ``kept``,
        until the table of versions changes; it is answered while the model is ready, when
        ``get`` answers the same. Not for the highest of several versions, which another
        version's instances coming back to health would change without the table changing."""
        if version < 0 and len(self.models[name].versions) != 1:
            return
        kept = self.kept
        if len(kept) >= _KEPT_MAX:
            kept.clear()
        kept[(name, version)] = (model, lane)

    # -- lookups (event loop) --------------------------------------------------------------
    def get(self, name: str, version: int = -1) -> Model:
        entry = self.models.get(name)
        if entry is None or not entry.versions:
            raise not_found(f"Request for unknown model: '{name}' is not found")
        if version < 0:  # the highest ready version; every request asks, so a plain loop
            state: VersionState | None = None
            best = -1
            for v, st in entry.versions.items():
                if v > best and st.is_ready:
                    state, best = st, v
            if state is None:
                raise not_found(f"Request for unknown model: '{name}' has no available versions")
        else:
            state = entry.versions.get(version)
            if state is None:
                raise not_found(
                    f"Request for unknown model: '{name}' version {version} is not found"
                )
            if not state.is_ready:
                raise unavailable(
                    f"Request for unknown model: '{name}' version {version} is not at ready state"
                )
        assert state.model is not None
        return state.model

    def ready_models(self, name: str = "", version: int = -1) -> list[Model]:
        if name:
            return [self.get(name, version)]
        out = []
        for entry in sorted(self.models.values(), key=lambda e: e.name):
            for v in sorted(entry.versions):
                st = entry.versions[v]
                if st.is_ready and st.model is not None:
                    out.append(st.model)
        return out

    def all_ready(self) -> bool:
        for entry in self.models.values():
            for st in entry.versions.values():
                if st.counts_for_readiness and not st.is_ready:
                    return False
        return True

    def index(self, ready_only: bool) -> list[dict[str, Any]]:
        rows: list[dict[str, Any]] = []
        names = set(self.scan()) | set(self.models)
        for name in sorted(names):
            entry = self.models.get(name)
            if entry is None or not entry.versions or entry.poll_failed:
                if not ready_only:
                    rows.append({"name": name})
                continue
            for v in sorted(entry.versions):
                st = entry.versions[v]
                if ready_only and not st.is_ready:
                    continue
                state = st.state if st.is_ready or st.state != lc.READY else lc.UNAVAILABLE
                row: dict[str, Any] = {"name": name}
                if v >= 0:
                    row["version"] = str(v)
                row["state"] = state.value
                if st.reason:
                    row["reason"] = st.reason
                rows.append(row)
        return rows

    # -- load / unload ---------------------------------------------------------------------
    async def startup(self) -> list[str]:
        """Initial load per the control mode; returns the names that failed."""
        mode = self.options.model_control_mode
        on_disk = self.scan()
        if mode == "explicit":
            load = self.options.load_models
            wanted = list(on_disk) if "*" in load else list(load)
        else:
            wanted = list(on_disk)
        failed: list[str] = []

        async def one(name: str) -> None:
            try:
                await self.load(name)
            except TritonliteError as exc:
                log.error("failed to load '%s': %s", name, exc.message)
                failed.append(name)
            except Exception:  # a fault of ours or a model's: that model fails, the rest serve
                log.exception("failed to load '%s'", name)
                failed.append(name)

        # Composing models and variants first; ensembles and routers then load one at a time
        # (they build no backends, and a circular pair loading at once would wait on each other).
        def depends(n: str) -> bool:
            path = on_disk.get(n)
            return ensemble_deps.is_ensemble_dir(path) or split_deps.is_split_dir(path)

        await asyncio.gather(*(one(n) for n in wanted if not depends(n)))
        for n in wanted:
            if depends(n):
                await one(n)
        if mode == "poll":
            self._poll_task = asyncio.create_task(self._poll())
        return sorted(failed)

    async def load(
        self, name: str, config_json: str | None = None, files: dict[str, bytes] | None = None
    ) -> None:
        """Load (or reload) every version of ``name`` its version policy selects.

        ``name`` and the override paths are checked (``names``) before anything is recorded:
        a refused load leaves no entry behind, and a load that fails before the model's own
        load starts removes the entry it created."""
        names.check_model_name(name, "load")
        if files and config_json is None:
            raise invalid_arg(
                "failed to load '" + name + "', 'config' parameter must be set "
                "when file overrides are given"
            )
        if files:
            check_override_files(name, files)
        self.loaded_for_ensembles.discard(name)
        while True:
            entry = self.models.get(name)
            if entry is None:
                entry = self.models[name] = ModelEntry(name)
                self._changed()
            async with entry.lock:
                if self.models.get(name) is not entry:
                    continue  # dropped by a failed load while this one waited: start over
                await self._load_locked(entry, name, config_json, files)
                return

    async def _load_locked(
        self, entry: ModelEntry, name: str, config_json: str | None, files: dict[str, bytes] | None
    ) -> None:
        # entry.lock is held.
        override: OverrideDir | None = None
        try:
            if files:
                override = await asyncio.to_thread(write_override_files, name, files)
                model_dir = override.model_dir
            else:
                found = self.scan().get(name, ...)
                if found is ...:
                    raise invalid_arg(
                        f"failed to load '{name}', failed to poll from model repository"
                    )
                if found is None:
                    raise invalid_arg(
                        f"failed to load '{name}': model name found in multiple repositories"
                    )
                model_dir = found
        except BaseException:
            if not entry.versions and self.models.get(name) is entry:
                del self.models[name]
                self._changed()
            raise
        try:
            await self._load_into(entry, name, model_dir, config_json)
        except BaseException:
            if override is not None:
                remove_override_dir(override)
            raise
        old_override, entry.override = entry.override, override
        if old_override is not None:
            remove_override_dir(old_override)

    async def _load_into(
        self, entry: ModelEntry, name: str, model_dir: Path, config_json: str | None
    ) -> None:
        opts = self.options
        first_load = not any(s.model is not None for s in entry.versions.values())
        entry.poll_failed = False
        recorded: TritonliteError | None = None  # a failure already in entry.versions
        try:
            try:
                cfg = await asyncio.to_thread(
                    model_config.load_model_config,
                    model_dir,
                    auto_complete=opts.auto_complete_config,
                    default_max_batch_size=opts.default_max_batch_size,
                    override_json=config_json,
                    auto_completers=AUTO_COMPLETERS,
                    model_name=name,
                    gpu_count=usable_gpus,
                )
            except TritonliteError as exc:
                # Triton polls the repository for configs that parse; completing and checking
                # them (backend auto-complete included) is part of each version's load.
                versions = await asyncio.to_thread(
                    _policy_versions, model_dir, config_json, opts.auto_complete_config
                )
                if versions is None:
                    recorded = self._poll_failure(
                        entry, name, exc.message, first_load, config_json is not None
                    )
                elif not versions:
                    raise
                else:
                    code = ErrorCode.INTERNAL if _is_auto_complete_failure(exc) else exc.code
                    recorded = self._fail_versions(
                        entry, name, versions, lc.failed_reason(exc.message, code), first_load
                    )
            if recorded is not None:
                raise recorded
            versions = model_config.select_versions(cfg, model_config.version_dirs(model_dir))
            if not versions:
                raise invalid_arg(
                    f"load failed for model '{name}': at least one version must be available "
                    f"under the version policy of model '{name}'\n"
                )
            if ensemble_deps.is_ensemble(cfg):
                await ensemble_deps.load_composing(self, cfg, opts.model_control_mode == "explicit")
            elif split_deps.is_split(cfg):
                await split_deps.load_variants(self, cfg, opts.model_control_mode == "explicit")
        except TritonliteError as exc:
            if first_load and exc is not recorded:
                self._mark_failed(entry, exc.message.rstrip("\n"))
            raise
        config_text = model_config.render_json_bytes(cfg).decode()
        if first_load:
            entry.versions = {v: VersionState(lc.LOADING) for v in versions}
            self._changed()
        built: dict[int, _Built] = {}
        errors: dict[int, str] = {}

        async def build(v: int) -> None:
            ctx = ModelContext(
                name, v, model_dir, model_dir / str(v), cfg, config_text, self.server
            )
            try:
                if ensemble_deps.is_ensemble(cfg):
                    built[v] = _Built(
                        ctx,
                        Signature.from_config(cfg, model_dir),
                        EnsembleBackend(EnsembleGraph(cfg), self),
                        [],
                        [],
                    )
                    return
                if split_deps.is_split(cfg):
                    backend = split_deps.make_backend(self, cfg)
                    built[v] = _Built(ctx, Signature.from_config(cfg, model_dir), backend, [], [])
                    return
                built[v] = await asyncio.to_thread(_build_version, ctx, self.health)
            except TritonliteError as exc:
                errors[v] = exc.message
            except Exception as exc:  # a backend's own exception types
                log.exception("loading %s version %d", name, v)
                errors[v] = f"{type(exc).__name__}: {exc}"

        await asyncio.gather(*(build(v) for v in versions))
        if errors and not first_load:
            for b in built.values():
                await asyncio.to_thread(self._close_built, b)
            raise invalid_arg(
                lc.load_failed_message(name, {v: lc.failed_reason(m) for v, m in errors.items()})
            )
        old = {v: s for v, s in entry.versions.items() if s.model is not None}
        new_states: dict[int, VersionState] = {}
        for v in versions:
            if v in built:
                b = built[v]
                cls: type[Model] = Model
                if isinstance(b.backend, EnsembleBackend):
                    cls = EnsembleModel
                elif isinstance(b.backend, SplitBackend):
                    cls = SplitModel
                model = cls(
                    b.ctx,
                    b.signature,
                    b.backend,
                    b.instances,
                    self.shm,
                    self.health,
                    b.warmup,
                    self.latency,
                )
                record_runs(model.stats, b.warmup_runs)
                new_states[v] = VersionState(lc.READY, "", model)
                log.info("successfully loaded '%s' version %d", name, v)
            else:
                new_states[v] = VersionState(lc.UNAVAILABLE, lc.failed_reason(errors[v]))
        for v, s in entry.versions.items():
            if v not in new_states and s.model is None and not s.counts_for_readiness:
                new_states[v] = s
        for v in old:
            if v not in new_states:
                new_states[v] = VersionState(lc.UNAVAILABLE, lc.UNLOADED_REASON)
        entry.versions = new_states
        self._changed()
        entry.fingerprint = _fingerprint(model_dir)
        for s in old.values():
            assert s.model is not None
            asyncio.create_task(self._retire(s.model))
        if errors:
            raise invalid_arg(
                lc.load_failed_message(name, {v: lc.failed_reason(m) for v, m in errors.items()})
            )

    def _fail_versions(
        self, entry: ModelEntry, name: str, versions: list[int], reason: str, first_load: bool
    ) -> TritonliteError:
        """Record a failure of every version in ``versions``; returns Triton's answer to raise.
        A failed reload leaves the serving versions as they are."""
        reasons = dict.fromkeys(versions, reason)
        if first_load:
            entry.versions = {v: VersionState(lc.UNAVAILABLE, r) for v, r in reasons.items()}
            self._changed()
        return invalid_arg(lc.load_failed_message(name, reasons))

    def _poll_failure(
        self, entry: ModelEntry, name: str, cause: str, first_load: bool, override: bool
    ) -> TritonliteError:
        """A config that cannot be read or parsed; returns the error to raise. Triton tells
        the client only that the poll failed (INTERNAL; its log has the cause). A ``config``
        override that does not parse is the client's mistake: INVALID_ARG, with the cause
        (the override's own text, no server path) after Triton's words."""
        log.error("failed to read the configuration of '%s': %s", name, cause)
        if first_load:
            self._mark_failed(entry, cause)
            entry.poll_failed = True
        message = f"failed to load '{name}', failed to poll from model repository"
        if override:
            return invalid_arg(f"{message}: {cause}")
        return TritonliteError(ErrorCode.INTERNAL, message)

    def _mark_failed(self, entry: ModelEntry, reason: str) -> None:
        # A model whose config could not be read has no known versions: key -1 keeps the
        # failure (and its reason) visible in the index and in readiness.
        entry.versions = {-1: VersionState(lc.UNAVAILABLE, reason)}
        self._changed()

    @staticmethod
    def _close_built(b: _Built) -> None:
        for inst in b.instances:
            inst.close()
        b.backend.close()

    async def _retire(self, model: Model) -> None:
        await model.drain(self.options.exit_timeout_secs)
        model.stop_scheduling()  # on the loop: a drain that timed out may still be scheduling
        await asyncio.to_thread(model.close)

    async def unload(self, name: str, unload_dependents: bool = False) -> None:
        names.check_model_name(name, "unload")
        entry = self.models.get(name)
        if entry is None or not any(s.model is not None for s in entry.versions.values()):
            raise invalid_arg(
                f"failed to unload '{name}', Model to be unloaded has not been served"
            )
        async with entry.lock:
            models = []
            for v, s in entry.versions.items():
                if s.model is not None:
                    models.append(s.model)
                    entry.versions[v] = VersionState(lc.UNLOADING, "", s.model)
                    self._changed()
            await asyncio.gather(*(self._retire(m) for m in models))
            for v in list(entry.versions):
                if entry.versions[v].model is not None or entry.versions[v].state == lc.UNLOADING:
                    entry.versions[v] = VersionState(lc.UNAVAILABLE, lc.UNLOADED_REASON)
                    self._changed()
            if entry.override is not None:
                remove_override_dir(entry.override)
                entry.override = None
            log.info("successfully unloaded '%s'", name)
        if unload_dependents:
            for m in models:
                if ensemble_deps.is_ensemble(m.config):
                    await ensemble_deps.unload_composing(self, m.config)
                    break

    async def _poll(self) -> None:
        while True:
            await asyncio.sleep(self.options.repository_poll_secs)
            try:
                await self.poll_once()
            except Exception:
                log.exception("repository poll failed")

    async def poll_once(self) -> None:
        on_disk = self.scan()
        for name, entry in list(self.models.items()):
            if name not in on_disk and any(s.model for s in entry.versions.values()):
                await self.unload(name)
        for name, path in on_disk.items():
            if path is None:
                continue
            known = self.models.get(name)
            if (
                known is not None
                and known.override is None
                and known.fingerprint == _fingerprint(path)
            ):
                continue
            try:
                await self.load(name)
            except TritonliteError as exc:
                log.error("poll: failed to load '%s': %s", name, exc.message)

    async def shutdown(self) -> None:
        if self._poll_task is not None:
            self._poll_task.cancel()
        loaded = [n for n, e in self.models.items() if any(s.model for s in e.versions.values())]
        await asyncio.gather(*(self.unload(n) for n in loaded), return_exceptions=True)

    def model_table(self) -> list[tuple[str, str, str]]:
        """(model, version, status) rows for the startup log."""
        rows = []
        for name in sorted(self.models):
            for v, s in sorted(self.models[name].versions.items()):
                shown = "READY" if s.is_ready else f"{s.state.value}: {s.reason}"
                rows.append((name, str(v), shown))
        return rows


def control_error(mode: str) -> TritonliteError:
    """A load or unload in a mode other than explicit: Triton 2.51's words in every such mode
    ("none" included, though nothing polls there), compared with it by test_client_errors."""
    return TritonliteError(
        ErrorCode.UNAVAILABLE, "explicit model load / unload is not allowed if polling is enabled"
    )
