"""Staging buffers: alignment, reuse, no reuse while held or viewed, growth."""

from __future__ import annotations

import threading

import numpy as np
import pytest

from tritonlite import kernels, memory
from tritonlite.memory import StagingPool, aligned_empty


def _address(arr: np.ndarray) -> int:
    return int(arr.__array_interface__["data"][0])


@pytest.mark.parametrize("alignment", [1, 8, 64, 4096])
def test_aligned_empty(alignment: int) -> None:
    for nbytes in (0, 1, 63, 1000):
        arr = aligned_empty(nbytes, alignment)
        assert arr.dtype == np.uint8 and arr.shape == (nbytes,)
        assert nbytes == 0 or _address(arr) % alignment == 0
    with pytest.raises(ValueError):
        aligned_empty(10, 48)


def test_views_are_aligned_and_bounded() -> None:
    pool = StagingPool(pinned=False)
    with pool.acquire(256) as lease:
        view = lease.view(np.float32, (4, 16))
        assert _address(view) % 64 == 0 and view.flags.c_contiguous and view.flags.writeable
        assert lease.view(np.float64, (2,), offset=8).shape == (2,)
        assert lease.array().shape == (256,)
        with pytest.raises(ValueError):
            lease.view(np.float32, (65,))
        with pytest.raises(ValueError):
            lease.view(np.float32, (1,), offset=2)
        del view


def test_reuse_without_allocation_in_steady_state() -> None:
    pool = StagingPool(pinned=False)
    addresses = set()
    for batch in range(50):
        lease = pool.acquire(1000 + batch)
        out = lease.view(np.float32, (10, 25))
        kernels.gather_into(out, [np.ones((10, 25), np.float32)])
        addresses.add(lease.buffer.address)
        del out
        lease.release()
    assert pool.allocations == 1 and len(pool) == 1 and len(addresses) == 1


def test_not_reused_while_held() -> None:
    pool = StagingPool(pinned=False)
    first = pool.acquire(100)
    second = pool.acquire(100)
    assert first.buffer is not second.buffer
    first.retain(2)  # two responses will view the outputs
    first.release()
    first.release()
    third = pool.acquire(100)
    assert third.buffer is not first.buffer
    first.release()
    assert first.holds == 0
    second.release()
    third.release()
    fourth = pool.acquire(100)
    assert pool.allocations == 3 and len(pool) == 3
    fourth.release()


def test_not_reused_while_a_view_is_alive() -> None:
    pool = StagingPool(pinned=False)
    lease = pool.acquire(64)
    outputs = kernels.split_views(lease.view(np.int32, (4, 4)), [1, 3])
    buffer = lease.buffer
    lease.release()  # released early, but a response still holds a view
    assert buffer.viewed()
    other = pool.acquire(64)
    other_buffer = other.buffer
    assert other_buffer is not buffer
    other.release()
    del outputs
    assert not buffer.viewed()
    again = pool.acquire(64)
    assert again.buffer in (buffer, other_buffer)
    assert pool.allocations == 2
    again.release()


def test_grows_when_a_bigger_batch_arrives() -> None:
    pool = StagingPool(pinned=False)
    pool.acquire(1000).release()
    assert pool.capacity_bytes == 4096
    big = pool.acquire(10_000)
    assert big.buffer.capacity >= 10_000
    assert len(pool) == 1 and pool.allocations == 2  # the outgrown buffer was replaced
    big.release()
    pool.acquire(5000).release()
    assert pool.allocations == 2


def test_keep_free_bounds_idle_buffers() -> None:
    pool = StagingPool(pinned=False, keep_free=1)
    leases = [pool.acquire(100) for _ in range(5)]
    for lease in leases:
        lease.release()
    pool.acquire(100).release()
    assert len(pool) <= 2
    pool.close()
    assert len(pool) == 0


def test_lease_misuse_raises() -> None:
    pool = StagingPool(pinned=False)
    lease = pool.acquire(10)
    lease.release()
    with pytest.raises(RuntimeError):
        lease.release()
    with pytest.raises(RuntimeError):
        lease.view(np.uint8, (1,))
    with pytest.raises(ValueError):
        pool.acquire(-1)


def test_concurrent_acquire_release() -> None:
    pool = StagingPool(pinned=False)
    errors: list[BaseException] = []

    def work(tag: int) -> None:
        try:
            for _ in range(200):
                with pool.acquire(512) as lease:
                    arr = lease.view(np.uint8, (512,))
                    arr[:] = tag
                    assert (arr == tag).all()
                    del arr
        except BaseException as exc:  # surfaced below
            errors.append(exc)

    threads = [threading.Thread(target=work, args=(t,)) for t in range(4)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    assert not errors
    assert pool.allocations <= 4


def test_pinned_is_only_used_with_cuda() -> None:
    pool = StagingPool()
    assert pool.pinned == memory.pinned_available()
    assert memory.describe().startswith("staging: ")
    if not memory.pinned_available():
        with pytest.raises(RuntimeError):
            memory.pinned_empty(16)
