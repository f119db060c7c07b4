"""RecvBlocks: a block is lent while anything refers to its view (or to an array made from
it), comes back once nothing does, is reused for the next message of its size class, and at
most ``keep`` bytes of free blocks are kept."""

from __future__ import annotations

import gc
import threading

import numpy as np
import pytest

from tritonlite.frontends.wire.recvbuf import GRAIN, RecvBlocks


def test_a_block_is_reused_only_once_nothing_refers_to_it() -> None:
    pool = RecvBlocks()
    first = pool.take(100_000)
    first[:] = b"\x01" * 100_000
    arr = np.ndarray((25_000,), np.float32, first)  # as the codec makes input tensors
    del first
    gc.collect()
    assert pool.lent() == 1  # the array still refers to it
    second = pool.take(100_000)
    second[:] = b"\x02" * 100_000
    assert arr.tobytes() == b"\x01" * 100_000  # not handed out again while in use
    del arr, second
    gc.collect()
    assert pool.lent() == 0 and pool.free_bytes() == 2 * 2 * GRAIN
    third = pool.take(70_000)  # the same size class: a kept block, its old bytes and all
    assert pool.free_bytes() == 2 * GRAIN and len(third) == 70_000


def test_free_blocks_are_kept_up_to_keep() -> None:
    pool = RecvBlocks(keep=3 * GRAIN)
    views = [pool.take(GRAIN) for _ in range(5)]
    assert pool.lent() == 5
    del views
    gc.collect()
    assert pool.lent() == 0 and pool.free_bytes() == 3 * GRAIN


def test_blocks_come_back_from_other_threads() -> None:
    pool = RecvBlocks()
    views = [pool.take(GRAIN + i) for i in range(64)]

    def drop(part: list[memoryview]) -> None:
        part.clear()
        gc.collect()

    parts = [views[i::4] for i in range(4)]
    del views
    threads = [threading.Thread(target=drop, args=(p,)) for p in parts]
    for t in threads:
        t.start()
    for t in threads:
        t.join(10)
    gc.collect()
    assert pool.lent() == 0 and pool.free_bytes() == (1 + 63 * 2) * GRAIN


def test_bad_keep() -> None:
    with pytest.raises(ValueError):
        RecvBlocks(keep=-1)
