"""Generate the bundled example repository, ``model_repository/`` (idempotent).

Run as ``python tools/make_examples.py [DIR]``; ``make install`` does it. A model directory
that already has its config and model file is left as it is.
"""

from __future__ import annotations

import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from tools.onnx_graphs import write_add_sub, write_identity, write_mlp  # noqa: E402

EXAMPLES = {
    "add_sub": lambda repo: write_add_sub(repo, "add_sub", 8, extra_config="dynamic_batching { }\n"),
    "add_sub_nobatch": lambda repo: write_add_sub(repo, "add_sub_nobatch", 0),
    "identity_string": lambda repo: write_identity(repo, "identity_string", "BYTES", [-1], 8,
                                                   "dynamic_batching { }\n"),
    "mlp": lambda repo: write_mlp(repo, "mlp", extra_config=(
        "dynamic_batching { max_queue_delay_microseconds: 100 }\n")),
}


def main() -> int:
    repo = Path(sys.argv[1]) if len(sys.argv) > 1 else ROOT / "model_repository"
    repo.mkdir(parents=True, exist_ok=True)
    for name, make in EXAMPLES.items():
        if (repo / name / "config.pbtxt").exists() and (repo / name / "1" / "model.onnx").exists():
            continue
        make(repo)
        print(f"generated {repo.name}/{name}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
