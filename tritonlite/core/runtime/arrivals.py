"""How many inference requests the server has taken in, all models together.

The core counts each request as it goes to a model (``InferenceCore``'s admission and its
single-request lane); a model reads the count to tell whether anything but its own requests
arrived since it last looked (``Model._alone``: a waited batch runs on the event loop only
while nothing else needs the loop).
"""

from __future__ import annotations

__all__ = ["ARRIVALS", "Arrivals"]


class Arrivals:
    """A counter the event loop's thread alone updates and reads."""

    __slots__ = ("n",)

    def __init__(self) -> None:
        self.n = 0


ARRIVALS = Arrivals()
