"""The one rule for names that come from requests and become paths.

A model name from a load or unload request names a directory (``<repository>/<name>``, or
``<fresh temp dir>/<name>`` for a load with ``file:`` overrides), so it must be a single path
component: not empty, no ``/``, no NUL, no leading dot (``.``, ``..`` and the hidden entries
that a repository scan skips, as Triton's does), at most ``NAME_MAX`` bytes in UTF-8. Names in
the repository on disk always pass (a directory entry is one component; the scan skips dot
entries); only names from requests are ever refused.

A ``file:`` override's path is relative to the model directory: components joined by ``/``,
each one a valid file name that is neither ``.`` nor ``..``. Both checks are pure: they look at
the string, never at the disk, and their messages quote only what the client sent.
"""

from __future__ import annotations

from tritonlite.contracts.errors import invalid_arg

NAME_MAX = 255  # bytes in one path component (Linux NAME_MAX)
_SHOWN = 64  # characters of a refused name quoted in the error


def shown(text: str) -> str:
    """``text`` as quoted in an error: control characters escaped, at most 64 characters."""
    out = text.encode("unicode_escape", "backslashreplace").decode("ascii")
    out = out.replace("'", "\\'")
    return out if len(out) <= _SHOWN else out[:_SHOWN] + "..."


def component_problem(part: str, leading_dot: bool = False) -> str | None:
    """Why ``part`` is not one safe path component, or None when it is; ``leading_dot`` allows
    hidden names (never ``.`` or ``..``)."""
    if not part:
        return "must not be empty"
    if "/" in part:
        return "must not contain '/'"
    if "\x00" in part:
        return "must not contain NUL"
    if part in (".", "..") or (part.startswith(".") and not leading_dot):
        return "must not start with '.'"
    try:  # a directory name that is not UTF-8 reaches here surrogate-escaped (os.fsdecode)
        size = len(part.encode("utf-8", "surrogateescape"))
    except UnicodeEncodeError:
        return "must be valid UTF-8"
    if size > NAME_MAX:
        return f"must be at most {NAME_MAX} bytes"
    return None


def check_model_name(name: str, action: str) -> None:
    """Raise INVALID_ARG unless ``name`` may name a model directory; ``action`` is the
    request's verb ("load", "unload") for the message, in Triton's "failed to load 'x'" shape."""
    problem = component_problem(name) if isinstance(name, str) else "must be a string"
    if problem is not None:
        raise invalid_arg(
            f"failed to {action} '{shown(str(name))}', invalid model name: "
            f"a model name is one directory name and {problem}"
        )


def check_override_path(rel: str) -> tuple[str, ...]:
    """The components of a ``file:`` override path; INVALID_ARG unless it stays inside the
    model directory (relative, no empty, ``.`` or ``..`` component, no backslash, no NUL)."""
    parts = tuple(rel.split("/"))
    # a hidden file is fine inside the model directory (.gitkeep); "." and ".." are not
    if "\\" in rel or any(component_problem(p, leading_dot=True) for p in parts):
        raise invalid_arg(
            f"invalid file override path '{shown(rel)}': must stay inside the model directory"
        )
    return parts
