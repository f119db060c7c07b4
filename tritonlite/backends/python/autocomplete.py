"""Python-backend auto-complete: a model's ``auto_complete_config`` (``pb_utils.ModelConfig``
is in ``model_config``).

``auto_complete`` backs backend ``python``'s entry in ``backends.AUTO_COMPLETERS``, which
``contracts.config.load_model_config`` calls. Like Triton's stub it imports the model's
``model.py`` (highest version the version policy selects), hands ``auto_complete_config`` a
``ModelConfig`` over the config as ``/config`` would render it now, and takes the dict back.
Only the top-level fields the model changed are written into the config; the rest stays as it
was, so normalization afterwards still sees what config.pbtxt said. ``ModelConfig``'s methods
refuse changes that conflict with config.pbtxt (Triton's ``ValueError`` messages); those
become load errors.
"""

from __future__ import annotations

import copy
import json
from pathlib import Path
from typing import Any

from tritonlite.backends.python.model_config import ModelConfig, apply_changes
from tritonlite.contracts.config import (
    normalize,
    render_json,
    select_versions,
    version_dirs,
)
from tritonlite.contracts.errors import invalid_arg


def auto_complete(cfg: Any, model_dir: Path) -> None:
    """Run the model's ``auto_complete_config`` (if it has one) and merge the result into ``cfg``.

    Parameters
    ----------
    cfg
        The config after platform resolution; changed in place.
    model_dir
        ``<repo>/<model>``.

    Raises
    ------
    TritonliteError
        INVALID_ARG when importing model.py or ``auto_complete_config`` fails (conflicts with
        config.pbtxt included), or it does not return a ``pb_utils.ModelConfig``.

    Notes
    -----
    Nothing happens when there is no version directory or model file: loading the model then
    reports what is missing. A model.py without ``TritonPythonModel`` is left to the backend,
    which reports it the way Triton does.
    """
    from tritonlite.backends.python import pb_utils
    from tritonlite.backends.python.loader import ModelScope, describe

    if "EXECUTION_ENV_PATH" in cfg.parameters:  # model.py runs in its own environment
        from tritonlite.backends.python.env import auto_complete as in_environment

        return in_environment(cfg, model_dir)
    available = version_dirs(model_dir)
    if not available:
        return
    chosen = select_versions(cfg, available) or available
    version = chosen[-1]
    path = Path(model_dir, str(version), cfg.default_model_filename or "model.py")
    if not path.is_file():
        return
    pb_utils._install()
    scope = ModelScope(cfg.name, version, Path(model_dir), path)
    try:
        try:
            module = scope.load()
        except Exception as exc:
            raise invalid_arg(describe(exc)) from None
        fn = getattr(getattr(module, "TritonPythonModel", None), "auto_complete_config", None)
        if fn is None:
            return
        shown = copy.deepcopy(cfg)
        normalize(shown)
        before = render_json(shown)
        config = ModelConfig(json.dumps(before))
        try:
            with scope.running():
                result = fn(config)
        except Exception as exc:
            raise invalid_arg(describe(exc)) from None
        if not isinstance(result, ModelConfig):
            raise invalid_arg(
                f"auto_complete_config function in model '{cfg.name}' must return "
                "a valid pb.ModelConfig object."
            )
        apply_changes(cfg, before, result.as_dict())
    finally:
        scope.close()
