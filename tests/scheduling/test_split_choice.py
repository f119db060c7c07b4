"""The A/B router's variants table and choice (scheduling/split.py), without a server."""

from __future__ import annotations

import asyncio
import hashlib
from collections import Counter
from typing import Any

import pytest
from hypothesis import given
from hypothesis import strategies as st

from tritonlite.contracts.errors import TritonliteError
from tritonlite.contracts.types import InferRequest, InferResponse
from tritonlite.scheduling.split import SplitScheduler, Variants, key_points, parse_variants

pytestmark = pytest.mark.timeout(60)


def test_parse_variants() -> None:
    v = parse_variants("r", " a:90 , b:10 ")
    assert v == Variants(("a", "b"), (90, 10))
    assert v.total == 100
    assert parse_variants("r", "only:1").names == ("only",)


@pytest.mark.parametrize(
    ("text", "message"),
    [
        ("", "at least one variant"),
        ("  ", "at least one variant"),
        ("a", "'a' is not 'name:weight'"),
        (":5", "':5' is not 'name:weight'"),
        ("a:0", "must be a positive integer, got '0'"),
        ("a:-1", "must be a positive integer, got '-1'"),
        ("a:1.5", "must be a positive integer, got '1.5'"),
        ("a:", "must be a positive integer, got ''"),
        ("a:\u0661", "must be a positive integer"),  # a non-ASCII digit
        ("a:1,a:2", "variant 'a' is listed twice"),
        ("r:1", "cannot be a variant of itself"),
        ("a:1,", "'' is not 'name:weight'"),
    ],
)
def test_parse_variants_refuses(text: str, message: str) -> None:
    with pytest.raises(TritonliteError) as info:
        parse_variants("r", text)
    assert message in info.value.message
    assert "model 'r' (platform tritonlite_split): parameter 'variants'" in info.value.message


def test_pick_follows_the_cumulative_weights() -> None:
    v = Variants(("a", "b", "c"), (2, 3, 5))
    assert [v.pick(p) for p in range(10)] == ["a"] * 2 + ["b"] * 3 + ["c"] * 5
    assert v.pick(0, lambda n: n != "a") == "b"
    assert v.pick(3, lambda n: n == "c") == "c"
    assert v.pick(0, lambda n: False) is None


def test_key_points_are_stable() -> None:
    # blake2b: the same key maps to the same points in every process and release
    digest = hashlib.blake2b(b"user-1", digest_size=16).digest()
    assert key_points("user-1") == (
        int.from_bytes(digest[:8], "big"),
        int.from_bytes(digest[8:], "big"),
    )


class _Host:
    """A router with fixed variants; ``down`` are not ready."""

    name = "r"
    version_str = "1"
    output_names = ("OUT",)

    def __init__(self, variants: Variants, down: set[str]) -> None:
        self.variants = variants
        self.down = down
        self.stats: Any = None

    def variant_ready(self, name: str) -> bool:
        return name not in self.down

    async def step_infer(self, request: InferRequest) -> InferResponse:
        raise AssertionError("not used")

    def observe(self, variant: str, duration_ns: int, ok: bool) -> None:
        pass


def _choices(variants: Variants, keys: list[str | None], down: set[str]) -> list[str | None]:
    async def run() -> list[str | None]:
        sched = SplitScheduler(_Host(variants, down))
        return [sched.choose(k) for k in keys]

    return asyncio.run(run())


def test_random_choice_follows_the_weights() -> None:
    v = Variants(("a", "b", "c"), (70, 20, 10))
    counts = Counter(_choices(v, [None] * 20_000, set()))
    for name, weight in zip(v.names, v.weights):
        assert abs(counts[name] / 20_000 * 100 - weight) < 2, counts


def test_a_down_variant_share_goes_to_the_ready_ones_in_proportion() -> None:
    v = Variants(("a", "b", "c"), (50, 30, 20))
    counts = Counter(_choices(v, [None] * 20_000, {"a"}))
    assert set(counts) == {"b", "c"}
    assert abs(counts["b"] / 20_000 - 0.6) < 0.03, counts
    assert _choices(v, [None, "k"], {"a", "b", "c"}) == [None, None]


@given(st.lists(st.text(max_size=12), min_size=1, max_size=40))
def test_sticky_keys_of_ready_variants_never_move(keys: list[str]) -> None:
    v = Variants(("a", "b", "c"), (5, 3, 2))
    before = _choices(v, list(keys), set())
    assert before == _choices(v, list(keys), set())  # same key, same variant
    after = _choices(v, list(keys), {"b"})
    for old, new in zip(before, after):
        assert new != "b"
        if old != "b":
            assert new == old


def test_sticky_keys_spread_by_weight() -> None:
    v = Variants(("a", "b"), (90, 10))
    counts = Counter(_choices(v, [f"user-{i}" for i in range(20_000)], set()))
    assert abs(counts["a"] / 20_000 * 100 - 90) < 1.5, counts
