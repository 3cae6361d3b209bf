"""Real runs whose LLM is served by another gateway: the process's (front) gateway serves "tiny"
as an `openai` endpoint (`score: true`, the model's tokenizer, `load_adapters`) pointing at a
second llmrl gateway (uvicorn on a free port) that serves the tiny model locally. A When2Ask
LLM-planner evaluation (the `evaluate` recipe, planner `when2ask-llm`) and a tiny GLAM run
(LLM-PPO LoRA trained by the learner on the engine model's `weights`, then evaluated through
the gateway as `tiny:<adapter>@<version>`, which the front publishes to the engine's
`/v1/load_lora_adapter`) play the same episodes (actions, skills, returns) as the same runs
on a local gateway at the same seed. Scores through the engine are within ~2e-5 of the local
ones (other shapes of computation: see docs/operations/gateway.md), so greedy choices match."""

from __future__ import annotations

import json
import re
from pathlib import Path
from typing import Any

import pytest
import support.tiny_text_env  # noqa: F401  (registers TinyTextGoForward)
import yaml
from support.tiny_llm import TINY_MODEL, make_tiny_llama, tiny_gateway_settings
from support.tiny_text_env import ENV_ID

import llmrl.llm_gateway.client as gateway_client
from llmrl.llm_gateway.gateway import Gateway
from llmrl.llm_gateway.rest import create_app
from llmrl.llm_gateway.service import RestServer
from llmrl.orchestrator.embedded import run_embedded

WHEN2ASK = {"env": "SimpleDoorKey", "planner": "when2ask-llm", "episodes": 3, "max_steps": 20}
GLAM = {
    "env": ENV_ID,
    "model": TINY_MODEL,
    "methods": ["zero-shot", "glam"],
    "eval_every": 2,
    "train_steps": 16 * 2,
    "ppo": {
        "num_envs": 8,
        "num_steps": 2,
        "minibatch_size": 16,
        "update_epochs": 1,
        "learning_rate": 1e-2,
        "reduction": "mean",
    },
    "eval_episodes": 4,
    "greedy": True,
}


@pytest.fixture(scope="module")
def flat_model(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """GLAM's tiny model (near-uniform over phrases, as tests/recipes/glam's)."""
    return make_tiny_llama(tmp_path_factory.mktemp("flat-llama"), initializer_range=0.02)


@pytest.fixture(scope="module")
def engine(flat_model: Path) -> Any:
    """The engine: a second gateway serving the tiny model locally, on a free port."""
    back = Gateway(tiny_gateway_settings(flat_model), mode="embedded")
    server = RestServer(create_app(back)).start()
    yield back, server
    server.stop()
    back.close()


def front_settings(model_dir: Path, url: str) -> dict[str, Any]:
    """The process's gateway: "tiny" served by the engine at `url`."""
    settings = tiny_gateway_settings(model_dir)
    settings["models"] = {
        TINY_MODEL: {"backend": "openai", "base_url": f"{url}/v1", "remote_model": TINY_MODEL,
                     "max_retries": 0, "score": True, "tokenizer": str(model_dir),
                     "weights": str(model_dir), "load_adapters": True}
    }  # fmt: skip
    return settings


def run(
    recipe: str, config: dict[str, Any], settings: dict[str, Any], root: Path
) -> dict[str, list[dict[str, Any]]]:
    """The recipe run embedded with `settings` as the process's gateway (its own home):
    every episode file's episodes, in order, as what was played."""
    root.mkdir()
    (root / "gateway.yaml").write_text(yaml.safe_dump(settings))
    with pytest.MonkeyPatch.context() as patch:
        patch.setenv("LLMRL_LLM_GATEWAY_CONFIG", str(root / "gateway.yaml"))
        patch.setenv("LLMRL_HOME", str(root / "home"))
        patch.setattr(gateway_client, "_shared_gateway", None)
        run_embedded(recipe, config, out_dir=root / "run", progress=False)
        shared = gateway_client._shared_gateway
        if shared is not None:
            shared.close()
    played = {}
    for path in sorted((root / "run" / "episodes").glob("*.jsonl")):
        played[path.name] = [played_episode(json.loads(line)) for line in path.open()]
    assert played and all(played.values())
    return played


def scored(root: Path) -> list[float]:
    """Every log-prob the run's LLM calls recorded, in order."""
    values: list[float] = []
    for path in sorted((root / "run" / "episodes").glob("*.jsonl")):
        for line in path.open():
            for call in json.loads(line)["llm_calls"]:  # GLAM's, then When2Ask's
                values.extend(call["info"].get("logprobs") or [])
                values.extend((call["info"].get("candidates") or {}).values())
    return values


def assert_scores_close(local: Path, through: Path) -> None:
    """The engine's scores are the local ones within float32 noise, not bit for bit: the
    engine computes each prompt + candidate as one sequence, the local model the prompt's KV
    then its candidates packed in one pass (other shapes, other reduction order)."""
    expected, got = scored(local), scored(through)
    assert expected and len(got) == len(expected)
    assert got == pytest.approx(expected, abs=1e-4)
    print(
        f"max score difference: {max(abs(a - b) for a, b in zip(got, expected, strict=True)):.2e}"
    )


def played_episode(record: dict[str, Any]) -> dict[str, Any]:
    return {
        "episode": record["episode_id"],
        "seed": record["seed"],
        "actions": [step.get("action") for step in record["steps"]],
        "skills": [step.get("skill") for step in record["steps"]],
        "rewards": [step.get("reward") for step in record["steps"]],
        "return": record["episode_return"],
        "success": record["success"],
        # a run's adapter line is named after its run id, which differs between the runs
        "models": sorted({re.sub(r"-[^@]+@", "-<run>@", c["model"]) for c in record["llm_calls"]}),
    }


def test_a_when2ask_llm_evaluation_through_another_gateway_plays_as_locally(
    flat_model, engine, tmp_path
):
    back, server = engine
    before = back.metrics.render()
    local = run("evaluate", WHEN2ASK, tiny_gateway_settings(flat_model), tmp_path / "local")
    through = run("evaluate", WHEN2ASK, front_settings(flat_model, server.url), tmp_path / "eng")
    assert through == local
    assert_scores_close(tmp_path / "local", tmp_path / "eng")
    episodes = [e for rows in local.values() for e in rows]
    assert len(episodes) == 3 and any(e["models"] for e in episodes)  # the planner asked
    assert back.metrics.render() != before  # the engine did the scoring


def test_a_glam_run_through_another_gateway_plays_as_locally(flat_model, engine, tmp_path):
    back, server = engine
    local = run("glam", GLAM, tiny_gateway_settings(flat_model), tmp_path / "local")
    through = run("glam", GLAM, front_settings(flat_model, server.url), tmp_path / "eng")
    assert through == local
    assert_scores_close(tmp_path / "local", tmp_path / "eng")
    # the trained adapter was evaluated as <model>:<adapter>@<version>, published to the
    # engine under its default name there, <adapter>@<version>
    models = {m for rows in through.values() for e in rows for m in e["models"]}
    assert models == {TINY_MODEL, f"{TINY_MODEL}:glam-<run>@1"}
    assert any(re.fullmatch(r"glam-\S+@1", name) for name in back.lora_adapters())
