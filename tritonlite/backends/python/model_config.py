"""``pb_utils.ModelConfig``, the config a model's ``auto_complete_config`` extends, and
``apply_changes``, which writes what it changed back into the model's config.

Used by the in-process auto-complete (``autocomplete``), by ``pb_utils`` (which offers the
class to model code) and by the environment worker's host (``env``, which ships the class's
source to the worker and applies its answer); it imports nothing else of the backend.
"""

from __future__ import annotations

import json
from typing import Any

from tritonlite.contracts.config import parse_json
from tritonlite.contracts.errors import invalid_arg


class ModelConfig:
    """The config a model's ``auto_complete_config`` may extend (``pb_utils.ModelConfig``).

    Parameters
    ----------
    model_config
        The config as a JSON string.
    """

    def __init__(self, model_config: str) -> None:
        self._model_config: dict[str, Any] = json.loads(model_config)

    def _name(self) -> str:
        return str(self._model_config.get("name", ""))

    def as_dict(self) -> dict[str, Any]:
        return self._model_config

    def set_max_batch_size(self, max_batch_size: int) -> None:
        current = self._model_config.get("max_batch_size", 0)
        if current > max_batch_size:
            raise ValueError(
                f"configuration specified max_batch_size {current}, but in auto-complete-config "
                f"function for model '{self._name()}' specified max_batch_size {max_batch_size}"
            )
        self._model_config["max_batch_size"] = max_batch_size

    def set_dynamic_batching(self) -> None:
        for other in ("sequence_batching", "ensemble_scheduling"):
            if other in self._model_config:
                raise ValueError(
                    f"Configuration specified scheduling_choice as '{other}', but "
                    f"auto-complete-config function for model '{self._name()}' tries to set "
                    "scheduling_choice as 'dynamic_batching'"
                )
        self._model_config.setdefault("dynamic_batching", {})

    def _add_tensor(self, kind: str, tensor: dict[str, Any], allowed: tuple[str, ...]) -> None:
        model = self._name()
        for prop in tensor:
            if prop not in allowed:
                names = ", ".join(f"'{a}'" for a in allowed[:-1]) + f" and '{allowed[-1]}'"
                raise ValueError(
                    f"{kind} '{tensor.get('name')}' in auto-complete-config function for model "
                    f"'{model}' contains property other than {names}."
                )
        if "name" not in tensor:
            raise ValueError(
                f"{kind} in auto-complete-config function for model '{model}' is "
                "missing 'name' property."
            )
        for prop in ("data_type", "dims"):
            if prop not in tensor:
                raise ValueError(
                    f"{kind} '{tensor['name']}' in auto-complete-config function for model "
                    f"'{model}' is missing '{prop}' property."
                )
        entries = self._model_config.setdefault(kind, [])
        for current in entries:
            if current.get("name") != tensor["name"]:
                continue
            have_type = current.get("data_type", "TYPE_INVALID")
            if have_type != "TYPE_INVALID" and have_type != tensor["data_type"]:
                raise ValueError(
                    f"unable to load model '{model}', configuration expects datatype "
                    f"{have_type} for {kind} '{tensor['name']}', model provides "
                    f"{tensor['data_type']}"
                )
            if current.get("dims") and current["dims"] != tensor["dims"]:
                raise ValueError(
                    f"model '{model}', tensor '{tensor['name']}': the model expects dims "
                    f"{tensor['dims']} but the model configuration specifies dims "
                    f"{current['dims']}"
                )
            if (
                "optional" in current
                and "optional" in tensor
                and current["optional"] != tensor["optional"]
            ):
                raise ValueError(
                    f"model '{model}', tensor '{tensor['name']}': the model expects optional "
                    f"{tensor['optional']} but the model configuration specifies optional "
                    f"{current['optional']}"
                )
            current["data_type"] = tensor["data_type"]
            current["dims"] = tensor["dims"]
            if "optional" in tensor:
                current["optional"] = tensor["optional"]
            return
        entries.append(tensor)

    def add_input(self, input: dict[str, Any]) -> None:  # noqa: A002 (Triton's name)
        self._add_tensor("input", input, ("name", "data_type", "dims", "optional"))

    def add_output(self, output: dict[str, Any]) -> None:
        self._add_tensor("output", output, ("name", "data_type", "dims"))

    def set_model_transaction_policy(self, transaction_policy_dict: dict[str, Any]) -> None:
        for prop in transaction_policy_dict:
            if prop != "decoupled":
                raise ValueError(
                    "model transaction property in auto-complete-config function for model "
                    f"'{self._name()}' contains property other than 'decoupled'."
                )
        policy = self._model_config.setdefault("model_transaction_policy", {})
        if "decoupled" in transaction_policy_dict:
            wanted = transaction_policy_dict["decoupled"]
            if "decoupled" in policy and policy["decoupled"] != wanted:
                raise ValueError(
                    "trying to change decoupled property in auto-complete-config for model "
                    f"'{self._name()}', which is already set to '{policy['decoupled']}'."
                )
            policy["decoupled"] = wanted


def apply_changes(cfg: Any, before: dict[str, Any], after: dict[str, Any]) -> None:
    """Write the top-level fields that differ between ``before`` and ``after`` into ``cfg``."""

    keys = [k for k in after if before.get(k, _MISSING) != after[k]]
    keys += [k for k in before if k not in after]
    if not keys:
        return
    try:
        patch = parse_json(json.dumps({k: after[k] for k in keys if k in after}))
    except (TypeError, ValueError) as exc:
        raise invalid_arg(
            f"auto_complete_config of model '{cfg.name}' returned a config that is not JSON: {exc}"
        ) from None
    fields = cfg.DESCRIPTOR.fields_by_name
    for key in keys:
        field = fields.get(key)
        if field is None:
            continue
        cfg.ClearField(key)
        if key not in after:
            continue
        src = getattr(patch, key)
        if field.message_type is not None and not _is_repeated(field):
            if patch.HasField(key):
                dst = getattr(cfg, key)
                dst.SetInParent()
                dst.CopyFrom(src)
        elif _is_repeated(field):  # repeated fields and maps
            getattr(cfg, key).MergeFrom(src)
        else:
            setattr(cfg, key, src)


_MISSING = object()


def _is_repeated(field: Any) -> bool:
    flag = getattr(field, "is_repeated", None)
    if flag is None:
        return bool(field.label == field.LABEL_REPEATED)
    return bool(flag)
