"""Response cache: one bytes-bounded LRU shared by every model (Triton's ``local`` cache).

Enabled by ``--cache-config local,size=BYTES`` (or the deprecated ``--response-cache-byte-size``)
for the models whose config says ``response_cache { enable: true }``. A hit answers on the event
loop without reaching the scheduler; a miss runs the model and stores a copy of its response.

The key is a blake2b digest over:

* the model's name, version and a per-load salt (a reloaded version never answers with its
  predecessor's entries);
* every input's name, datatype, shape and bytes (BYTES inputs: their serialized form), in
  name order — Triton hashes only names and bytes, so two requests whose bytes agree but whose
  shapes or datatypes differ share its entries; ours do not;
* the requested outputs with their classification counts, as a set (no list means every output
  of the model, unclassified: the same entry as naming them all), and the request's custom
  parameters (models see them, so they can change the result).

Chosen over storing every output and filtering per request: a model may compute only the
outputs it is asked for, and classification changes an output's contents. What is *not* in
the key is how outputs travel — binary or JSON, inline or in a shared-memory region — and their
order, which a hit applies per request: the entry holds the arrays, and a hit lists them in its
request's order and writes the regions its request names.

Only successful responses are stored. Entries hold read-only copies of the output arrays
(backends reuse their staging buffers); a response with a BYTES output written to shared memory
is not stored (its length is not known without parsing the region). An entry's size is its
outputs' bytes plus ``ENTRY_OVERHEAD``; an entry larger than the whole cache is not stored.

Under memory pressure (core/pressure.py) nothing new is stored: a miss runs the model and
answers without copying its outputs, counted in ``tritonlite_shed_total{feature="cache_insert"}``.
Entries already stored stay and keep answering: a hit costs no memory and spares an execution,
and evicting them would free at most the cache's bounded size while turning hits into misses.

Loop-only: every lookup and insert happens on the event loop thread, so no locks (only the
hashing of a large request's inputs runs on a worker thread; it reads the request, nothing else).
"""

from __future__ import annotations

import asyncio
import hashlib
import time
from collections import OrderedDict
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

import numpy as np

from tritonlite.contracts import datatypes
from tritonlite.contracts.errors import TritonliteError, internal
from tritonlite.contracts.types import InferOutput, InferRequest, InferResponse, RequestedOutput
from tritonlite.core.observability.pressure import NO_PRESSURE, MemoryPressure
from tritonlite.core.tensors.shm import SharedMemoryManager

if TYPE_CHECKING:
    from tritonlite.core.runtime.model import Model

ENTRY_OVERHEAD = 256  # bytes charged per entry on top of its outputs (key, bookkeeping)
_OUTPUT_OVERHEAD = 64
# Inputs larger than this are hashed on a worker thread (hashlib releases the GIL), so one big
# request does not stall the event loop: blake2b runs at roughly 1 GB/s.
HASH_OFFLOAD_BYTES = 1 << 20


def _raw(data: np.ndarray[Any, Any], datatype: str) -> bytes | memoryview:
    if datatype == "BYTES" or data.dtype.kind in ("O", "S", "U"):
        return datatypes.serialize_bytes(data)
    flat = np.ascontiguousarray(data).reshape(-1)
    return memoryview(flat.view(np.uint8))  # type: ignore[arg-type]


def request_key(model: Model, request: InferRequest) -> bytes:
    """The cache key of a validated ``request`` to ``model`` (inputs resolved, shm included)."""
    h = hashlib.blake2b(digest_size=32)
    head = [model.name, str(model.version), model.cache_salt.hex()]
    if request.outputs is None:
        head.extend(f"{name}\x1f0" for name in sorted(model.signature.outputs))
    else:
        head.extend(sorted({f"{o.name}\x1f{o.classification}" for o in request.outputs}))
    if request.parameters:
        head.append(repr(sorted(request.parameters.items())))
    inputs = sorted(request.inputs, key=lambda i: i.name)
    raws = []
    for inp in inputs:
        assert inp.data is not None  # validate.prepare resolved shared-memory inputs
        raw = _raw(inp.data, inp.datatype)
        raws.append(raw)
        head.append(f"{inp.name}\x1f{inp.datatype}\x1f{list(inp.shape)}\x1f{len(raw)}")
    h.update("\x1e".join(f"{len(s)}:{s}" for s in head).encode())
    for raw in raws:
        h.update(raw)
    return h.digest()


@dataclass(slots=True)
class CacheEntry:
    outputs: tuple[tuple[str, str, tuple[int, ...], np.ndarray[Any, Any]], ...]
    parameters: dict[str, Any]
    nbytes: int


def _write_region(shm: SharedMemoryManager, out: RequestedOutput, raw: bytes | memoryview) -> None:
    ref = out.shm
    assert ref is not None
    if len(raw) > ref.byte_size:
        raise internal(
            f"shared memory size specified with the request for output '{out.name}' "
            f"({ref.byte_size} bytes) should be at least {len(raw)} bytes to hold the results"
        )
    shm.write(ref.region, ref.offset, raw)


class ResponseCache:
    """Bytes-bounded LRU of responses, keyed by ``request_key``.

    ``pressure``: whose ``active`` flag stops inserts (the composition root sets the server's).
    """

    def __init__(self, capacity_bytes: int, pressure: MemoryPressure = NO_PRESSURE) -> None:
        if capacity_bytes <= 0:
            raise ValueError("response cache size must be > 0 bytes")
        self.capacity = capacity_bytes
        self.used = 0
        self.hits = 0
        self.misses = 0
        self.evictions = 0
        self.pressure = pressure
        self._entries: OrderedDict[bytes, CacheEntry] = OrderedDict()

    def __len__(self) -> int:
        return len(self._entries)

    # -- the request path -------------------------------------------------------------------
    async def infer(
        self, model: Model, request: InferRequest, shm: SharedMemoryManager
    ) -> InferResponse:
        """Answer ``request`` from the cache, or run it and store its response.

        Statistics: a hit is a success (and a queue entry of 0 ns) with ``cache_hit`` = lookup
        + response build; a miss that succeeds adds ``cache_miss`` = lookup + insert, and the
        insert time to the request's duration. Failed requests are neither stored nor counted
        as misses.
        """
        t0 = time.monotonic_ns()
        if sum(i.data.nbytes for i in request.inputs if i.data is not None) > HASH_OFFLOAD_BYTES:
            key = await asyncio.to_thread(request_key, model, request)
        else:
            key = request_key(model, request)
        entry = self.lookup(key)
        if entry is not None:
            try:
                response = self.respond(entry, model, request, shm)
            except TritonliteError:
                model.stats.record_failure(time.monotonic_ns() - request.arrival_ns, "OTHER")
                raise
            now = time.monotonic_ns()
            model.stats.record_cache_hit(now - request.arrival_ns, now - t0)
            return response
        lookup_ns = time.monotonic_ns() - t0
        response = await model.scheduler.enqueue(request)
        t1 = time.monotonic_ns()
        self.insert(key, response, shm)
        insert_ns = time.monotonic_ns() - t1
        model.stats.record_cache_miss(lookup_ns + insert_ns, insert_ns)
        return response

    # -- the LRU ------------------------------------------------------------------------------
    def lookup(self, key: bytes) -> CacheEntry | None:
        entry = self._entries.get(key)
        if entry is None:
            self.misses += 1
            return None
        self._entries.move_to_end(key)
        self.hits += 1
        return entry

    def insert(self, key: bytes, response: InferResponse, shm: SharedMemoryManager) -> bool:
        """Store a copy of ``response`` under ``key``; False when it is not cacheable, too big,
        or shed under memory pressure."""
        if key in self._entries:  # a concurrent identical miss got there first
            self._entries.move_to_end(key)
            return True
        pressure = self.pressure
        if pressure.active:
            pressure.shed_cache_inserts += 1
            return False
        outputs = []
        nbytes = ENTRY_OVERHEAD + len(key)
        for out in response.outputs:
            if out.data is not None:
                arr = np.array(out.data, copy=True)
            elif out.shm is not None and out.datatype != "BYTES":
                dt = datatypes.numpy_dtype(out.datatype)
                size = datatypes.num_elements(out.shape) * dt.itemsize
                view = shm.read(out.shm.region, out.shm.offset, size)
                arr = np.frombuffer(view, dtype=dt).reshape(out.shape).copy()
            else:
                return False
            arr.flags.writeable = False
            size = (
                len(datatypes.serialize_bytes(arr))
                if arr.dtype.kind in ("O", "S", "U")
                else arr.nbytes
            )
            nbytes += size + _OUTPUT_OVERHEAD
            outputs.append((out.name, out.datatype, tuple(out.shape), arr))
        if nbytes > self.capacity:
            return False
        while self.used + nbytes > self.capacity:
            _, old = self._entries.popitem(last=False)
            self.used -= old.nbytes
            self.evictions += 1
        self._entries[key] = CacheEntry(tuple(outputs), dict(response.parameters), nbytes)
        self.used += nbytes
        return True

    @staticmethod
    def respond(
        entry: CacheEntry, model: Model, request: InferRequest, shm: SharedMemoryManager
    ) -> InferResponse:
        """A fresh response to ``request`` from ``entry``: its id, binary flags and shm regions."""
        by_name = {o[0]: o for o in entry.outputs}
        if request.outputs is None:
            order: list[tuple[str, RequestedOutput | None]] = [(o[0], None) for o in entry.outputs]
        else:
            order = [(o.name, o) for o in request.outputs]
        outs: list[InferOutput] = []
        for name, ro in order:
            found = by_name.get(name)
            if found is None:  # a model that left a requested output out (as on a miss)
                continue
            _, datatype, shape, arr = found
            if ro is not None and ro.shm is not None:
                _write_region(shm, ro, _raw(arr, datatype))
                outs.append(InferOutput(name, datatype, shape, None, shm=ro.shm))
            else:
                binary = request.binary_data_output if ro is None else bool(ro.binary)
                outs.append(InferOutput(name, datatype, shape, arr, binary=binary))
        return InferResponse(
            model.name, model.version_str, request.id, outs, dict(entry.parameters)
        )
