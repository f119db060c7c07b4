"""The classification extension: replace an output by its top-K "value:index[:label]" strings."""

from __future__ import annotations

from typing import Any

import numpy as np


def _fmt_value(v: Any, is_float: bool) -> str:
    # Triton formats with C++ std::to_string: floats with 6 decimals, integers plainly.
    return f"{float(v):f}" if is_float else str(int(v))


def classify(
    arr: np.ndarray[Any, Any], k: int, batched: bool, labels: tuple[str, ...]
) -> np.ndarray[Any, Any]:
    """Top-``k`` entries of each batch row (or of the whole tensor when not batched)."""
    rows = arr.reshape(arr.shape[0], -1) if batched and arr.ndim > 0 else arr.reshape(1, -1)
    n = rows.shape[1]
    kk = min(k, n)
    is_float = arr.dtype.kind == "f"
    out = np.empty((rows.shape[0], kk), dtype=object)
    for r in range(rows.shape[0]):
        row = rows[r]
        # stable descending order: ties keep the lower index first, as std::stable_sort would
        keys = -row.astype(np.float64) if arr.dtype.kind == "b" else -row
        order = np.argsort(keys, kind="stable")
        for j in range(kk):
            idx = int(order[j])
            text = f"{_fmt_value(row[idx], is_float)}:{idx}"
            if idx < len(labels):
                text += f":{labels[idx]}"
            out[r, j] = text.encode("utf-8")
    return out if batched else out.reshape(kk)
