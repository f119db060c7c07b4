"""Header forwarding (``--http-header-forward-pattern`` / ``--grpc-header-forward-pattern``).

As in Triton: each request header (HTTP) or metadata entry (gRPC) whose name the regular
expression finds anywhere in (a search, RE2's ``PartialMatch``), case-insensitively unless the
pattern starts with ``(?-i)``, becomes a string parameter of the inference request, which the
model sees (Python backend: ``request.parameters()``). It applies to the inference RPCs and the
``/infer`` route (Triton 2.51 forwards nothing on ``/generate``). A forwarded header wins over a
request parameter of the same name (Triton sends the model both, the header's last).

tritonlite's own rules, the same on every transport: HTTP names are forwarded in lower case
(header names are case-insensitive; the native HTTP/1.1 layer keeps them lower-cased) and a
header sent twice is forwarded once, its values joined by ", "; gRPC ``-bin`` entries (binary
values) are not forwarded.
"""

from __future__ import annotations

import re
from collections.abc import Mapping, Sequence

from tritonlite.contracts.types import Params
from tritonlite.options import ServerOptions

_CASE_SENSITIVE = "(?-i)"


def compile_pattern(pattern: str, option: str) -> re.Pattern[str]:
    """The flag's pattern as Triton reads it (``(?i)`` put in front); ValueError if invalid."""
    flags = re.IGNORECASE
    if pattern.startswith(_CASE_SENSITIVE):
        pattern, flags = pattern[len(_CASE_SENSITIVE) :], re.RegexFlag(0)
    try:
        return re.compile(pattern, flags)
    except re.error as exc:
        raise ValueError(f"--{option}: invalid regular expression '{pattern}': {exc}") from None


class HeaderForward:
    """One front end's forwarding rule; ``None`` stands for no flag (nothing is forwarded)."""

    __slots__ = ("_regex",)

    def __init__(self, pattern: str, option: str) -> None:
        self._regex = compile_pattern(pattern, option)

    def http(self, headers: Mapping[str, str], params: Params) -> None:
        """Add the matching ``headers`` to ``params``."""
        found: dict[str, str] = {}
        for name, value in headers.items():
            key = name.lower()
            if self._regex.search(key) is not None:
                found[key] = value if key not in found else found[key] + ", " + value
        params.update(found)

    def grpc(self, metadata: Sequence[tuple[str, str | bytes]], params: Params) -> None:
        """Add the matching text entries of ``metadata`` to ``params``."""
        for key, value in metadata:
            if isinstance(value, str) and self._regex.search(key) is not None:
                params[key] = value


def http_forward(options: ServerOptions) -> HeaderForward | None:
    """``--http-header-forward-pattern`` compiled; None without the flag."""
    if not options.http_header_forward_pattern:
        return None
    return HeaderForward(options.http_header_forward_pattern, "http-header-forward-pattern")


def grpc_forward(options: ServerOptions) -> HeaderForward | None:
    """``--grpc-header-forward-pattern`` compiled; None without the flag."""
    if not options.grpc_header_forward_pattern:
        return None
    return HeaderForward(options.grpc_header_forward_pattern, "grpc-header-forward-pattern")
