"""Choosing a TensorRT optimization profile for a batch (pure logic, tested without a GPU).

An engine built with dynamic shapes has one or more optimization profiles, each giving every
input a (min, opt, max) shape. A batch can run under a profile when each of its input shapes
lies between that input's min and max in every dimension. Triton restricts the candidates to
the instance group's ``profile`` list when it is set, and otherwise takes the first profile
that fits; so does this.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence

Shape = tuple[int, ...]
ProfileShapes = Mapping[str, tuple[Shape, Shape, Shape]]  # input -> (min, opt, max)


def fits(shapes: Mapping[str, Shape], profile: ProfileShapes) -> bool:
    for name, shape in shapes.items():
        bounds = profile.get(name)
        if bounds is None:
            continue  # a static input (no profile entry)
        lo, _, hi = bounds
        if len(shape) != len(lo) or any(not (a <= s <= b) for s, a, b in zip(shape, lo, hi)):
            return False
    return True


def choose(
    shapes: Mapping[str, Shape], profiles: Sequence[ProfileShapes], allowed: Sequence[int] = ()
) -> int | None:
    """The index of the first allowed profile the batch fits, or None."""
    candidates = list(allowed) if allowed else list(range(len(profiles)))
    for index in candidates:
        if 0 <= index < len(profiles) and fits(shapes, profiles[index]):
            return index
    return None


def describe(shapes: Mapping[str, Shape], profiles: Sequence[ProfileShapes]) -> str:
    """Why no profile fits: the shapes asked for and each profile's range."""
    asked = ", ".join(f"{n}{list(s)}" for n, s in shapes.items())
    ranges = "; ".join(
        f"profile {i}: " + ", ".join(f"{n} {list(lo)}..{list(hi)}" for n, (lo, _, hi) in p.items())
        for i, p in enumerate(profiles)
    )
    return f"no optimization profile accepts {asked} ({ranges})"
