"""Generate the bundled example repository, ``model_repository/`` (idempotent).

    python tools/make_examples.py [DIR]        (``make install`` runs it)

Each model is built in memory and a file is rewritten only when its bytes differ, so a second
run writes nothing and says the repository is up to date; a generated file edited by hand is put
back. Only the example models' own files are touched: other models in DIR are left alone.

The models (real ONNX graphs from ``tools/onnx_graphs.py``, each with a config.pbtxt):

* ``add_sub``: FP32[16] INPUT0, INPUT1 -> OUTPUT0 = a + b, OUTPUT1 = a - b; max_batch_size 8,
  ``dynamic_batching { }`` (Triton's classic ``simple`` model).
* ``add_sub_nobatch``: the same without a batch dimension (max_batch_size 0).
* ``identity_string``: BYTES (TYPE_STRING) OUTPUT0 = INPUT0, dims [-1]; max_batch_size 8.
* ``mlp``: FP32[1024] -> 4 x (1024 x 1024 MatMul + Add + Relu) -> FP32[1024], weights from a
  fixed seed; max_batch_size 64, ``dynamic_batching { max_queue_delay_microseconds: 100 }``.

From ``tools/examples/``: ``add_sub_python`` (Triton's classic python add_sub), the
``mlp_pipeline`` ensemble (``mlp_preprocess`` python -> ``mlp`` ONNX -> ``mlp_postprocess``
python), ``accumulator`` (a stateful python model on the sequence batcher, implicit state),
``repeat`` (decoupled), and for the OpenAI-compatible endpoints ``textgen`` (a decoupled text
generator) and ``embed_chars`` (a hashed-trigram embedding model).

Static model trees: every directory ``tools/examples/<name>/`` (a config.pbtxt, ``1/model.py``,
...) is copied file for file to ``DIR/<name>/`` with the same write-if-changed rule. Files a
tree does not have are left alone in DIR; dot-files and ``__pycache__`` are not copied, but
every directory is made (an ensemble's version directory is empty: a ``.gitkeep`` keeps it).
"""

from __future__ import annotations

import sys
from collections.abc import Callable
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

import onnx  # noqa: E402

from tools.onnx_graphs import (  # noqa: E402
    add_sub,
    config_for,
    identity,
    mlp,
    model_files,
    write_if_changed,
)

# name -> (graph builder, config_for keywords)
EXAMPLES: dict[str, tuple[Callable[[], onnx.ModelProto], dict[str, object]]] = {
    "add_sub": (add_sub, {"max_batch_size": 8, "dynamic_batching": True}),
    "add_sub_nobatch": (lambda: add_sub(batch=False), {"max_batch_size": 0}),
    "identity_string": (
        lambda: identity("BYTES", (-1,)),
        {"max_batch_size": 8, "dynamic_batching": True},
    ),
    "mlp": (mlp, {"max_batch_size": 64, "max_queue_delay_us": 100}),
}


STATIC_DIR = Path(__file__).resolve().parent / "examples"


def static_files(source: Path = STATIC_DIR) -> dict[Path, bytes]:
    """The files of every static model tree under ``source``, keyed by repository-relative path."""
    files: dict[Path, bytes] = {}
    if not source.is_dir():
        return files
    for tree in sorted(p for p in source.iterdir() if p.is_dir() and not _skipped(p.name)):
        for path in sorted(tree.rglob("*")):
            rel = path.relative_to(source)
            if path.is_file() and not any(_skipped(part) for part in rel.parts):
                files[rel] = path.read_bytes()
    return files


def static_dirs(source: Path = STATIC_DIR) -> list[Path]:
    """Every directory of the static model trees (git keeps an empty one by a dot-file)."""
    if not source.is_dir():
        return []
    return [
        p.relative_to(source)
        for p in sorted(source.rglob("*"))
        if p.is_dir() and not any(_skipped(part) for part in p.relative_to(source).parts)
    ]


def _skipped(name: str) -> bool:
    return name.startswith(".") or name == "__pycache__" or name.endswith(".pyc")


def generate(repo: Path, static_source: Path = STATIC_DIR) -> list[Path]:
    """Bring the example models in ``repo`` up to date; returns the files it (re)wrote."""
    written: list[Path] = []
    for name, (build, config) in EXAMPLES.items():
        model = build()
        text = config_for(model, name=name, **config)  # type: ignore[arg-type]
        for rel, data in model_files(name, model, text).items():
            if write_if_changed(repo / rel, data):
                written.append(rel)
    for rel, data in static_files(static_source).items():
        if write_if_changed(repo / rel, data):
            written.append(rel)
    for rel in static_dirs(static_source):  # e.g. an ensemble's empty version directory
        (repo / rel).mkdir(parents=True, exist_ok=True)
    return written


def main(argv: list[str]) -> int:
    repo = Path(argv[1]) if len(argv) > 1 else ROOT / "model_repository"
    written = generate(repo)
    for rel in written:
        print(f"wrote {repo / rel}")
    if not written:
        print(f"{repo}: example models up to date")
    return 0


if __name__ == "__main__":
    raise SystemExit(main(sys.argv))
