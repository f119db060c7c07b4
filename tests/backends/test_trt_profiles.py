"""TensorRT optimization-profile choice (pure logic)."""

from __future__ import annotations

from tritonlite.backends.trt_profiles import choose, describe, fits

P0 = {"x": ((1, 3), (4, 3), (8, 3))}
P1 = {"x": ((9, 3), (16, 3), (32, 3))}


def test_first_profile_that_fits() -> None:
    assert choose({"x": (4, 3)}, [P0, P1]) == 0
    assert choose({"x": (20, 3)}, [P0, P1]) == 1
    assert choose({"x": (33, 3)}, [P0, P1]) is None
    assert choose({"x": (4, 2)}, [P0, P1]) is None  # a non-batch dim out of range
    assert choose({"x": (4,)}, [P0, P1]) is None  # rank differs


def test_instance_group_profiles_restrict_the_choice() -> None:
    assert choose({"x": (4, 3)}, [P0, P1], allowed=[1]) is None
    assert choose({"x": (12, 3)}, [P0, P1], allowed=[1, 0]) == 1
    assert choose({"x": (4, 3)}, [P0, P1], allowed=[7, 0]) == 0  # unknown indices are skipped


def test_static_inputs_have_no_bounds() -> None:
    assert fits({"x": (2, 3), "static": (5,)}, P0)


def test_describe_names_shapes_and_ranges() -> None:
    text = describe({"x": (40, 3)}, [P0, P1])
    assert "x[40, 3]" in text and "profile 1: x [9, 3]..[32, 3]" in text
