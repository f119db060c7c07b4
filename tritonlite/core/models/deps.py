"""Models that other models load first: what ensembles (their composing models) and A/B
routers (their variants) share -- which versions of a dependency are ready, why one is not,
and making it ready before the model that needs it."""

from __future__ import annotations

from typing import TYPE_CHECKING

from tritonlite.contracts.errors import TritonliteError

if TYPE_CHECKING:
    from tritonlite.core.models.repository import ModelRepository


def ready_versions(repo: ModelRepository, name: str) -> list[int]:
    entry = repo.models.get(name)
    if entry is None:
        return []
    return [v for v, s in entry.versions.items() if s.is_ready]


def load_reason(repo: ModelRepository, name: str) -> str:
    """Why a version of ``name`` did not load (its first recorded reason), "" when none did."""
    entry = repo.models.get(name)
    if entry is None:
        return ""
    return next((s.reason for _, s in sorted(entry.versions.items()) if s.reason), "")


async def ensure_loaded(repo: ModelRepository, dep: str, explicit: bool) -> tuple[bool, str | None]:
    """Make ``dep`` ready when it can be: wait for a load of it in progress (at startup, or for
    another model), then load it if the server is in explicit mode or nothing tried yet.

    Returns whether it was loaded here, and None once ``dep`` is ready, else why not: the
    load's error, or the reason its versions record ("" when there is none).
    """
    entry = repo.models.get(dep)
    if entry is not None and entry.lock.locked():
        async with entry.lock:
            pass
    if ready_versions(repo, dep):
        return False, None
    attempted = entry is not None and bool(entry.versions)
    loaded, error = False, ""
    if explicit or not attempted:
        loaded = True
        try:
            await repo.load(dep)
        except TritonliteError as exc:
            error = exc.message
    if ready_versions(repo, dep):
        return loaded, None
    return loaded, error or load_reason(repo, dep)
