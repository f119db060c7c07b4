"""Our private-pool protos are wire-identical to tritonclient's generated modules.

Both sets of classes are imported into one process on purpose: that is how users run them, and
loading our protos into the default pool would fail there (PROTOCOL.md §2.1).
"""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import numpy as np
from google.protobuf import text_format
from tritonclient.grpc import model_config_pb2, service_pb2

from tritonlite._proto import SERVICE_NAME, pb, service

ROOT = Path(__file__).resolve().parent.parent

RICH_CONFIG = """
name: "rich"
platform: "onnxruntime_onnx"
backend: "onnxruntime"
max_batch_size: 8
version_policy { specific { versions: [1, 3, 9223372036854775807] } }
input [
  { name: "INPUT0" data_type: TYPE_FP32 dims: [-1, 16] allow_ragged_batch: true },
  { name: "SCALAR" data_type: TYPE_INT64 dims: [1] reshape { } optional: true },
  { name: "IMG" data_type: TYPE_UINT8 format: FORMAT_NHWC dims: [224, 224, 3] }
]
output [
  { name: "OUTPUT0" data_type: TYPE_STRING dims: [4] reshape { shape: [2, 2] }
    label_filename: "labels.txt" }
]
batch_input [ { kind: BATCH_ELEMENT_COUNT target_name: "BC" data_type: TYPE_INT32
                source_input: "INPUT0" } ]
instance_group [
  { name: "cpu" count: 2 kind: KIND_CPU },
  { count: 1 kind: KIND_GPU gpus: [0, 1] secondary_devices [ { kind: KIND_NVDLA device_id: 7 } ]
    rate_limiter { resources [ { name: "R" count: 2 global: true } ] priority: 3 } }
]
dynamic_batching {
  preferred_batch_size: [4, 8]
  max_queue_delay_microseconds: 100
  preserve_ordering: false
  priority_levels: 3
  default_priority_level: 2
  default_queue_policy { timeout_action: DELAY default_timeout_microseconds: 5000
                         allow_timeout_override: true max_queue_size: 10 }
  priority_queue_policy { key: 1 value { default_timeout_microseconds: 18446744073709551615 } }
  priority_queue_policy { key: 3 value { timeout_action: REJECT max_queue_size: 4 } }
}
optimization {
  priority: PRIORITY_MAX
  cuda { graphs: true graph_spec [ { batch_size: 4 input { key: "INPUT0" value { dim: [4, 16] } }
                                     graph_lower_bound { batch_size: 1
                                       input { key: "INPUT0" value { dim: [1, 16] } } } } ] }
  execution_accelerators { gpu_execution_accelerator [ { name: "tensorrt"
                           parameters { key: "precision_mode" value: "FP16" } } ] }
  input_pinned_memory { enable: false }
}
parameters { key: "intra_op_thread_count" value { string_value: "2" } }
parameters { key: "EXECUTION_ENV_PATH" value { string_value: "$$TRITON_MODEL_DIRECTORY/env" } }
model_warmup [
  { name: "warm" batch_size: 2 count: 3
    inputs { key: "INPUT0" value { data_type: TYPE_FP32 dims: [16] random_data: true } }
    inputs { key: "IMG" value { data_type: TYPE_UINT8 dims: [224, 224, 3] zero_data: true } } }
]
model_transaction_policy { decoupled: false }
response_cache { enable: true }
cc_model_filenames { key: "8.0" value: "model_a100.plan" }
metric_tags { key: "team" value: "search" }
"""

SEQUENCE_CONFIG = """
name: "seq"
backend: "python"
max_batch_size: 4
input [ { name: "IN" data_type: TYPE_INT32 dims: [1] } ]
output [ { name: "OUT" data_type: TYPE_INT32 dims: [1] } ]
sequence_batching {
  max_sequence_idle_microseconds: 5000000
  oldest { max_candidate_sequences: 4 preferred_batch_size: [2, 4]
           max_queue_delay_microseconds: 10 }
  control_input [
    { name: "START" control [ { kind: CONTROL_SEQUENCE_START int32_false_true: [0, 1] } ] },
    { name: "READY" control [ { kind: CONTROL_SEQUENCE_READY bool_false_true: [false, true] } ] },
    { name: "CORRID" control [ { kind: CONTROL_SEQUENCE_CORRID data_type: TYPE_UINT64 } ] }
  ]
  state [ { input_name: "INPUT_STATE" output_name: "OUTPUT_STATE" data_type: TYPE_FP32
            dims: [-1, 2] use_same_buffer_for_input_output: true use_growable_memory: true
            initial_state [ { data_type: TYPE_FP32 dims: [1, 2] zero_data: true name: "init" } ] } ]
}
"""

ENSEMBLE_CONFIG = """
name: "ens"
platform: "ensemble"
max_batch_size: 8
input [ { name: "RAW" data_type: TYPE_STRING dims: [1] } ]
output [ { name: "SCORES" data_type: TYPE_FP32 dims: [10] } ]
ensemble_scheduling {
  step [
    { model_name: "pre" model_version: -1 input_map { key: "IN" value: "RAW" }
      output_map { key: "OUT" value: "tensor" } },
    { model_name: "net" model_version: 3 input_map { key: "X" value: "tensor" }
      output_map { key: "Y" value: "SCORES" } model_namespace: "ns" }
  ]
}
"""


def _both(text: str) -> tuple[bytes, bytes]:
    ours = text_format.Parse(text, pb.ModelConfig())
    theirs = text_format.Parse(text, model_config_pb2.ModelConfig())
    return ours.SerializeToString(deterministic=True), theirs.SerializeToString(deterministic=True)


def test_rich_config_serializes_identically() -> None:
    ours, theirs = _both(RICH_CONFIG)
    assert ours == theirs
    assert len(ours) > 500


def test_sequence_and_ensemble_configs_serialize_identically() -> None:
    for text in (SEQUENCE_CONFIG, ENSEMBLE_CONFIG):
        ours, theirs = _both(text)
        assert ours == theirs


def test_config_bytes_cross_parse() -> None:
    ours = text_format.Parse(RICH_CONFIG, pb.ModelConfig())
    theirs = model_config_pb2.ModelConfig.FromString(ours.SerializeToString())
    assert text_format.MessageToString(theirs) == text_format.MessageToString(ours)
    back = pb.ModelConfig.FromString(theirs.SerializeToString())
    assert back == ours


def test_infer_request_from_our_pool_parses_with_tritonclient() -> None:
    req = pb.ModelInferRequest(model_name="simple", model_version="1", id="req-7")
    req.parameters["sequence_id"].int64_param = 42
    req.parameters["sequence_start"].bool_param = True
    req.parameters["note"].string_param = "hé"
    inp = req.inputs.add(name="INPUT0", datatype="INT32", shape=[1, 16])
    inp.parameters["binary_data_size"].int64_param = 64
    req.inputs.add(name="TXT", datatype="BYTES", shape=[2]).contents.bytes_contents.extend(
        [b"a", b"\x00b"]
    )
    out = req.outputs.add(name="OUTPUT0")
    out.parameters["classification"].int64_param = 3
    req.raw_input_contents.append(np.arange(16, dtype="<i4").tobytes())

    theirs = service_pb2.ModelInferRequest.FromString(req.SerializeToString())
    assert theirs.model_name == "simple" and theirs.id == "req-7"
    assert theirs.parameters["sequence_id"].int64_param == 42
    assert theirs.parameters["sequence_start"].bool_param is True
    assert theirs.parameters["note"].string_param == "hé"
    assert [i.name for i in theirs.inputs] == ["INPUT0", "TXT"]
    assert list(theirs.inputs[0].shape) == [1, 16]
    assert list(theirs.inputs[1].contents.bytes_contents) == [b"a", b"\x00b"]
    assert theirs.outputs[0].parameters["classification"].int64_param == 3
    raw = np.frombuffer(theirs.raw_input_contents[0], dtype="<i4")
    assert raw.tolist() == list(range(16))
    assert theirs.SerializeToString(deterministic=True) == req.SerializeToString(deterministic=True)


def test_infer_response_from_our_pool_parses_with_tritonclient() -> None:
    resp = pb.ModelInferResponse(model_name="simple", model_version="1", id="r")
    resp.parameters["triton_final_response"].bool_param = True
    resp.outputs.add(name="OUTPUT0", datatype="FP32", shape=[1, 2])
    resp.raw_output_contents.append(np.array([1.5, -2.0], dtype="<f4").tobytes())

    theirs = service_pb2.ModelInferResponse.FromString(resp.SerializeToString())
    assert theirs.model_version == "1"
    assert theirs.parameters["triton_final_response"].bool_param is True
    assert theirs.outputs[0].datatype == "FP32"
    assert list(theirs.outputs[0].shape) == [1, 2]
    assert np.frombuffer(theirs.raw_output_contents[0], "<f4").tolist() == [1.5, -2.0]

    stream = pb.ModelStreamInferResponse(error_message="", infer_response=resp)
    their_stream = service_pb2.ModelStreamInferResponse.FromString(stream.SerializeToString())
    assert their_stream.infer_response.id == "r"


def test_service_has_tritons_name_and_methods() -> None:
    assert SERVICE_NAME == "inference.GRPCInferenceService"
    assert service.full_name == SERVICE_NAME
    theirs = service_pb2.DESCRIPTOR.services_by_name["GRPCInferenceService"]
    ours_methods = {
        m.name: (m.input_type.full_name, m.output_type.full_name) for m in service.methods
    }
    their_methods = {
        m.name: (m.input_type.full_name, m.output_type.full_name) for m in theirs.methods
    }
    assert ours_methods == their_methods


def test_descriptors_are_up_to_date() -> None:
    proc = subprocess.run(
        [sys.executable, str(ROOT / "tools" / "gen_proto.py"), "--check"],
        cwd=ROOT,
        capture_output=True,
        timeout=60,
    )
    assert proc.returncode == 0, proc.stderr.decode()
