"""A/B traffic between model variants (``platform: "tritonlite_split"``): the variants table and
the scheduler that sends each request to one variant.

A router model names its variants and their integer weights in its config::

    platform: "tritonlite_split"
    parameters { key: "variants" value { string_value: "resnet_onnx:90,resnet_trt:10" } }

``Variants`` is that table, parsed once at load. A request goes to one variant:

* by weight, at random, when it has no ``ab_key`` parameter;
* by a stable hash of its ``ab_key`` (a string) otherwise: the same key always lands on the same
  variant as long as the weights do not change (blake2b of the key, mapped onto the cumulative
  weights), so one user keeps seeing one variant;
* when the chosen variant is not ready (unloaded, failed), its share goes to the ready ones in
  proportion to their weights (a sticky key of a ready variant never moves), with a warning at
  most every ``WARN_EVERY_S`` seconds per variant; with no variant ready the request fails with
  UNAVAILABLE.

The variant's request is admitted by the core the way a client's is (``SplitHost.step_infer``:
lookup, validation, the variant's cache and scheduler), so the variant's statistics and metrics
count it as usual. The router's response carries the variant's outputs and a ``variant``
parameter naming the model that answered. The router's own statistics count each request once,
with the variant's compute durations (as an ensemble's do).

The scheduler sits below the core: what it needs of it comes as a ``SplitHost`` (the loaded
``SplitModel``, core/runtime/split.py). Ownership: the scheduler owns a request from
``enqueue`` until its future resolves.
"""

from __future__ import annotations

import asyncio
import hashlib
import logging
import random
import time
from bisect import bisect_right
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Protocol, runtime_checkable

from tritonlite.contracts.errors import (
    TritonliteError,
    internal,
    invalid_arg,
    rejected,
    unavailable,
)
from tritonlite.contracts.timing import ExecTiming
from tritonlite.contracts.types import InferInput, InferRequest, InferResponse, RequestedOutput
from tritonlite.scheduling.base import ForwardingScheduler, ForwardStats

log = logging.getLogger("tritonlite")

SPLIT = "tritonlite_split"
VARIANTS_KEY = "variants"  # the config parameter listing the variants
AB_KEY = "ab_key"  # the request parameter that makes the choice sticky
VARIANT_PARAM = "variant"  # the response parameter naming the variant that answered
WARN_EVERY_S = 10.0


@dataclass(frozen=True, slots=True)
class Variants:
    """A router's variants in config order, their weights and the running sums of them."""

    names: tuple[str, ...]
    weights: tuple[int, ...]
    cumulative: tuple[int, ...] = field(init=False, compare=False, repr=False)

    def __post_init__(self) -> None:
        object.__setattr__(self, "cumulative", _running(self.weights))

    @property
    def total(self) -> int:
        return self.cumulative[-1] if self.cumulative else 0

    def pick(self, point: int, ready: Callable[[str], bool] | None = None) -> str | None:
        """The variant whose share holds ``point`` (0 <= point < total), among the ready ones
        when ``ready`` is given; None when none is."""
        if ready is None:
            return self.names[bisect_right(self.cumulative, point)]
        keep = [i for i, n in enumerate(self.names) if ready(n)]
        if not keep:
            return None
        cum = _running(tuple(self.weights[i] for i in keep))
        return self.names[keep[bisect_right(cum, point % cum[-1])]]


def _running(weights: tuple[int, ...]) -> tuple[int, ...]:
    out, total = [], 0
    for w in weights:
        total += w
        out.append(total)
    return tuple(out)


def parse_variants(model: str, text: str) -> Variants:
    """``"a:90,b:10"`` -> ``Variants``; INVALID_ARG naming ``model`` for anything else."""
    where = f"model '{model}' (platform {SPLIT}): parameter '{VARIANTS_KEY}'"
    items = [item.strip() for item in text.split(",")] if text.strip() else []
    if not items:
        raise invalid_arg(
            f"{where} must list at least one variant as 'name:weight' (e.g. 'a:90,b:10')"
        )
    names: list[str] = []
    weights: list[int] = []
    for item in items:
        name, sep, weight = item.rpartition(":")
        name, weight = name.strip(), weight.strip()
        if not sep or not name:
            raise invalid_arg(f"{where}: '{item}' is not 'name:weight'")
        if not weight.isascii() or not weight.isdigit() or int(weight) <= 0:
            raise invalid_arg(
                f"{where}: the weight of variant '{name}' must be a positive integer, "
                f"got '{weight}'"
            )
        if name == model:
            raise invalid_arg(f"{where}: a model cannot be a variant of itself")
        if name in names:
            raise invalid_arg(f"{where}: variant '{name}' is listed twice")
        names.append(name)
        weights.append(int(weight))
    return Variants(tuple(names), tuple(weights))


def key_points(key: str) -> tuple[int, int]:
    """Two 64-bit points of ``key``: the first places it among all the variants, the second
    among the ready ones when its own is not ready."""
    digest = hashlib.blake2b(key.encode("utf-8", "surrogatepass"), digest_size=16).digest()
    return int.from_bytes(digest[:8], "big"), int.from_bytes(digest[8:], "big")


def _scaled(point: int, total: int) -> int:
    return (point * total) >> 64  # uniform onto [0, total), order-preserving


@runtime_checkable
class SplitHost(Protocol):
    """What a router's scheduler needs of the core, handed in as the loaded model."""

    name: str
    version_str: str

    @property
    def variants(self) -> Variants: ...

    @property
    def stats(self) -> ForwardStats: ...

    @property
    def output_names(self) -> tuple[str, ...]:
        """The router's outputs, in config order."""
        ...

    def variant_ready(self, name: str) -> bool:
        """Whether a request to variant ``name`` would find a ready version now."""
        ...

    async def step_infer(self, request: InferRequest) -> InferResponse:
        """Admit the variant's request the way the core admits a client's."""
        ...

    def observe(self, variant: str, duration_ns: int, ok: bool) -> None:
        """One request routed to ``variant`` ended (the split metrics)."""
        ...


class SplitScheduler(ForwardingScheduler):
    """A router's scheduler: each request is one asyncio task awaiting its variant's answer."""

    def __init__(self, model: SplitHost) -> None:
        super().__init__(model.name)
        self.model = model
        self.variants = model.variants
        self._loop = asyncio.get_running_loop()
        self._warned: dict[str, float] = {}
        self._random = random.Random()

    def enqueue(self, request: InferRequest) -> asyncio.Future[InferResponse]:
        if self._stopped:
            raise rejected(unavailable(f"model '{self.model.name}' is unloading"))
        key = request.parameters.get(AB_KEY)
        if key is not None and not isinstance(key, str):
            raise rejected(invalid_arg(f"parameter '{AB_KEY}' must be a string"))
        self._begin()
        fut: asyncio.Future[InferResponse] = self._loop.create_future()
        task = self._loop.create_task(self._run(request, key, fut))
        fut.add_done_callback(lambda f: task.cancel() if f.cancelled() else None)
        return fut

    def choose(self, key: str | None) -> str | None:
        """The variant for a request with ``key`` (None: at random); None when none is ready."""
        variants, host = self.variants, self.model
        total = variants.total
        second = -1
        if key is None:
            first = int(self._random.random() * total)  # random() < 1: first < total
        else:
            h1, second = key_points(key)
            first = _scaled(h1, total)
        chosen = variants.pick(first)
        assert chosen is not None
        if host.variant_ready(chosen):
            return chosen
        if second < 0:
            second = self._random.getrandbits(64)
        ready = [n for n in variants.names if n != chosen and host.variant_ready(n)]
        self._warn(chosen, ready)
        if not ready:
            return None
        share = sum(w for n, w in zip(variants.names, variants.weights) if n in ready)
        return variants.pick(_scaled(second, share), lambda n: n in ready)

    def _warn(self, variant: str, ready: list[str]) -> None:
        now = time.monotonic()
        if now - self._warned.get(variant, -WARN_EVERY_S) < WARN_EVERY_S:
            return
        self._warned[variant] = now
        if ready:
            log.warning(
                "model '%s': variant '%s' is not ready; its share of the traffic goes to %s",
                self.model.name,
                variant,
                ", ".join(f"'{n}'" for n in ready),
            )
        else:
            log.warning("model '%s': no variant is ready", self.model.name)

    async def _run(
        self, request: InferRequest, key: str | None, fut: asyncio.Future[InferResponse]
    ) -> None:
        try:
            await self._route(request, key, fut)
        finally:
            self._end()

    async def _route(
        self, request: InferRequest, key: str | None, fut: asyncio.Future[InferResponse]
    ) -> None:
        host = self.model
        stats = host.stats
        timing: list[ExecTiming] = []
        started = time.monotonic_ns()
        variant: str | None = None
        try:
            variant = self.choose(key)
            if variant is None:
                names = ", ".join(f"'{n}'" for n in self.variants.names)
                raise unavailable(f"model '{host.name}' has no ready variant (variants: {names})")
            inner = _variant_request(request, variant, host.output_names, timing.append)
            # No await between the readiness check and the lookup step_infer starts with.
            resp = await host.step_infer(inner)
        except Exception as exc:
            now = time.monotonic_ns()
            stats.record_failure(now - request.arrival_ns, "OTHER")
            if variant is not None:
                host.observe(variant, now - started, False)
            if not fut.done():
                fut.set_exception(
                    exc
                    if isinstance(exc, TritonliteError)
                    else internal(f"in model '{host.name}', {type(exc).__name__}: {exc}")
                )
            return
        now = time.monotonic_ns()
        host.observe(variant, now - started, True)
        exec_timing = timing[0] if timing else None
        batch = max(1, request.batch_size)
        if exec_timing is not None:
            stats.record_execution(batch, exec_timing)
        stats.record_success(
            now - request.arrival_ns, started - request.arrival_ns, exec_timing, batch
        )
        if not fut.done():
            fut.set_result(
                InferResponse(
                    model_name=host.name,
                    model_version=host.version_str,
                    id=resp.id,
                    outputs=resp.outputs,
                    parameters={**resp.parameters, VARIANT_PARAM: variant},
                    final=True,
                )
            )


def _variant_request(
    req: InferRequest,
    variant: str,
    output_names: tuple[str, ...],
    on_timing: Callable[[ExecTiming], None],
) -> InferRequest:
    """``req`` addressed to ``variant``: its tensors (already resolved), outputs, parameters.
    A request for every output asks the variant for the router's outputs only."""
    outputs = (
        [RequestedOutput(name) for name in output_names]
        if req.outputs is None
        else [
            RequestedOutput(o.name, o.binary, o.classification, o.shm, dict(o.parameters))
            for o in req.outputs
        ]
    )
    return InferRequest(
        model_name=variant,
        model_version=-1,
        id=req.id,
        inputs=[
            InferInput(i.name, i.datatype, i.shape, i.data, None, dict(i.parameters))
            for i in req.inputs
        ],
        outputs=outputs,
        parameters=dict(req.parameters),
        sequence_id=req.sequence_id,
        sequence_start=req.sequence_start,
        sequence_end=req.sequence_end,
        priority=req.priority,
        timeout_us=req.timeout_us,
        binary_data_output=req.binary_data_output,
        enable_empty_final_response=req.enable_empty_final_response,
        on_timing=on_timing,
    )
