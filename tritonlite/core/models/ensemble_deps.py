"""An ensemble's place in the repository: its composing models are loaded before it.

Triton's dependency rules, as the repository applies them:

* loading an ensemble first loads each composing model that is not ready (in explicit mode
  this is how composing models get loaded; at startup in the other modes they were loaded
  first); a load already in progress is waited for, not repeated;
* a composing model that is not in the repository, or that fails to load, fails the ensemble
  with Triton's message while every other model stays as it is; so does a circular chain of
  ensembles, a required version that is not loaded, or a config that does not fit its steps'
  models (``ensemble_config.validate_composing``);
* an ensemble with a decoupled composing model is decoupled itself (Triton sets its
  ``model_transaction_policy { decoupled: true }``): it answers over the streaming API only;
* unloading an ensemble with ``unload_dependents`` also unloads the composing models that were
  loaded only for an ensemble and that no other loaded ensemble uses.
"""

from __future__ import annotations

import contextvars
import logging
import re
from pathlib import Path
from typing import TYPE_CHECKING, Any

from tritonlite.contracts.config import CONFIG_FILENAME
from tritonlite.contracts.config_validate import ENSEMBLE
from tritonlite.contracts.errors import TritonliteError, invalid_arg
from tritonlite.core.models import lifecycle as lc
from tritonlite.core.models.deps import ensure_loaded, ready_versions
from tritonlite.core.models.ensemble_config import validate_composing

if TYPE_CHECKING:
    from tritonlite.core.models.repository import ModelRepository

log = logging.getLogger("tritonlite")

# The ensembles whose loads led to the current one, outermost first (one chain per task).
_chain: contextvars.ContextVar[tuple[str, ...]] = contextvars.ContextVar(
    "tritonlite_ensemble_chain", default=()
)
_PLATFORM_RE = re.compile(r'^\s*platform\s*:\s*"ensemble"', re.MULTILINE)


def is_ensemble(cfg: Any) -> bool:
    return bool(cfg.platform == ENSEMBLE)


def is_ensemble_dir(model_dir: Path | None) -> bool:
    """Whether a model directory's config.pbtxt declares an ensemble (a cheap text check used
    only to order the startup load)."""
    if model_dir is None:
        return False
    try:
        return bool(_PLATFORM_RE.search((model_dir / CONFIG_FILENAME).read_text("utf-8")))
    except (OSError, UnicodeDecodeError):
        return False


def composing_models(cfg: Any) -> list[str]:
    return sorted({s.model_name for s in cfg.ensemble_scheduling.step})


async def load_composing(repo: ModelRepository, cfg: Any, explicit: bool) -> None:
    """Make every composing model of ensemble ``cfg`` ready, then validate ``cfg`` against them.

    ``explicit``: the server is in explicit control mode, where a composing model that is not
    ready is (re)loaded for the ensemble and remembered as loaded only for it.
    """
    name = cfg.name
    deps = composing_models(cfg)
    on_disk = repo.scan()
    missing = [d for d in deps if on_disk.get(d) is None and not ready_versions(repo, d)]
    if missing:
        raise invalid_arg(
            f"ensemble {name} contains models that are not available or "
            f"ambiguous: {', '.join(missing)}"
        )
    chain = _chain.get() + (name,)
    for dep in deps:
        if dep in chain:
            raise invalid_arg(
                f"circular dependency between ensembles: {dep} -> ... -> {chain[-1]} -> {dep}"
            )
    token = _chain.set(chain)
    try:
        for dep in deps:
            await _ensure_loaded(repo, name, dep, explicit)
    finally:
        _chain.reset(token)
    configs: dict[str, Any] = {}
    for step in cfg.ensemble_scheduling.step:
        dep = step.model_name
        ready = ready_versions(repo, dep)
        if step.model_version >= 0 and step.model_version not in ready:
            raise invalid_arg(
                f"ensemble '{name}' depends on '{dep}' whose required version "
                f"{step.model_version} is not loaded."
            )
        model = repo.get(dep, int(step.model_version))
        configs[dep] = model.config
    decoupled = validate_composing(cfg, configs)
    # Triton sets this on every valid ensemble (decoupled when a decoupled step's outputs
    # flow into it); its config shows it.
    cfg.model_transaction_policy.SetInParent()
    cfg.model_transaction_policy.decoupled = decoupled


async def _ensure_loaded(repo: ModelRepository, name: str, dep: str, explicit: bool) -> None:
    loaded, error = await ensure_loaded(repo, dep, explicit)
    if loaded and explicit:
        repo.loaded_for_ensembles.add(dep)
    if error is None:
        return
    if error:
        raise invalid_arg(
            f"ensemble '{name}' depends on '{dep}' which has no loaded version. "
            f"Model '{dep}' loading failed with error: {error}"
        )
    raise invalid_arg(f"ensemble '{name}' depends on '{dep}' which has no loaded version.")


async def unload_composing(repo: ModelRepository, cfg: Any) -> None:
    """After ensemble ``cfg`` was unloaded: unload what was loaded only for ensembles and is
    used by no loaded ensemble any more (recursively, for nested ensembles)."""
    for dep in composing_models(cfg):
        if dep not in repo.loaded_for_ensembles or _used_by_loaded_ensemble(repo, dep):
            continue
        entry = repo.models.get(dep)
        if entry is None or not any(s.model is not None for s in entry.versions.values()):
            continue
        dep_cfg = next(s.model.config for s in entry.versions.values() if s.model is not None)
        repo.loaded_for_ensembles.discard(dep)
        try:
            await repo.unload(dep)
        except TritonliteError as exc:
            log.error(
                "failed to unload '%s' (composing model of '%s'): %s", dep, cfg.name, exc.message
            )
            continue
        if is_ensemble(dep_cfg):
            await unload_composing(repo, dep_cfg)


def _used_by_loaded_ensemble(repo: ModelRepository, dep: str) -> bool:
    for entry in repo.models.values():
        for s in entry.versions.values():
            if s.model is not None and s.state != lc.UNLOADING and is_ensemble(s.model.config):
                if dep in composing_models(s.model.config):
                    return True
    return False
