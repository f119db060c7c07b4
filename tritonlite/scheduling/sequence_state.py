"""The tensors the sequence batcher adds to a request (control inputs, implicit state) and the
stand-in backend instance that runs its batches and hands the state outputs back.

``Controls`` turns a config's ``sequence_batching.control_input`` into the per-request tensors
Triton synthesizes (START, END, READY in their ``int32``/``fp32``/``bool`` false-true forms, and
CORRID in its data type); ``load_states`` reads ``sequence_batching.state`` into ``StateSpec``s
with their initial values, checked as Triton checks them when the model loads. Every tensor made
here is shaped ``[1]`` per request (``[1, 1]`` when the model batches) and read-only: the same
arrays are shared by every request and a backend that writes to an input copies it first.
``Interposer`` takes a ``Plan`` per batch: the requests padded with null ones (``null_request``)
and, per real request, the dict its state outputs are written into.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

import numpy as np

from tritonlite._proto import pb
from tritonlite.contracts import datatypes
from tritonlite.contracts.errors import TritonliteError, internal, invalid_arg
from tritonlite.contracts.timing import ExecTiming
from tritonlite.contracts.types import InferInput, InferRequest

if TYPE_CHECKING:
    from tritonlite.backends.base import BackendInstance, Result

State = dict[str, np.ndarray[Any, Any]]  # state input name -> its value

_KIND = pb.ModelSequenceBatching.Control.DESCRIPTOR.enum_types_by_name["Kind"].values_by_name
START = _KIND["CONTROL_SEQUENCE_START"].number
READY = _KIND["CONTROL_SEQUENCE_READY"].number
END = _KIND["CONTROL_SEQUENCE_END"].number
CORRID = _KIND["CONTROL_SEQUENCE_CORRID"].number

# The folder of a model directory that ``initial_state.data_file`` names files in (Triton's).
INITIAL_STATE_FOLDER = "initial_state"


def _wire(data_type: int) -> str:
    return datatypes.config_to_wire(pb.DataType.values_by_number[data_type].name)


def _frozen(arr: np.ndarray[Any, Any]) -> np.ndarray[Any, Any]:
    arr.setflags(write=False)
    return arr


def zeros(wire: str, shape: tuple[int, ...]) -> np.ndarray[Any, Any]:
    """A zero tensor; BYTES zeros are empty strings (Triton zeroes their length prefixes)."""
    if wire == "BYTES":
        arr = np.empty(shape, dtype=object)
        arr.fill(b"")
        return arr
    return np.zeros(shape, dtype=datatypes.numpy_dtype(wire))


@dataclass(frozen=True, slots=True)
class _Flag:
    name: str
    wire: str
    false: np.ndarray[Any, Any]
    true: np.ndarray[Any, Any]


class Controls:
    """The control tensors of one model, built once at load."""

    def __init__(self, cfg: Any) -> None:
        self.batched = int(cfg.max_batch_size) > 0
        self._shape = (1, 1) if self.batched else (1,)
        self._flags: dict[int, _Flag] = {}
        self._corrid: tuple[str, str] | None = None  # (tensor name, wire datatype)
        for ci in cfg.sequence_batching.control_input:
            for c in ci.control:
                if c.kind == CORRID:
                    self._corrid = (ci.name, _wire(c.data_type))
                    continue
                if len(c.int32_false_true):
                    wire, values = "INT32", list(c.int32_false_true)
                elif len(c.fp32_false_true):
                    wire, values = "FP32", list(c.fp32_false_true)
                else:
                    wire, values = "BOOL", list(c.bool_false_true)
                dt = datatypes.numpy_dtype(wire)
                false, true = (_frozen(np.full(self._shape, v, dtype=dt)) for v in values)
                self._flags[c.kind] = _Flag(ci.name, wire, false, true)
        self.names = frozenset(f.name for f in self._flags.values()) | (
            {self._corrid[0]} if self._corrid else set()
        )

    @property
    def corrid_is_string(self) -> bool | None:
        """True/False for a string/integer CORRID control; None when the model has none."""
        return None if self._corrid is None else self._corrid[1] == "BYTES"

    def tensors(self, start: bool, end: bool, ready: bool, corrid: int | str) -> list[InferInput]:
        """The control inputs of one request (START/END/READY flags, then CORRID)."""
        out = []
        for kind, on in ((START, start), (END, end), (READY, ready)):
            flag = self._flags.get(kind)
            if flag is not None:
                data = flag.true if on else flag.false
                out.append(InferInput(flag.name, flag.wire, self._shape, data))
        if self._corrid is not None:
            name, wire = self._corrid
            out.append(InferInput(name, wire, self._shape, self._corrid_tensor(wire, corrid)))
        return out

    def _corrid_tensor(self, wire: str, corrid: int | str) -> np.ndarray[Any, Any]:
        if wire == "BYTES":
            arr = np.empty(self._shape, dtype=object)
            text = corrid if isinstance(corrid, str) else str(corrid) if corrid else ""
            arr.fill(text.encode("utf-8"))
            return _frozen(arr)
        if isinstance(corrid, str):  # the caller refuses these before they are queued
            raise invalid_arg(f"string correlation ID '{corrid}' for an integer CORRID control")
        # Triton copies the id's low bytes into the control's type: the same wrap-around.
        value = np.array([corrid], dtype=np.uint64).astype(datatypes.numpy_dtype(wire))
        return _frozen(value.reshape(self._shape))


@dataclass(frozen=True, slots=True)
class StateSpec:
    """One implicit state: fed as ``input_name``, replaced by the model's ``output_name``."""

    input_name: str
    output_name: str
    wire: str
    initial: np.ndarray[Any, Any]  # with the batch dim [1] when the model batches; read-only


def _initial_from_config(
    state: Any, wire: str, batched: bool, model_dir: Path
) -> np.ndarray[Any, Any]:
    init = state.initial_state[0]
    name = state.input_name
    if init.data_type != state.data_type:
        raise invalid_arg(
            f"The data type used for 'initial_state' field of state '{name}' "
            "does not match the state data type."
        )
    if not init.name:
        raise invalid_arg(
            f"Field 'name' must be set when using initial_state for state input '{name}'."
        )
    if len(init.dims) != len(state.dims):
        raise invalid_arg(
            "Number of dimensions in 'initial_state' doesn't match the size of 'state' "
            f"dimensions for state input '{name}'. {len(init.dims)} != {len(state.dims)}"
        )
    for i_dim, s_dim in zip(init.dims, state.dims):
        if i_dim == -1:
            raise invalid_arg(
                f"'initial_state' field for state input name '{name}' contains variable dimensions."
            )
        if s_dim != -1 and i_dim != s_dim:
            raise invalid_arg(
                f"'initial_state' dim for input name '{name}' doesn't match "
                f"'state' dim description. {i_dim} != {s_dim}"
            )
    shape = ((1,) if batched else ()) + tuple(int(d) for d in init.dims)
    which = init.WhichOneof("state_data")
    if which == "zero_data":
        return zeros(wire, shape)
    if which != "data_file":
        raise invalid_arg(f"initial_state setting expects state'{name}' to have state_data set")
    path = model_dir / INITIAL_STATE_FOLDER / init.data_file
    try:
        raw = path.read_bytes()
    except OSError as exc:
        raise invalid_arg(f"failed to read initial_state file '{path}': {exc.strerror}") from None
    count = datatypes.num_elements(shape)
    if wire == "BYTES":
        return datatypes.deserialize_bytes(raw, count).reshape(shape)
    need = count * datatypes.element_size(wire)
    if need > len(raw):
        raise invalid_arg(
            f"initial_state setting expects {need} bytes, but the data provided "
            f"from {init.data_file}only has {len(raw)} bytes."
        )
    return np.frombuffer(raw[:need], dtype=datatypes.numpy_dtype(wire)).reshape(shape).copy()


def load_states(cfg: Any, model_dir: Path) -> tuple[StateSpec, ...]:
    """The model's implicit states with their initial values (Triton's load-time checks).

    Without ``initial_state`` a state starts as zeros shaped like its ``dims`` with each
    variable dim 1 (plus the batch dim); ``zero_data`` gives zeros of the initial state's
    dims and ``data_file`` reads ``<model dir>/initial_state/<file>`` (raw little-endian
    values, or serialized BYTES elements for TYPE_STRING).

    Raises
    ------
    TritonliteError
        INVALID_ARG, in Triton's words, for a malformed ``initial_state``.
    """
    batched = int(cfg.max_batch_size) > 0
    specs: list[StateSpec] = []
    seen: set[str] = set()
    for state in cfg.sequence_batching.state:
        wire = _wire(state.data_type)
        if len(state.initial_state) > 1:
            raise invalid_arg(
                f"initial_state field for state input '{state.input_name}' must contain exactly "
                f"one or zero element. Found '{len(state.initial_state)}' elements."
            )
        if state.input_name in seen:
            raise invalid_arg(f"State input name '{state.input_name}' specified more than once.")
        seen.add(state.input_name)
        if len(state.initial_state) == 1:
            initial = _initial_from_config(state, wire, batched, model_dir)
        else:
            shape = ((1,) if batched else ()) + tuple(1 if d == -1 else int(d) for d in state.dims)
            initial = zeros(wire, shape)
        specs.append(StateSpec(state.input_name, state.output_name, wire, _frozen(initial)))
    return tuple(specs)


def null_request(
    rep: InferRequest,
    client_inputs: int,
    controls: Controls,
    states: tuple[StateSpec, ...],
    state_shapes: dict[str, tuple[int, ...]],
) -> InferRequest:
    """A "null" request shaped like ``rep`` (Triton's ``CopyAsNull``) for an empty direct slot.

    Its inputs are zeros of ``rep``'s first ``client_inputs`` inputs' shapes, its controls say
    not-ready (CORRID 0), its states are zeros shaped as ``state_shapes``; it asks for no
    outputs and its results are dropped.
    """
    inputs = [
        InferInput(i.name, i.datatype, i.shape, _frozen(zeros(i.datatype, i.shape)))
        for i in rep.inputs[:client_inputs]
    ]
    inputs += controls.tensors(False, False, False, 0)
    for st in states:
        shape = state_shapes[st.input_name]
        inputs.append(InferInput(st.input_name, st.wire, shape, _frozen(zeros(st.wire, shape))))
    return InferRequest(
        model_name=rep.model_name, model_version=rep.model_version, inputs=inputs, outputs=[]
    )


@dataclass(slots=True)
class Plan:
    requests: list[InferRequest]  # what the backend runs, null requests included
    positions: list[int]  # where each real request sits in ``requests``
    next_states: list[State]  # one per real request, in order: filled from its outputs


class StateRunner:
    """Runs one instance's batches for the sequence batcher (a ``BatchRunner`` it hands the
    pool with each batch): the batch its ``plan`` describes (the real requests, padded with
    null ones), returning the real requests' results and copying each one's state outputs into
    the plan. It runs on the instance's thread: ``plan`` is set on the loop before the batch is
    dispatched and read on the loop after it completed; the instance queue and
    ``call_soon_threadsafe`` order those accesses, so there is no lock.
    """

    def __init__(self, states: tuple[StateSpec, ...]) -> None:
        self.plan: Plan | None = None
        self._states = states

    def execute(
        self, inner: BackendInstance, requests: list[InferRequest], timing: ExecTiming
    ) -> list[Result]:
        plan, self.plan = self.plan, None
        if plan is None:
            return inner.execute(requests, timing)
        produced = inner.execute(plan.requests, timing)
        if len(produced) != len(plan.requests):
            raise internal(
                f"the model returned {len(produced)} responses for {len(plan.requests)} requests"
            )
        results: list[Result] = []
        for pos, next_state in zip(plan.positions, plan.next_states):
            res = produced[pos]
            if self._states and not isinstance(res, TritonliteError):
                for st in self._states:
                    arr = res.get(st.output_name)
                    if arr is not None:
                        kept = np.array(arr, copy=True)  # outputs may view reused buffers
                        kept.setflags(write=False)
                        next_state[st.input_name] = kept
            results.append(res)
        return results
