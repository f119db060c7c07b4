"""``CoreAPI``: the part of ``InferenceCore`` that front ends and in-process callers may use.

Front ends (aiohttp, grpc.aio and the native wire layer alike) type against this protocol, not
against the concrete class, so the core can be regrouped behind it and a front end can be
tested against a stand-in. Every call is made on the event loop thread. A method raises
``TritonliteError`` for anything the caller did wrong or that is unavailable; the front end
maps its code once (``frontends/base/*_errors.py``). The metrics read-model
(``metrics_snapshot``) is plain rows, re-exported here with the other types front ends use.
"""

from __future__ import annotations

from collections.abc import AsyncGenerator
from typing import Any, Literal, Protocol

from tritonlite.contracts.errors import Refusal
from tritonlite.contracts.stream import StreamResponse
from tritonlite.contracts.types import InferRequest, InferResponse, PlainAnswer
from tritonlite.core.observability.snapshot import (
    Buckets,
    CpuRow,
    InstanceRow,
    MetricsSnapshot,
    ModelRow,
    Quantiles,
    SplitRow,
)
from tritonlite.core.observability.sysinfo import GpuReading

# The read-models front ends render (frontends/ imports nothing else of the core).
__all__ = [
    "Buckets",
    "CoreAPI",
    "CpuRow",
    "GpuReading",
    "InstanceRow",
    "MetricsSnapshot",
    "ModelRow",
    "Quantiles",
    "SplitRow",
]


class CoreAPI(Protocol):
    exiting: bool  # a stop began: health says not ready, new inference is UNAVAILABLE
    shm: Any  # SharedMemoryManager: status and unregister of regions
    trace: Any  # TraceSettings: get / update, ``enabled`` read per request
    logging: Any  # LogSettings: get / update
    repository: Any  # ModelRepository: ``models`` (names known), for trace settings

    # health and metadata
    def is_live(self) -> bool: ...
    def is_ready(self) -> bool: ...
    def server_metadata(self) -> dict[str, Any]: ...
    def model_ready(self, name: str, version: int) -> bool: ...
    def model_metadata(self, name: str, version: int) -> dict[str, Any]: ...
    def model_config(self, name: str, version: int) -> Any: ...
    def model_config_json(self, name: str, version: int) -> bytes: ...

    # inference: ownership of a returned response's trace passes to the caller (see core.py)
    # (``refusal``: how an in-process caller words a request refused before its model, BLS)
    async def infer(
        self,
        request: InferRequest,
        decoupled_message: str = ...,
        *,
        refusal: Refusal | None = ...,
    ) -> InferResponse: ...

    def infer_stream(
        self, request: InferRequest, *, refusal: Refusal | None = ...
    ) -> AsyncGenerator[StreamResponse, None]: ...

    # how many inference requests have gone to a model so far, all models together (the
    # native front ends' busy polling compares request rates with it: wire/busypoll.py)
    def arrivals(self) -> int: ...

    # ``infer`` at once, for the requests a model's single-request lane covers; None: call
    # ``infer`` (nothing was done). Raises what ``infer`` raises for an unknown model or a
    # request that fails validation.
    def infer_now(self, request: InferRequest) -> InferResponse | None: ...

    # ``infer_now`` for a request that is only its inputs' arrays (``key``: their (name,
    # datatype, shape) in order; ``feed``: the arrays by name), once its model's lane has
    # seen that structure pass validation; None: build the request (nothing was done);
    # False: the lane's run failed, build the request and call ``infer`` (not ``infer_now``).
    def infer_plain(
        self, name: str, version: int, key: tuple[Any, ...], feed: dict[str, Any]
    ) -> PlainAnswer | Literal[False] | None: ...

    # metrics (a read-model of plain rows) and the CPU/GPU samplers behind it
    def metrics_snapshot(self) -> MetricsSnapshot: ...
    async def start_sampling(self) -> None: ...
    async def stop_sampling(self) -> None: ...

    # statistics, repository, shared memory
    def statistics(self, name: str = "", version: int = -1) -> dict[str, Any]: ...
    def repository_index(self, ready_only: bool = False) -> list[dict[str, Any]]: ...
    async def load_model(self, name: str, parameters: dict[str, Any]) -> None: ...
    async def unload_model(self, name: str, unload_dependents: bool = False) -> None: ...
    def register_system_shm(
        self, name: str, key: str, offset: int, byte_size: int, peer_is_local: bool
    ) -> None: ...
    def register_cuda_shm(
        self, name: str, raw_handle: bytes, device_id: int, byte_size: int, peer_is_local: bool
    ) -> None: ...
