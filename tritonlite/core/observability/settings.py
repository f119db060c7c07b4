"""Trace and logging settings (Triton's trace/logging extensions): validated, applied, echoed.

Values keep the wire forms the extensions use: trace settings are strings (``trace_level`` a list
of strings), logging settings are typed. Trace settings drive ``core/trace.py``'s sampler;
logging settings drive the package logger's level and line format.
"""

from __future__ import annotations

import logging
from typing import Any, TypeVar

from tritonlite import logs
from tritonlite.contracts.errors import invalid_arg, unsupported
from tritonlite.core.observability.trace import Trace, TraceFile, TraceSetting, TraceWriter

_TRACE_LEVELS = ("OFF", "TIMESTAMPS", "TENSORS")
_TRACE_KEYS = ("trace_level", "trace_rate", "trace_count", "log_frequency")
_V = TypeVar("_V")


def _parse_int(key: str, value: Any, minimum: int) -> int:
    try:
        n = int(str(value), 10)
    except ValueError:
        raise invalid_arg(f"Unable to parse '{key}', got: {value}") from None
    if n < minimum:
        if key == "trace_count":
            raise invalid_arg(f"Unable to parse 'trace_count'. Expecting value >= -1, got:{value}")
        raise invalid_arg(f"Unable to parse '{key}', got: {value}")
    return n


def check_trace_level(levels: Any) -> tuple[str, ...]:
    """Wire trace levels -> tuple; OFF alone; TENSORS is refused as unsupported."""
    if not isinstance(levels, list):
        levels = [levels]
    if not levels or not all(isinstance(x, str) and x in _TRACE_LEVELS for x in levels):
        raise invalid_arg(f"Unable to parse 'trace_level', got: {levels}")
    if "OFF" in levels and len(levels) > 1:
        raise invalid_arg("Expect only one trace level 'OFF' is specified")
    if "TENSORS" in levels:
        raise unsupported("trace level TENSORS is not supported by tritonlite (TIMESTAMPS is)")
    return tuple(dict.fromkeys(levels))


class TraceSettings:
    """Global trace settings plus per-model overrides, and the sampler every request asks.

    Follows tritonserver's TraceManager: a model setting inherits each value it does not
    specify from the global setting (and follows later global updates); clearing a value
    (None) makes it inherit again, and a model with no value of its own uses the global
    setting. ``trace_count`` shows what is left to sample. ``enabled`` is the one cheap check
    the request path makes. Used on the event loop only.
    """

    def __init__(
        self,
        level: tuple[str, ...] = ("OFF",),
        rate: int = 1000,
        count: int = -1,
        log_frequency: int = 0,
        file: str = "",
    ) -> None:
        self._writer = TraceWriter()
        self._files: dict[str, TraceFile] = {}
        f = self._file(file)
        self._default = TraceSetting(level, rate, count, log_frequency, f)
        self._global = TraceSetting(level, rate, count, log_frequency, f)
        self._models: dict[str, TraceSetting] = {}
        self._fallback_used: set[str] = set()
        self.enabled = self._global.valid

    def _file(self, name: str) -> TraceFile:
        if name not in self._files:
            self._files[name] = TraceFile(name, self._writer)
        return self._files[name]

    def _refresh(self) -> None:
        self.enabled = self._global.valid or any(s.valid for s in self._models.values())

    def sample(self, model_name: str, model_version: int, request_id: str) -> Trace | None:
        """Count one request for ``model_name``; its Trace when it is to be traced."""
        setting = self._models.get(model_name, self._global)
        trace = setting.sample(model_name, model_version, request_id)
        if trace is not None and setting.count == 0:
            self._refresh()
        return trace

    def get(self, model: str = "") -> dict[str, Any]:
        return self._models.get(model, self._global).to_dict() if model else self._global.to_dict()

    def update(self, changes: dict[str, Any], model: str = "") -> dict[str, Any]:
        """Apply ``changes`` (wire values; None clears); return the resulting settings."""
        new: dict[str, Any] = {}
        cleared: set[str] = set()
        for key, value in changes.items():
            if key == "trace_file":
                raise unsupported("trace file location can not be updated through network protocol")
            if key not in _TRACE_KEYS:
                raise invalid_arg(f"unknown trace setting '{key}'")
            if value is None:
                cleared.add(key)
            elif key == "trace_level":
                new[key] = check_trace_level(value)
            else:
                new[key] = _parse_int(key, value, -1 if key == "trace_count" else 0)
        self._update(model, new, cleared)
        if not model:
            for name in sorted(self._fallback_used):
                self._update(name, {}, set())
        self._refresh()
        return self.get(model)

    def _update(self, model: str, new: dict[str, Any], cleared: set[str]) -> None:
        current = self._models.get(model) if model else self._global
        fallback = self._global if model else self._default
        specified: set[str] = set()

        # A value set now wins, then the value this setting held explicitly, then the fallback's.
        def pick(key: str, held: _V | None, inherited: _V) -> _V:
            if key in cleared:
                return inherited
            if key in new:
                specified.add(key)
                value: _V = new[key]
                return value
            if held is not None and current is not None and key in current.specified:
                specified.add(key)
                return held
            return inherited

        level = pick("trace_level", None if current is None else current.level, fallback.level)
        rate = pick("trace_rate", None if current is None else current.rate, fallback.rate)
        count = pick("trace_count", None if current is None else current.count, fallback.count)
        log_frequency = pick(
            "log_frequency",
            None if current is None else current.log_frequency,
            fallback.log_frequency,
        )
        if model:
            if not specified:
                self._fallback_used.discard(model)
                old = self._models.pop(model, None)
                if old is not None:
                    old.retire()
                return
            self._fallback_used.add(model)  # the file is never a model's own
        setting = TraceSetting(
            level, rate, count, log_frequency, fallback.file, frozenset(specified)
        )
        if not setting.valid and setting.level != ("OFF",):
            raise invalid_arg(f"Attempting to set invalid trace setting :{setting.reason}")
        if model:
            self._models[model] = setting
        else:
            self._global = setting
        if current is not None:
            current.retire()

    def close(self) -> None:
        """Write out every buffered trace and close the trace files (at server exit)."""
        for s in (self._global, *self._models.values()):
            s.flush_at_exit()
        for f in self._files.values():
            f.close()
        self._writer.close()


class LogSettings:
    """The logging extension's settings; ``log_verbose_level`` drives the package logger."""

    def __init__(
        self,
        verbose: int = 0,
        info: bool = True,
        warning: bool = True,
        error: bool = True,
        fmt: str = "default",
        log_file: str = "",
    ) -> None:
        self._s: dict[str, Any] = {
            "log_file": log_file,
            "log_info": info,
            "log_warning": warning,
            "log_error": error,
            "log_verbose_level": verbose,
            "log_format": fmt,
        }
        self._apply()

    def get(self) -> dict[str, Any]:
        return dict(self._s)

    def update(self, changes: dict[str, Any]) -> dict[str, Any]:
        staged = dict(self._s)
        for key, value in changes.items():
            if key == "log_file":
                if value is not None and value != "":
                    raise unsupported(
                        "log file location can not be updated through network protocol"
                    )
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
        level = (
            logging.DEBUG
            if s["log_verbose_level"] > 0
            else (
                logging.INFO
                if s["log_info"]
                else logging.WARNING
                if s["log_warning"]
                else logging.ERROR
                if s["log_error"]
                else logging.CRITICAL
            )
        )
        logging.getLogger("tritonlite").setLevel(level)
        logs.set_iso8601(s["log_format"] == "ISO8601")
