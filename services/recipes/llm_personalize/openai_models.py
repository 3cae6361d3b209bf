"""OpenAI models as llm-personalize stages (`finetune_backend=openai`): how the gateway serves
the base model and each fine-tune.

The gateway routes only the models named in its configuration, and a name may not contain
':' (that introduces a LoRA adapter, `<model>:<adapter>@<version>`), so an OpenAI fine-tune
id (`ft:gpt-4o-mini-2024-07-18:org:lp-0:abc123`) cannot be sent to it as is. Each stage is
served under a gateway name derived from the id (`gateway_name`: every character outside
[A-Za-z0-9_.-] becomes '-') by an `openai` backend entry whose `remote_model` is the id:

    models:
      ft-gpt-4o-mini-2024-07-18-org-lp-0-abc123:
        backend: openai
        remote_model: "ft:gpt-4o-mini-2024-07-18:org:lp-0:abc123"
        base_url: https://api.openai.com/v1      # only when set
        api_key_env: OPENAI_API_KEY

`serve_stage_model` adds that entry to the in-process gateway (embedded mode) unless the
gateway's configuration already has the name (then its entry, with its fallback and prices,
wins). A gateway service cannot be configured from a recipe: there the phase stops with the
entry to add to the gateway's YAML; after a gateway restart the run resumes at that phase.
"""

from __future__ import annotations

import re
from typing import Any

import yaml


def gateway_name(openai_model: str) -> str:
    """The gateway model name that serves the OpenAI model `openai_model`."""
    return re.sub(r"[^A-Za-z0-9_.-]", "-", openai_model)


def gateway_entry(openai_model: str, base_url: str | None, api_key_env: str) -> dict[str, Any]:
    """The gateway configuration of one OpenAI model (the key stays in the environment)."""
    entry: dict[str, Any] = {
        "backend": "openai",
        "remote_model": openai_model,
        "api_key_env": api_key_env,
    }
    if base_url:
        entry["base_url"] = base_url
    return entry


def gateway_yaml(models: dict[str, dict[str, Any]]) -> str:
    """`models:` YAML to merge into a gateway configuration file."""
    return yaml.safe_dump({"models": models}, sort_keys=False)


def serve_stage_model(llm: Any, openai_model: str, base_url: str | None, api_key_env: str) -> str:
    """Make the gateway behind `llm` serve `openai_model`; returns the gateway name to use.

    `llm` is the run's gateway client: in-process (it has `.gateway`) the entry is added to
    that gateway's model set; remote, a missing entry is a RuntimeError that shows it."""
    name = gateway_name(openai_model)
    if name in {model["id"] for model in llm.models()}:
        return name
    entry = gateway_entry(openai_model, base_url, api_key_env)
    gateway = getattr(llm, "gateway", None)
    if gateway is None:
        raise RuntimeError(
            f"the LLM gateway service does not serve {openai_model!r}: add this to its "
            "configuration file (LLMRL_LLM_GATEWAY_CONFIG or --config), restart the gateway "
            f"and resume the run:\n{gateway_yaml({name: entry})}"
        )
    from llmrl.llm_gateway.settings import parse_model

    # the embedded gateway loads a model's backend on first use, so a new entry is servable
    # at once; setdefault keeps an entry another thread added meanwhile
    gateway.settings.models.setdefault(name, parse_model(name, entry))
    return name
