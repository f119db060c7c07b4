"""tritonlite: a Triton-Inference-Server-compatible model server in one Python process."""

from __future__ import annotations

__version__ = "0.1.0"
# The Triton release whose wire behaviour tritonlite follows; reported in server metadata.
TRITON_VERSION = "2.61.0"
