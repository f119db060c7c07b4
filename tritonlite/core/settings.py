"""Trace and logging settings: validated, stored and echoed (Triton's trace/logging extensions).

Values keep the wire forms the extensions use: trace settings are strings (``trace_level`` a list
of strings), logging settings are typed.
"""

from __future__ import annotations

import logging
from typing import Any

from tritonlite.errors import invalid_arg, unsupported

_TRACE_DEFAULTS: dict[str, Any] = {
    "trace_level": ["OFF"],
    "trace_rate": "1000",
    "trace_count": "-1",
    "log_frequency": "0",
    "trace_file": "",
    "trace_mode": "triton",
}
_TRACE_LEVELS = ("OFF", "TIMESTAMPS", "TENSORS")


def _check_int(key: str, value: Any, minimum: int) -> str:
    try:
        n = int(str(value), 10)
    except ValueError:
        raise invalid_arg(f"Unable to parse '{key}', got: {value}") from None
    if n < minimum:
        raise invalid_arg(f"Unable to parse '{key}', got: {value}")
    return str(n)


class TraceSettings:
    """Global trace settings plus per-model overrides."""

    def __init__(self) -> None:
        self._global: dict[str, Any] = dict(_TRACE_DEFAULTS)
        self._models: dict[str, dict[str, Any]] = {}

    def get(self, model: str = "") -> dict[str, Any]:
        out = dict(self._global)
        out.update(self._models.get(model, {}))
        return out

    def update(self, changes: dict[str, Any], model: str = "") -> dict[str, Any]:
        """Apply ``changes`` (value None clears a model's override); return the new settings."""
        target = self._models.setdefault(model, {}) if model else self._global
        staged = dict(target)
        for key, value in changes.items():
            if key == "trace_file":
                raise unsupported("trace file location can not be updated through network protocol")
            if key not in _TRACE_DEFAULTS or key == "trace_mode":
                raise invalid_arg(f"unknown trace setting '{key}'")
            if value is None:
                if not model:
                    staged[key] = _TRACE_DEFAULTS[key]
                else:
                    staged.pop(key, None)
                continue
            if key == "trace_level":
                levels = value if isinstance(value, list) else [value]
                if not levels or not all(isinstance(x, str) and x in _TRACE_LEVELS for x in levels):
                    raise invalid_arg(f"Unable to parse 'trace_level', got: {value}")
                if "OFF" in levels and len(levels) > 1:
                    raise invalid_arg("Unable to parse 'trace_level', 'OFF' must be set alone")
                staged[key] = list(levels)
            elif key == "trace_count":
                staged[key] = _check_int(key, value, -1)
            else:
                staged[key] = _check_int(key, value, 0)
        target.clear()
        target.update(staged)
        return self.get(model)


class LogSettings:
    """The logging extension's settings; ``log_verbose_level`` drives the package logger."""

    def __init__(self, verbose: int = 0, info: bool = True, warning: bool = True,
                 error: bool = True, fmt: str = "default") -> None:
        self._s: dict[str, Any] = {
            "log_file": "", "log_info": info, "log_warning": warning, "log_error": error,
            "log_verbose_level": verbose, "log_format": fmt,
        }
        self._apply()

    def get(self) -> dict[str, Any]:
        return dict(self._s)

    def update(self, changes: dict[str, Any]) -> dict[str, Any]:
        staged = dict(self._s)
        for key, value in changes.items():
            if key == "log_file":
                if value is not None and value != "":
                    raise unsupported("log file location can not be updated through network protocol")
                continue
            if key in ("log_info", "log_warning", "log_error"):
                if not isinstance(value, bool):
                    raise invalid_arg(f"expect boolean for '{key}'")
            elif key == "log_verbose_level":
                if isinstance(value, bool) or not isinstance(value, int) or value < 0:
                    raise invalid_arg("expect unsigned integer for 'log_verbose_level'")
            elif key == "log_format":
                if value not in ("default", "ISO8601"):
                    raise invalid_arg(
                        f"invalid argument for log_format, got: {value}. "
                        "Valid values are: 'default', 'ISO8601'"
                    )
            else:
                raise invalid_arg(f"unknown logging setting '{key}'")
            staged[key] = value
        self._s = staged
        self._apply()
        return self.get()

    def _apply(self) -> None:
        s = self._s
        level = logging.DEBUG if s["log_verbose_level"] > 0 else (
            logging.INFO if s["log_info"] else logging.WARNING if s["log_warning"]
            else logging.ERROR if s["log_error"] else logging.CRITICAL)
        logging.getLogger("tritonlite").setLevel(level)
