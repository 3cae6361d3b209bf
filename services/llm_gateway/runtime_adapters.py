"""LoRA adapters loaded at runtime, as vLLM serves them: `POST /v1/load_lora_adapter
{"lora_name", "lora_path"}` loads the adapter in folder `lora_path` onto a local (`hf`) model,
after which `model: <lora_name>` in any model request uses it; `POST
/v1/unload_lora_adapter {"lora_name"}` forgets it. So one llmrl gateway can be the engine of
another (`backend: openai` with `load_adapters: true`) exactly as vLLM would be.

`lora_path` is request data, so it names only what the project itself saved: it goes through
`llmrl.common.trusted.resolve_artifact` (a path under the artifact roots, or `run:<id>/...`,
whose checkpoint metadata llmrl recorded: the versions the learner writes with `save_version`,
e.g. `$LLMRL_HOME/adapters/<model>/<adapter>/<version>`), then must hold a peft adapter whose
weights are safetensors (`adapter_model.safetensors`): an `adapter_model.bin` is a pickle and
is never opened. Every refusal is a 400 naming `lora_path` (one message whether the folder is
missing, elsewhere or foreign, as for every artifact).

Runtime adapters belong to one gateway process (a service's replicas each load their own, as
each vLLM server does). A name may not be a configured model's, nor hold ':' (that introduces
`<model>:<adapter>@<version>`, which the gateway resolves itself).
"""

from __future__ import annotations

import re
from pathlib import Path

from llmrl.llm_gateway.errors import InvalidRequestError

LORA_NAME = re.compile(r"^[A-Za-z0-9_.@+-]{1,200}$")
ADAPTER_CONFIG = "adapter_config.json"
SAFETENSORS_FILE = "adapter_model.safetensors"


def check_lora_name(value: object, models: dict[str, object]) -> str:
    """A runtime adapter's name, or a 400 naming `lora_name`."""
    if not isinstance(value, str) or not LORA_NAME.match(value):
        raise InvalidRequestError(
            "lora_name: give the adapter's name, 1-200 letters, digits and '_', '.', '@', "
            f"'+', '-' (no ':', which introduces <model>:<adapter>@<version>); got "
            f"{str(value)[:200]!r}",
            "lora_name",
        )
    if value in models:
        raise InvalidRequestError(
            f"lora_name: {value!r} is a configured model's name; name the adapter otherwise",
            "lora_name",
        )
    return value


def check_lora_path(value: object) -> Path:
    """The adapter folder `lora_path` names: a checkpoint version llmrl saved, holding
    adapter_config.json and safetensors weights; else a 400 naming `lora_path`."""
    from llmrl.common.trusted import UntrustedArtifactError, resolve_artifact

    if not isinstance(value, str):
        raise InvalidRequestError("lora_path: give the adapter's folder (a string)", "lora_path")
    try:
        path = resolve_artifact(value, "lora_path")
    except UntrustedArtifactError as exc:
        raise InvalidRequestError(str(exc), "lora_path") from None
    if not (path.is_dir() and (path / ADAPTER_CONFIG).is_file()):
        raise InvalidRequestError(
            f"lora_path: {value[:200]!r} is no LoRA adapter version (a folder holding "
            f"{ADAPTER_CONFIG}, as the learner saves one)",
            "lora_path",
        )
    if not (path / SAFETENSORS_FILE).is_file():
        raise InvalidRequestError(
            f"lora_path: {value[:200]!r} holds no {SAFETENSORS_FILE}; adapters load from "
            "safetensors only (an adapter_model.bin is a pickle and is never opened)",
            "lora_path",
        )
    return path
