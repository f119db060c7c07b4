"""ONNX Runtime run failures: which ones make the instance unusable (BackendFatalError, so the
core rebuilds it) and which fail their batch only. Uses ORT's own exception types."""

from __future__ import annotations

import pytest
from onnxruntime.capi import onnxruntime_pybind11_state as ort_state

from tritonlite.backends.base import BackendFatalError
from tritonlite.backends.onnxruntime import run_error
from tritonlite.contracts.errors import ErrorCode


@pytest.mark.parametrize(
    "exc",
    [
        ort_state.EPFail("CUDA execution provider failed"),
        ort_state.Fail("CUDA failure 700: an illegal memory access was encountered"),
        ort_state.RuntimeException("CUDNN failure 4: CUDNN_STATUS_INTERNAL_ERROR"),
    ],
)
def test_session_breaking_failures_are_fatal(exc: Exception) -> None:
    err = run_error(exc)
    assert isinstance(err, BackendFatalError)
    assert err.code == ErrorCode.INTERNAL and err.message.startswith("onnx runtime error: ")


@pytest.mark.parametrize(
    "exc",
    [
        ort_state.InvalidArgument("Got invalid dimensions for input: X"),
        ort_state.Fail("Non-zero status code returned while running Add node"),
        ort_state.RuntimeException("bad shape"),
    ],
)
def test_request_failures_fail_the_batch_only(exc: Exception) -> None:
    err = run_error(exc)
    assert not isinstance(err, BackendFatalError)
    assert err.code == ErrorCode.INTERNAL and str(exc) in err.message
