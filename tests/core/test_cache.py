"""Response cache: the key, the LRU's byte bound, stored copies, and hits built per request.

The cache is driven directly with a stand-in model (name, version, salt, stats and a scheduler
that counts executions); the end-to-end behaviour behind a real server is
tests/compat/test_http_cache.py.
"""

from __future__ import annotations

import asyncio
import os
from multiprocessing import shared_memory
from types import SimpleNamespace
from typing import Any

import numpy as np
import pytest

from tritonlite.contracts.errors import ErrorCode, TritonliteError
from tritonlite.contracts.types import (
    InferInput,
    InferOutput,
    InferRequest,
    InferResponse,
    RequestedOutput,
    ShmRef,
)
from tritonlite.core.observability.stats import ModelStats
from tritonlite.core.request.cache import ENTRY_OVERHEAD, ResponseCache, request_key
from tritonlite.core.tensors.shm import SharedMemoryManager

pytestmark = pytest.mark.timeout(30)


class FakeScheduler:
    """Runs ``OUT = 2 * IN`` into one reused staging buffer, as batched backends do."""

    def __init__(self) -> None:
        self.executed = 0
        self.staging = np.zeros(64, dtype=np.float32)

    async def enqueue(self, request: InferRequest) -> InferResponse:
        self.executed += 1
        x = request.inputs[0].data
        assert x is not None
        out = self.staging[: x.size].reshape(x.shape)
        np.multiply(x, 2, out=out)
        return InferResponse(
            "m", "1", request.id, [InferOutput("OUT", "FP32", tuple(x.shape), out)], {"p": 1}
        )


def fake_model(name: str = "m", version: int = 1) -> Any:
    return SimpleNamespace(
        name=name,
        version=version,
        version_str=str(version),
        cache_salt=os.urandom(8),
        stats=ModelStats(),
        scheduler=FakeScheduler(),
        signature=SimpleNamespace(outputs={"OUT": None, "AUX": None}),
    )


def req(
    values: Any = (1.0, 2.0, 3.0, 4.0),
    dtype: str = "FP32",
    shape: tuple[int, ...] = (4,),
    **kw: Any,
) -> InferRequest:
    np_dtype = {"FP32": np.float32, "INT32": np.int32}[dtype]
    data = np.asarray(values, dtype=np_dtype).reshape(shape)
    return InferRequest("m", inputs=[InferInput("IN", dtype, shape, data)], **kw)


# -- the key ---------------------------------------------------------------------------------


def test_key_covers_model_version_salt_and_every_input_property() -> None:
    m = fake_model()
    base = request_key(m, req())
    assert base == request_key(m, req())
    assert len(base) == 32
    other_version = fake_model(version=2)
    other_version.cache_salt = m.cache_salt
    assert request_key(other_version, req()) != base
    other_name = fake_model(name="n")
    other_name.cache_salt = m.cache_salt
    assert request_key(other_name, req()) != base
    assert request_key(fake_model(), req()) != base  # a reload: new salt
    assert request_key(m, req((1.0, 2.0, 3.0, 5.0))) != base
    # Same bytes, different shape or datatype: Triton would collide, we do not.
    assert request_key(m, req(shape=(2, 2))) != base
    as_int = np.asarray((1.0, 2.0, 3.0, 4.0), dtype=np.float32).view(np.int32)
    assert request_key(m, req(as_int, dtype="INT32")) != base


def test_key_covers_requested_outputs_classification_and_parameters() -> None:
    m = fake_model()
    base = request_key(m, req())
    # No list = every output: the same entry as naming them all, in any order.
    assert request_key(m, req(outputs=[RequestedOutput("OUT"), RequestedOutput("AUX")])) == base
    assert request_key(m, req(outputs=[RequestedOutput("AUX"), RequestedOutput("OUT")])) == base
    assert request_key(m, req(outputs=[RequestedOutput("OUT")])) != base
    assert request_key(m, req(outputs=[RequestedOutput("OUT", classification=2)])) != request_key(
        m, req(outputs=[RequestedOutput("OUT")])
    )
    assert request_key(m, req(parameters={"k": 1})) != base
    assert request_key(m, req(parameters={"k": 1})) != request_key(m, req(parameters={"k": True}))
    # How outputs travel is applied per request, not keyed.
    assert request_key(m, req(outputs=[RequestedOutput("OUT", binary=True)])) == request_key(
        m, req(outputs=[RequestedOutput("OUT", binary=False)])
    )
    assert request_key(m, req(binary_data_output=True)) == base


def test_key_ignores_input_order_and_hashes_views_and_bytes_tensors() -> None:
    m = fake_model()
    a = InferInput("A", "FP32", (4,), np.arange(4, dtype=np.float32))
    b = InferInput("B", "FP32", (4,), np.ones(4, dtype=np.float32))
    assert request_key(m, InferRequest("m", inputs=[a, b])) == request_key(
        m, InferRequest("m", inputs=[b, a])
    )
    strided = np.arange(8, dtype=np.float32)[::2]
    assert not strided.flags.c_contiguous
    assert request_key(m, req(strided)) == request_key(m, req(np.ascontiguousarray(strided)))
    s1 = np.array([b"ab", b"c"], dtype=object)
    s2 = np.array([b"a", b"bc"], dtype=object)  # same concatenated bytes, other elements
    k1 = request_key(m, InferRequest("m", inputs=[InferInput("S", "BYTES", (2,), s1)]))
    k2 = request_key(m, InferRequest("m", inputs=[InferInput("S", "BYTES", (2,), s2)]))
    assert k1 != k2


# -- the request path ------------------------------------------------------------------------


def test_hit_skips_the_scheduler_and_serves_a_copy() -> None:
    cache = ResponseCache(1 << 20)
    m = fake_model()

    async def main() -> tuple[InferResponse, InferResponse, InferResponse]:
        first = await cache.infer(m, req(id="a"), SharedMemoryManager())
        # Another request reuses the staging buffer the first response viewed.
        await m.scheduler.enqueue(req((9.0, 9.0, 9.0, 9.0)))
        second = await cache.infer(m, req(id="b"), SharedMemoryManager())
        third = await cache.infer(m, req(id="c", binary_data_output=True), SharedMemoryManager())
        return first, second, third

    first, second, third = asyncio.run(main())
    assert m.scheduler.executed == 2  # the first miss and the direct enqueue; no hits
    assert second.id == "b" and third.id == "c"
    out = second.outputs[0].data
    assert out is not None
    np.testing.assert_array_equal(out, [2.0, 4.0, 6.0, 8.0])
    assert not out.flags.writeable
    assert second.parameters == {"p": 1}
    assert (second.outputs[0].binary, third.outputs[0].binary) == (False, True)
    assert (cache.hits, cache.misses, len(cache)) == (2, 1, 1)
    s = m.stats
    assert (s.cache_hit.count, s.cache_miss.count) == (2, 1)
    assert s.success.count == 2  # the hits; the fake scheduler records nothing itself
    assert s.queue.count == 2 and s.queue.ns == 0
    assert s.compute_infer.count == 0 and s.inference_count == 0


def test_failures_are_neither_stored_nor_misses() -> None:
    cache = ResponseCache(1 << 20)
    m = fake_model()

    async def failing(request: InferRequest) -> InferResponse:
        raise TritonliteError(ErrorCode.INTERNAL, "boom")

    m.scheduler.enqueue = failing
    with pytest.raises(TritonliteError):
        asyncio.run(cache.infer(m, req(), SharedMemoryManager()))
    assert len(cache) == 0 and m.stats.cache_miss.count == 0


def test_lru_is_bounded_by_bytes_and_evicts_the_least_recently_used() -> None:
    m = fake_model()
    entry = ENTRY_OVERHEAD + 32 + 64 + 16  # overhead + key + per-output overhead + 4 floats
    cache = ResponseCache(3 * entry)
    shm = SharedMemoryManager()

    async def run(v: float) -> None:
        await cache.infer(m, req((v, v, v, v)), shm)

    async def main() -> None:
        for v in (1.0, 2.0, 3.0):
            await run(v)
        await run(1.0)  # hit: 1 becomes the most recently used
        await run(4.0)  # evicts 2

    asyncio.run(main())
    assert len(cache) == 3 and cache.used <= cache.capacity and cache.evictions == 1
    assert m.scheduler.executed == 4
    before = m.scheduler.executed
    asyncio.run(run(1.0))
    assert m.scheduler.executed == before  # still cached
    asyncio.run(run(2.0))
    assert m.scheduler.executed == before + 1  # evicted, ran again


def test_an_entry_larger_than_the_cache_is_not_stored() -> None:
    cache = ResponseCache(100)
    big = InferOutput("OUT", "FP32", (64,), np.zeros(64, np.float32))
    resp = InferResponse("m", "1", "", [big])
    assert not cache.insert(b"k" * 32, resp, SharedMemoryManager())
    assert len(cache) == 0 and cache.used == 0


def test_a_hit_writes_the_shared_memory_region_its_request_names() -> None:
    cache = ResponseCache(1 << 20)
    m = fake_model()
    region = shared_memory.SharedMemory(create=True, size=64)
    shm = SharedMemoryManager()
    try:
        shm.register_system("out", region.name, 0, 64)

        async def main() -> InferResponse:
            await cache.infer(m, req(outputs=[RequestedOutput("OUT")]), shm)
            region.buf[:16] = bytes(16)
            return await cache.infer(
                m, req(outputs=[RequestedOutput("OUT", shm=ShmRef("out", 16, 0))]), shm
            )

        hit = asyncio.run(main())
        assert m.scheduler.executed == 1
        assert hit.outputs[0].data is None and hit.outputs[0].shm is not None
        np.testing.assert_array_equal(
            np.frombuffer(region.buf[:16], dtype=np.float32), [2.0, 4.0, 6.0, 8.0]
        )

        async def too_small() -> None:
            await cache.infer(
                m, req(outputs=[RequestedOutput("OUT", shm=ShmRef("out", 8, 0))]), shm
            )

        with pytest.raises(TritonliteError, match="should be at least 16 bytes"):
            asyncio.run(too_small())
        assert m.stats.fail.count == 1
    finally:
        shm.close()
        region.close()
        region.unlink()


def test_a_response_written_to_shared_memory_is_read_back_into_the_entry() -> None:
    cache = ResponseCache(1 << 20)
    region = shared_memory.SharedMemory(create=True, size=64)
    shm = SharedMemoryManager()
    try:
        shm.register_system("out", region.name, 0, 64)
        np.frombuffer(region.buf, dtype=np.float32)[:4] = [5, 6, 7, 8]
        resp = InferResponse(
            "m", "1", "", [InferOutput("OUT", "FP32", (4,), None, shm=ShmRef("out", 64, 0))]
        )
        assert cache.insert(b"k" * 32, resp, shm)
        np.frombuffer(region.buf, dtype=np.float32)[:4] = 0
        hit = cache.respond(cache.lookup(b"k" * 32), fake_model(), req(), shm)  # type: ignore[arg-type]
        np.testing.assert_array_equal(hit.outputs[0].data, [5, 6, 7, 8])  # type: ignore[arg-type]
        bytes_resp = InferResponse(
            "m", "1", "", [InferOutput("S", "BYTES", (1,), None, shm=ShmRef("out", 64, 0))]
        )
        assert not cache.insert(b"j" * 32, bytes_resp, shm)
    finally:
        shm.close()
        region.close()
        region.unlink()


def test_zero_capacity_is_refused() -> None:
    with pytest.raises(ValueError):
        ResponseCache(0)


def test_large_inputs_are_hashed_off_the_loop(monkeypatch: pytest.MonkeyPatch) -> None:
    from tritonlite.core.request import cache as cache_mod

    monkeypatch.setattr(cache_mod, "HASH_OFFLOAD_BYTES", 8)
    threads: list[str] = []
    real = cache_mod.request_key

    def spy(model: Any, request: InferRequest) -> bytes:
        import threading

        threads.append(threading.current_thread().name)
        return real(model, request)

    monkeypatch.setattr(cache_mod, "request_key", spy)
    cache = ResponseCache(1 << 20)
    m = fake_model()

    async def main() -> None:
        await cache.infer(m, req(), SharedMemoryManager())
        await cache.infer(m, req(), SharedMemoryManager())

    asyncio.run(main())
    assert m.scheduler.executed == 1 and cache.hits == 1
    assert threads and all(t != "MainThread" for t in threads)
