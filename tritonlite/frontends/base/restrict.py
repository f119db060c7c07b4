"""Endpoint restriction (``--http-restricted-api`` / ``--grpc-restricted-protocol``), the one rule.

Triton's secure-deployment feature: the APIs fall into nine groups; a restricted group answers
only requests that carry ``<key>: <value>`` -- an HTTP header, or the gRPC metadata entry
``triton-grpc-protocol-<key>``. Without it (or with another value) HTTP answers 403
``This API is restricted, expecting header '<key>'`` and gRPC ends the call with UNAVAILABLE
``This protocol is restricted, expecting header 'triton-grpc-protocol-<key>'`` (Triton 2.51's
texts and codes). The check comes after the route is matched (an unknown path stays 404) and
before the method is (a restricted route answers 403, not 405), as in Triton.

Which route and which RPC belong to which group is written here once: ``HTTP_HANDLER_GROUPS``
(keyed by the handler's name in ``frontends/http/app.py``'s route table) and
``GRPC_METHOD_GROUPS`` (keyed by the registry path of ``frontends/grpc/servicer.methods``).
Both front ends refuse to start when one of their routes or RPCs has no group, so a new
endpoint cannot slip past a restriction; every transport (aio, native, the shared port) runs
those same handlers, so none can bypass it.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass

from tritonlite.frontends.base.call import (
    GrpcCall,
    Message,
    RpcError,
    StreamHandler,
    UnaryHandler,
)
from tritonlite.options import ServerOptions

GROUPS = (
    "health",
    "metadata",
    "inference",
    "shared-memory",
    "model-config",
    "model-repository",
    "statistics",
    "trace",
    "logging",
)
GRPC_KEY_PREFIX = "triton-grpc-protocol-"
_UNAVAILABLE = 14  # grpc.StatusCode.UNAVAILABLE

# frontends/http/app.py handler name -> group (Triton's http_server.cc, checked on 2.51)
HTTP_HANDLER_GROUPS: dict[str, str] = {
    "live": "health",
    "ready": "health",
    "model_ready": "health",
    "server_metadata": "metadata",
    "model_metadata": "metadata",
    "infer": "inference",
    "generate": "inference",
    "generate_stream": "inference",
    "openai_completions": "inference",
    "openai_chat": "inference",
    "openai_embeddings": "inference",
    "openai_models": "metadata",
    "openai_model": "metadata",
    "sys_shm": "shared-memory",
    "cuda_shm": "shared-memory",
    "model_config": "model-config",
    "repo_index": "model-repository",
    "repo_load": "model-repository",
    "repo_unload": "model-repository",
    "model_stats": "statistics",
    "all_stats": "statistics",
    "trace_setting": "trace",
    "logging_setting": "logging",
}

_SERVICE = "/inference.GRPCInferenceService/"
# registry path -> group (Triton's grpc_server.cc; grpc.health.v1 is the health group there)
GRPC_METHOD_GROUPS: dict[str, str] = {
    _SERVICE + "ServerLive": "health",
    _SERVICE + "ServerReady": "health",
    _SERVICE + "ModelReady": "health",
    "/grpc.health.v1.Health/Check": "health",
    "/grpc.health.v1.Health/Watch": "health",
    _SERVICE + "ServerMetadata": "metadata",
    _SERVICE + "ModelMetadata": "metadata",
    _SERVICE + "ModelInfer": "inference",
    _SERVICE + "ModelStreamInfer": "inference",
    _SERVICE + "SystemSharedMemoryStatus": "shared-memory",
    _SERVICE + "SystemSharedMemoryRegister": "shared-memory",
    _SERVICE + "SystemSharedMemoryUnregister": "shared-memory",
    _SERVICE + "CudaSharedMemoryStatus": "shared-memory",
    _SERVICE + "CudaSharedMemoryRegister": "shared-memory",
    _SERVICE + "CudaSharedMemoryUnregister": "shared-memory",
    _SERVICE + "ModelConfig": "model-config",
    _SERVICE + "RepositoryIndex": "model-repository",
    _SERVICE + "RepositoryModelLoad": "model-repository",
    _SERVICE + "RepositoryModelUnload": "model-repository",
    _SERVICE + "ModelStatistics": "statistics",
    _SERVICE + "TraceSetting": "trace",
    _SERVICE + "LogSettings": "logging",
}


@dataclass(frozen=True, slots=True)
class Restriction:
    """What unlocks one group: ``key`` (a header name or the full gRPC metadata key) and the
    exact ``value`` it must carry."""

    key: str
    value: str


Restrictions = Mapping[str, Restriction]  # group -> its restriction; absent: open


def parse(
    specs: Sequence[str], option: str, kind: str, key_prefix: str = ""
) -> dict[str, Restriction]:
    """``["health,metadata:key=value", ...]`` -> {group: Restriction}.

    ``kind`` is "api" (HTTP) or "protocol" (gRPC), ``key_prefix`` what is put before the key
    (gRPC: ``triton-grpc-protocol-``). Raises ValueError with tritonserver's messages: a spec
    that is not ``<groups>:<key>=<value>``, an unknown group, a group given twice.
    """
    out: dict[str, Restriction] = {}
    for spec in specs:
        groups, colon, setting = spec.partition(":")
        key, eq, value = setting.partition("=")
        if not colon or not eq or not groups or not key or not value:
            raise ValueError(
                f"--{option} option format is '<config name>:<setting>=<value>'. Got {spec}"
            )
        for group in groups.split(","):
            if group not in GROUPS:
                raise ValueError(f"unknown restricted {kind} '{group}'")
            if group in out:
                raise ValueError(
                    f"restricted {kind} '{group}' can not be specified in multiple config groups"
                )
            out[group] = Restriction(key_prefix + key, value)
    return out


def http_restrictions(options: ServerOptions) -> dict[str, Restriction]:
    """``--http-restricted-api``: group -> what unlocks it (ValueError if malformed)."""
    return parse(options.http_restricted_api, "http-restricted-api", "api")


def grpc_restrictions(options: ServerOptions) -> dict[str, Restriction]:
    """``--grpc-restricted-protocol``: group -> its full metadata key and value."""
    return parse(
        options.grpc_restricted_protocol, "grpc-restricted-protocol", "protocol", GRPC_KEY_PREFIX
    )


def _header(headers: Mapping[str, str], name: str) -> str | None:
    # A header sent twice reads as one comma-joined value (RFC 9110 5.3) on every transport:
    # the native one joins them while parsing, aiohttp keeps them apart.
    getall = getattr(headers, "getall", None)
    if getall is not None:
        values = getall(name, None)
        return ", ".join(values) if values else None
    return headers.get(name)


def http_denied(restriction: Restriction, headers: Mapping[str, str]) -> str | None:
    """The 403 message when ``headers`` do not unlock ``restriction``, else None."""
    if _header(headers, restriction.key) == restriction.value:
        return None
    return f"This API is restricted, expecting header '{restriction.key}'"


def _grpc_check(restriction: Restriction, call: GrpcCall) -> None:
    # gRPC metadata keys arrive in lower case: an upper-case key never matches (as in Triton).
    for key, value in call.metadata():
        if key == restriction.key:
            if value == restriction.value:
                return
            break  # the first entry decides, as Triton's multimap find does
    raise RpcError(
        _UNAVAILABLE, f"This protocol is restricted, expecting header '{restriction.key}'"
    )


def guard_unary(handler: UnaryHandler, restriction: Restriction) -> UnaryHandler:
    """``handler`` behind ``restriction``."""

    async def guarded(request: bytes, call: GrpcCall) -> Message:
        _grpc_check(restriction, call)
        return await handler(request, call)

    return guarded


def guard_stream(handler: StreamHandler, restriction: Restriction) -> StreamHandler:
    """``handler`` behind ``restriction``: the call ends before any message is read."""

    async def guarded(call: GrpcCall) -> None:
        _grpc_check(restriction, call)
        await handler(call)

    return guarded


def group_of(table: Mapping[str, str], name: str, what: str) -> str:
    """``table[name]``; a name without a group is a programming error caught at startup."""
    group = table.get(name)
    if group is None:
        raise RuntimeError(
            f"{what} '{name}' has no restriction group in frontends/base/restrict.py"
        )
    return group
