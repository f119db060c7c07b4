"""``--busy-poll-us``: the native front ends' busy polling (frontends/wire/busypoll.py), off
and at its largest, serves real clients the same; bad values are refused at start."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest
import tritonclient.grpc as grpcclient
import tritonclient.http as httpclient
from conftest import start_server
from repos import add_sub_inputs, refused_at_start, write_add_sub

pytestmark = pytest.mark.timeout(180)


@pytest.mark.parametrize("us", ["0", "1000000"])
def test_requests_in_a_row_are_answered_with_polling_off_and_at_its_largest(
    tmp_path: Path, us: str
) -> None:
    write_add_sub(tmp_path, "add_sub", 8)
    s = start_server(tmp_path, "--busy-poll-us", us, transport=False)
    try:
        rng = np.random.default_rng(int(us))
        with httpclient.InferenceServerClient(s.http_url) as h:
            g = grpcclient.InferenceServerClient(s.grpc_url)
            for i in range(40):
                a = rng.random((1, 16), dtype=np.float32)
                b = rng.random((1, 16), dtype=np.float32)
                mod, client = (httpclient, h) if i % 2 else (grpcclient, g)
                r = client.infer("add_sub", add_sub_inputs(mod, a, b))
                np.testing.assert_allclose(r.as_numpy("OUTPUT0"), a + b, rtol=1e-6)
                np.testing.assert_allclose(r.as_numpy("OUTPUT1"), a - b, rtol=1e-6)
            g.close()
    finally:
        s.stop()


@pytest.mark.parametrize("value", ["-1", "1000001", "soon"])
def test_bad_values_are_refused_at_start(tmp_path: Path, value: str) -> None:
    assert "--busy-poll-us" in refused_at_start(tmp_path, "--busy-poll-us", value)
