"""The recipe `grpo` end to end in embedded mode with a tiny random model on a trivial text
env: TRL trains the LoRA, the episodes spend the configured env steps, the ledger counts the
generated tokens; and its config errors name the key."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
import support.tiny_text_env  # noqa: F401  (registers TinyTextGoForward)
from support.tiny_llm import TINY_MODEL
from support.tiny_text_env import ENV_ID, PHRASES

from llmrl.orchestrator.embedded import run_embedded
from llmrl.recipes.config import ConfigError, validate_config


def scalars(tb: Path, tag: str) -> list[float]:
    from tensorboard.backend.event_processing.event_accumulator import EventAccumulator

    return [float(s.value) for s in EventAccumulator(str(tb)).Reload().Scalars(tag)]


def lora_b(adapter: Path) -> dict[str, object]:
    from safetensors.torch import load_file

    weights = load_file(str(adapter / "adapter_model.safetensors"))
    return {name: w for name, w in weights.items() if "lora_B" in name}


@pytest.mark.parametrize(
    ("config", "key"),
    [
        ({"env": "NoSuchEnv"}, "env"),
        ({"env": "SimpleDoorKey"}, "env"),  # registered, but not a text env with phrases
        ({"group_size": 1}, "group_size"),  # GRPO needs a group to compare within
        ({"train_steps": 0}, "train_steps"),
        ({"learning_rate": 0}, "learning_rate"),
        ({"lora_r": 0}, "lora_r"),
        ({"methods": ["grpo", "ppo"]}, "methods"),
        ({"scale_rewards": "max"}, "scale_rewards"),
        ({"device": "tpu"}, "device"),
        ({"glam": {"ppo": {"num_envs": 0}}}, "glam.*ppo.num_envs"),
        ({"glam": {"num_envs": 8}}, "glam.*num_envs"),  # a flat key: refused
        ({"glam": {"train_steps": 5}}, "glam"),  # the recipe's own key, set at the top
    ],
)
def test_bad_config_names_the_key(config, key):
    with pytest.raises(ConfigError, match=f"config.{key}"):
        validate_config("grpo", config)


@pytest.mark.parametrize(
    ("config", "key"), [({"use_vllm": True}, "use_vllm"), ({"hf_model": "org/x"}, "hf_model")]
)
def test_gpu_options_are_refused_on_a_cpu(config, key):
    with pytest.raises(ConfigError, match=f"{key}: .*"):
        validate_config("grpo", config)
    validate_config("grpo", {**config, "device": "cuda"})  # accepted where they can run


def test_a_tiny_run_trains_with_trl_and_counts_steps_and_tokens(tiny_gateway: Path, tmp_path):
    config = {
        "env": ENV_ID,
        "model": TINY_MODEL,
        "methods": ["base", "grpo"],
        "train_steps": 40,
        "group_size": 4,
        "learning_rate": 0.05,
        "lora_r": 4,
        "lora_layers": None,
        "eval_every": 2,
        "eval_episodes": 4,
    }
    out = tmp_path / "run"
    run = run_embedded("grpo", config, out_dir=out, progress=False)
    results = json.loads((out / "results.json").read_text())
    rows = {row["method"]: row for row in results["rows"]}
    assert sorted(rows) == ["base", "grpo"]
    # the budget is spent to the step: the last batch's episodes are cut to fit it
    assert rows["grpo"]["env_steps"] == 40 and rows["base"]["env_steps"] == 0
    assert rows["grpo"]["cpu_minutes"] > 0
    assert results["plots"] == ["learning_curve.png"]

    # the adapter learned: LoRA B starts at zero, TRL's updates moved it
    versions = sorted((out / "models" / "grpo").glob("v*"))
    assert len(versions) >= 2
    assert any(float(w.abs().sum()) > 0 for w in lora_b(versions[-1]).values())
    # TRL's loss, and the episodes' env steps by step count, are in TensorBoard
    tb = out / "tb" / "train" / "grpo"
    assert scalars(tb, "losses/loss")
    lengths = scalars(tb, "charts/episodic_length")
    assert sum(lengths) == 40 and all(1 <= n <= 3 for n in lengths)
    # every generation is in the run's ledger, as the end-of-run summary reads it
    from llmrl.llm_gateway.client import connect

    usage = connect().usage(run.run_id)
    grpo = usage["tags"]["grpo"]
    assert grpo["requests"] == 40  # one generated phrase per env step
    assert grpo["completion_tokens"] >= 40 * 2 and grpo["prompt_tokens"] > grpo["completion_tokens"]
    assert grpo["cost_usd"] == 0
    # held-out episodes play the env's phrases only
    skills = {
        step["skill"]
        for line in (out / "episodes" / "evaluate-grpo.jsonl").open()
        for step in json.loads(line)["steps"]
    }
    assert skills and skills <= set(PHRASES)


@pytest.mark.parametrize(
    ("policy", "says"),
    [
        ({"model": "/etc"}, "policy.model"),  # a path is no model name
        ({"model": "tiny", "adapter": "/etc"}, "policy.adapter"),  # not a version llmrl saved
        ({"model": "tiny", "hub_model": "../x"}, "policy.hub_model"),
    ],
)
def test_a_policy_spec_names_a_model_and_a_saved_adapter_never_a_path(policy, says):
    """A run's `policy` (request data in service mode) cannot make a worker open a path."""
    with pytest.raises(ConfigError) as refused:
        validate_config("evaluate", {"env": ENV_ID, "policy": {"kind": "grpo", **policy}})
    assert says in str(refused.value)
