"""--allow-client-shm: who may make the server map shared memory by name."""

from __future__ import annotations

from pathlib import Path

import pytest
import tritonclient.http as httpclient
import tritonclient.utils.shared_memory as shm
from conftest import start_server
from repos import write_add_sub
from tritonclient.utils import InferenceServerException

from tritonlite.contracts.errors import ErrorCode, TritonliteError
from tritonlite.core.core import InferenceCore
from tritonlite.options import ServerOptions

pytestmark = pytest.mark.timeout(60)


def test_false_refuses_every_client(tmp_path: Path) -> None:
    write_add_sub(tmp_path, "add_sub", 8)
    handle = shm.create_shared_memory_region("p", "/tl_policy", 64)
    s = start_server(
        tmp_path, "--allow-grpc=false", "--allow-metrics=false", "--allow-client-shm=false"
    )
    try:
        c = httpclient.InferenceServerClient(s.http_url)
        with pytest.raises(InferenceServerException, match="allow-client-shm=false"):
            c.register_system_shared_memory("p", "/tl_policy", 64)
        assert c.get_system_shared_memory_status() == []
        c.unregister_system_shared_memory()  # perf_analyzer's start-up call still succeeds
    finally:
        s.stop()
        shm.destroy_shared_memory_region(handle)


@pytest.mark.parametrize(
    "policy,local,allowed",
    [("local", True, True), ("local", False, False), ("true", False, True), ("false", True, False)],
)
def test_policy_by_peer(tmp_path: Path, policy: str, local: bool, allowed: bool) -> None:
    handle = shm.create_shared_memory_region("p", "/tl_policy_peer", 64)
    core = InferenceCore(ServerOptions(model_repositories=(tmp_path,), allow_client_shm=policy))
    try:
        if allowed:
            core.register_system_shm("p", "/tl_policy_peer", 0, 64, peer_is_local=local)
            assert core.shm.system_status()[0]["name"] == "p"
        else:
            with pytest.raises(TritonliteError) as info:
                core.register_system_shm("p", "/tl_policy_peer", 0, 64, peer_is_local=local)
            assert info.value.code == ErrorCode.UNSUPPORTED
    finally:
        core.shm.close()
        shm.destroy_shared_memory_region(handle)
