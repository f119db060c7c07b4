"""A load request's ``file:`` overrides: checked, written into a fresh temporary directory
(``<temp>/<model name>``, so the model keeps its name) and removed with it.

Nothing is written or followed outside that directory: the name and every path are checked
first (``names``), each file is created with ``O_EXCL | O_NOFOLLOW``. Errors quote the
client's paths, never the server's.
"""

from __future__ import annotations

import base64
import errno
import os
import shutil
import tempfile
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from tritonlite.contracts import names
from tritonlite.contracts.errors import ErrorCode, TritonliteError, invalid_arg


@dataclass(frozen=True, slots=True)
class OverrideDir:
    """Where a load's ``file:`` overrides live: ``root`` is the fresh temp dir this server made
    (all that removal ever touches), ``model_dir`` is ``root/<model name>``."""

    root: Path
    model_dir: Path


_OVERRIDE_PREFIX = "tritonlite-override-"
# Errors of writing an override that the request's own file layout causes (a file where a
# directory is wanted, a name the filesystem refuses); anything else is the server's.
_CLIENT_ERRNOS = frozenset(
    {errno.EEXIST, errno.ENOTDIR, errno.EISDIR, errno.ENAMETOOLONG, errno.EINVAL, errno.EILSEQ}
)


def check_override_files(name: str, files: dict[str, bytes]) -> dict[tuple[str, ...], bytes]:
    """The overrides by path components; INVALID_ARG for a bad model name or file path. Pure:
    a load checks everything it was sent before it touches the disk."""
    names.check_model_name(name, "load")
    return {names.check_override_path(rel): content for rel, content in files.items()}


def write_override_files(name: str, files: dict[str, bytes]) -> OverrideDir:
    """Write ``file:`` overrides into ``<fresh temp dir>/<name>`` (so the model keeps its own
    name); remove them with ``remove_override_dir``.

    The name and every path are checked first (``names``); then each file is created with
    ``O_EXCL | O_NOFOLLOW`` in a directory whose resolved path must lie under the fresh root,
    so nothing is written, or followed, outside it. Errors quote the client's paths, never the
    server's.
    """
    checked = check_override_files(name, files)
    root = Path(tempfile.mkdtemp(prefix=_OVERRIDE_PREFIX)).resolve()
    out = OverrideDir(root, root / name)
    try:
        if out.model_dir.parent != root:
            raise invalid_arg(f"failed to load '{names.shown(name)}', invalid model name")
        out.model_dir.mkdir()
        for parts, content in checked.items():
            _write_one(out.model_dir, parts, content)
    except BaseException:
        remove_override_dir(out)
        raise
    return out


def _write_one(model_dir: Path, parts: tuple[str, ...], content: bytes) -> None:
    rel = "/".join(parts)
    bad = invalid_arg(
        f"invalid file override path '{names.shown(rel)}': must stay inside the model directory"
    )
    parent = model_dir
    try:
        for part in parts[:-1]:
            parent = parent / part
            if parent.is_symlink():
                raise bad
            if not parent.is_dir():
                parent.mkdir()
        if parent.resolve() != parent or not parent.is_relative_to(model_dir):
            raise bad
        fd = os.open(
            parent / parts[-1],
            os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW | os.O_CLOEXEC,
            0o600,
        )
        with os.fdopen(fd, "wb") as f:
            f.write(content)
    except OSError as exc:
        reason = exc.strerror or type(exc).__name__
        if exc.errno in _CLIENT_ERRNOS or exc.errno == errno.ELOOP:
            raise invalid_arg(
                f"unable to write file override '{names.shown(rel)}': {reason}"
            ) from None
        raise TritonliteError(
            ErrorCode.INTERNAL, f"unable to write file override '{names.shown(rel)}': {reason}"
        ) from None


def remove_override_dir(override: OverrideDir) -> None:
    """Remove the fresh temp dir of ``write_override_files``, and nothing else."""
    root = override.root
    if root.name.startswith(_OVERRIDE_PREFIX) and not root.is_symlink():
        shutil.rmtree(root, ignore_errors=True)


def decode_override_file(key: str, value: Any) -> tuple[str, bytes]:
    """``file:<path>`` with base64 (HTTP) or raw bytes (gRPC) content -> (path, bytes)."""
    rel = key[len("file:") :]
    if isinstance(value, (bytes, bytearray)):
        return rel, bytes(value)
    if not isinstance(value, str):
        raise invalid_arg(f"load parameter '{key}' must be a string")
    try:
        return rel, base64.b64decode(value, validate=True)
    except ValueError:
        raise invalid_arg(f"unable to decode base64 content of load parameter '{key}'") from None
