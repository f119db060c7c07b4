"""Model version strings from requests, read as Triton reads them."""

from __future__ import annotations

from tritonlite.contracts.errors import invalid_arg
from tritonlite.contracts.names import shown

_VERSIONS: dict[str, int] = {"": -1}  # parsed before: a client sends the same few again


def _stol(text: str) -> int | None:
    """``std::stol`` (Triton reads versions with it): leading whitespace, a sign, then decimal
    digits up to the first other character; None where it throws (no digits, out of range)."""
    i, n = 0, len(text)
    while i < n and text[i] in " \t\n\v\f\r":
        i += 1
    j = i + 1 if i < n and text[i] in "+-" else i
    k = j
    while k < n and "0" <= text[k] <= "9":
        k += 1
    if k == j or len(text[j:k].lstrip("0")) > 19:  # (no int64 has more digits)
        return None
    value = int(text[i:k])
    return value if -(2**63) <= value < 2**63 else None


def parse_version(text: str) -> int:
    """Wire version string -> int; "" means the server picks (-1). Read as Triton reads it
    (``std::stol``: "1a" is version 1); INVALID_ARG with Triton's messages otherwise."""
    version = _VERSIONS.get(text)
    if version is not None:
        return version
    version = _stol(text)
    if version is None:
        raise invalid_arg(
            f"failed to get model version from specified version string "
            f"'{shown(text)}' (details: stol), version should be an "
            "integral value > 0"
        )
    if version < 0:
        raise invalid_arg(
            f"invalid model version specified '{shown(text)}' , version "
            "should be an integral value > 0"
        )
    if len(_VERSIONS) >= 1024:
        _VERSIONS.clear()
        _VERSIONS[""] = -1
    _VERSIONS[text] = version
    return version
