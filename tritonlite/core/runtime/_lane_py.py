"""The single-request lane: one request that is its own execution, run on the loop at once.

``DirectLane.run`` takes a request that the general path (``InferenceCore._run`` -> the
scheduler's ``enqueue`` -> ``Model._run_one``) would run inline right away, alone -- a model
without batching, or a dynamic batcher with no delay (``scheduling.base.GoesStraight``);
nothing queued, an instance idle and its ``InlinePolicy`` keeping runs on the loop -- and does
what that path does, in one call: validation (a proven header's record; for
a request no decoder proved, a request structure that passed ``validate.prepare`` whole before,
with this request's arrays checked against their shapes; else ``validate.prepare``), the
arrival stamp, the instance's bound session run on the request's own arrays, the response,
the policy's sample, one statistics record (``ModelStats.record_spans``) and the instance back
to idle. Anything else returns None before any of it has happened (the request then takes the
general path, which words every error): a queue, a busy instance (one with a run out on its
thread, ``ModelInstance.pipe``), an instance off the loop or without a bound run, parameters,
shared memory, a raw input, an ensemble step's timing hook, classification, a reshaped output.
A run that raises, or an output the lane cannot frame, gives the instance back untouched and
returns None too (``run_plain``: False, so that its caller skips every lane): the general path
then runs the request once more and answers as it always does (ONNX Runtime's own checks word
the error) -- a request is run in one lane at most.

``DirectLane.run_plain`` is ``run`` for a request that is only its inputs' arrays (the HTTP
JSON lane's: no request object, no response objects): taken only for an input structure
``run`` recorded as passing ``validate.prepare`` whole, with the same run, sample and record.

This is the pure twin; ``_lane_c.pxd`` types it for Cython (``lane.py`` picks).
"""

from __future__ import annotations

import time
from typing import Any

from tritonlite.contracts import datatypes
from tritonlite.contracts.datatypes import Misfit
from tritonlite.contracts.types import InferOutput, InferRequest, InferResponse
from tritonlite.core.tensors import validate

_now = time.monotonic_ns
_SHAPES_MAX = 256  # request structures remembered per lane; the record starts over when full


class DirectLane:
    """The lane of one loaded model version (``Model.lane``); see the module's docstring.

    ``model`` is the ``Model`` (its ``idle`` instances, ``stats``, ``shm``, ``_release``),
    ``scheduler`` its scheduler (a ``GoesStraight``), ``inline_max_ns`` the policy's
    threshold: a run goes on the loop while its instance's recent runs took less.
    """

    def __init__(self, model: Any, scheduler: Any, inline_max_ns: int) -> None:
        sig = model.signature
        self.model = model
        self.at_once = scheduler.at_once
        self.sig = sig
        self.sig_id = id(sig)
        self.idle = model.idle
        self.stats = model.stats
        self.shm = model.shm
        self.name: str = sig.name
        self.version: str = model.version_str
        self.inline_max_ns: int = inline_max_ns
        # Outputs the lane frames: those without a reshape to undo (all, or None).
        self.framed: dict[str, bool] = {n: s.reshape is None for n, s in sig.outputs.items()}
        self.all_outputs: tuple[str, ...] | None = (
            tuple(sig.outputs) if all(self.framed.values()) else None
        )
        # Every output, as (name, binary) for a request that names none: by its
        # ``binary_data_output`` (True: binary; anything else: JSON).
        every = self.all_outputs or ()
        self.every: tuple[tuple[tuple[str, bool], ...], ...] = (
            tuple((n, False) for n in every),
            tuple((n, True) for n in every),
        )
        self.wire: dict[Any, str] = dict(datatypes.NATIVE_WIRE)
        self.last_dtype: Any = None  # the dtype last looked up in ``wire``, and its name
        self.last_wire: str = ""
        self.names: list[str] | None = None  # the bound run's output names ``index`` is for
        self.index: dict[str, int] = {}
        # Request structures (inputs' names, datatypes and shapes; requested outputs' names)
        # that passed ``validate.prepare`` whole, for requests no decoder proved (JSON bodies,
        # gRPC): their batch size. Its checks read nothing else of such a request but its
        # arrays' own shapes and kinds, which each request's arrays are checked for here.
        self.shapes: dict[tuple[Any, ...], int] = {}
        self.taken = 0  # requests this lane answered

    def _ready(self) -> Any:
        """The idle instance the lane would run on now, or None (nothing taken): nothing
        queued, an instance idle with a bound run and no run out on its thread, and its
        policy keeping runs on the loop."""
        if not self.at_once():
            return None
        idle = self.idle
        if not idle:
            return None
        inst = idle[0]
        policy = inst.policy
        if inst.bound_run is None or policy is None or inst.pipe:  # a run out on its thread
            return None
        recent: int = policy.recent_ns
        if recent <= 0 or recent >= self.inline_max_ns:
            return None
        return inst

    def run(self, req: InferRequest) -> InferResponse | None:
        """``req``'s response, or None with nothing done (see the module's docstring).

        Raises what ``validate.prepare`` raises for a request that fails validation, as the
        general path would, before anything else happened."""
        inst = self._ready()
        if inst is None:
            return None
        if req.parameters or req.raw_input is not None or req.on_timing is not None:
            return None
        if req.trace is not None:
            return None
        wanted = req.outputs
        if wanted is not None:
            framed = self.framed
            for w in wanted:
                if w.shm is not None or w.classification or not framed.get(w.name, False):
                    return None
        elif self.all_outputs is None:
            return None
        proven = req.proven
        hit = proven.get(self.sig_id) if proven is not None else None
        if hit is not None and hit[0] is self.sig:
            req.batch_size = hit[1]
        elif proven is None:
            shape_key: list[Any] = []
            fits = True
            for inp in req.inputs:
                data = inp.data
                if data is None:  # shared memory: the general path holds its region
                    return None
                shape = inp.shape
                if type(shape) is not tuple:  # (decoders give tuples: a key must be hashable)
                    return None
                if type(data) is Misfit or data.shape != shape:
                    fits = False
                shape_key.append((inp.name, inp.datatype, shape))
            if wanted is not None:
                for w in wanted:
                    shape_key.append(w.name)
                shape_key.append(len(wanted))
            key = tuple(shape_key)
            size = self.shapes.get(key, 0) if fits else 0
            if size > 0:
                req.batch_size = size
            else:
                proven = {}
                req.proven = proven  # ``prepare`` records a request that passes whole
                validate.prepare(self.sig, req, self.shm)
                hit = proven.get(self.sig_id)
                if hit is not None and hit[0] is self.sig:
                    if len(self.shapes) >= _SHAPES_MAX:
                        self.shapes.clear()
                    self.shapes[key] = hit[1]
        else:
            for inp in req.inputs:
                if inp.data is None:  # shared memory: the general path holds its region
                    return None
            validate.prepare(self.sig, req, self.shm)
        start = _now()  # nothing queued: the request arrives at its execution's start
        req.arrival_ns = start
        feed = {}
        for inp in req.inputs:
            feed[inp.name] = inp.data
        if wanted is None:
            pairs: Any = self.every[req.binary_data_output is True]
        else:
            pairs = [(w.name, w.binary is True) for w in wanted]
        outs = self._execute(inst, feed, pairs, req.batch_size, start, True)
        if outs is False:
            return None
        return InferResponse(self.name, self.version, req.id, outs, {})

    def run_plain(self, key: tuple[Any, ...], feed: dict[str, Any]) -> Any:
        """``run`` for a request that is only its inputs (no id, parameters or requested
        outputs: every output, as JSON), given as ``key`` -- its inputs' ``(name, datatype,
        shape)`` in order, the structure ``run`` records -- and ``feed``, their arrays by
        name, each of its declared shape: ``(model name, version, [(output name, datatype,
        array), ...])``, or None with nothing done, or False when the run raised or gave an
        output the lane cannot frame (nothing recorded: the caller takes the general path at
        once, not ``run``, so that no request is run twice in a lane). Only a structure that
        passed ``validate.prepare`` whole before is taken (so nothing here raises); the
        statistics are ``run``'s."""
        size = self.shapes.get(key, 0)
        if size <= 0 or self.all_outputs is None:
            return None
        inst = self._ready()
        if inst is None:
            return None
        outs = self._execute(inst, feed, self.every[0], size, _now(), False)
        if outs is False:
            return False
        return (self.name, self.version, outs)

    def _execute(
        self,
        inst: Any,
        feed: dict[str, Any],
        pairs: Any,
        batch_size: Any,  # (``Any``: the .pxd types these two as C integers, the flag as a
        start: Any,  # C int; Cython would read ``int`` as a Python int)
        objects: Any,
    ) -> Any:
        """Run ``feed`` on ``inst`` (the idle instance ``_ready`` gave; ``start``: the
        request's arrival, which is its execution's start), then record: the outputs
        ``pairs`` names, as ``InferOutput`` (``objects``) or ``(name, datatype, array)``;
        False, with the instance given back and nothing recorded, when the run raises or an
        output cannot be framed."""
        idle = self.idle
        run, names = inst.bound_run
        if names is not self.names:
            self.index = {n: k for k, n in enumerate(names)}
            self.names = names
        idle.popleft()
        input_end = _now()
        try:
            values = run(names, feed, None)
        except Exception:
            idle.appendleft(inst)
            return False
        infer_end = _now()
        index = self.index
        wire = self.wire
        outs: list[Any] = []
        for name, binary in pairs:
            k = index.get(name, -1)
            if k < 0:
                idle.appendleft(inst)
                return False
            arr = values[k]
            kind = arr.dtype
            if kind is self.last_dtype:  # (a dtype's hash is dear; outputs mostly share one)
                dt = self.last_wire
            else:
                named = wire.get(kind)
                if named is None:
                    idle.appendleft(inst)
                    return False
                dt = self.last_wire = named
                self.last_dtype = kind
            if objects:
                outs.append(InferOutput(name, dt, arr.shape, arr, None, binary))
            else:
                outs.append((name, dt, arr))
        end = _now()
        inst.policy.record(end - start)
        # ``ExecTiming.spans`` of these clocks, read in order: none negative; no queue.
        self.stats.record_spans(
            batch_size, end - start, 0, input_end - start, infer_end - input_end, end - infer_end
        )
        model = self.model
        if model._drained is not None or not self.at_once():
            model._release(inst)  # (the scheduler hears of the instance)
        else:
            idle.append(inst)
        self.taken += 1
        return outs
