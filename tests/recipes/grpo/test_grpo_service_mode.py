"""`llmrl submit grpo ...` on a real stack: the orchestrator runs the recipe, TRL's GRPO trains
in the recipe's process stepping the simulator service over gRPC (not on the learner: its CPU
time is half of the comparison), and a rollout worker evaluates the saved adapter through its
gateway (tiny model, tiny budget)."""

from __future__ import annotations

import json

import httpx
from support.tiny_llm import TINY_MODEL
from support.tiny_text_env import ENV_ID


def test_submitted_grpo_trains_against_the_simulator_service(service_stack):
    stack, learner = service_stack
    overrides = [
        f"env={ENV_ID}",
        f"model={TINY_MODEL}",
        "methods=[grpo]",
        "train_steps=8",
        "group_size=2",
        "learning_rate=0.05",
        "lora_r=4",
        "eval_every=2",
        "eval_episodes=2",
    ]
    run = stack.submit_and_wait("grpo", overrides, 600)
    assert run["status"] == "completed", run.get("error")

    # nothing went to the learner: the run trained in its own process
    jobs = httpx.get(f"{learner.health_url.rsplit('/', 1)[0]}/policy-jobs", timeout=5).json()
    assert jobs == []
    results = json.loads(next(stack.home.rglob("results.json")).read_text())
    (grpo,) = results["rows"]
    assert grpo["method"] == "grpo" and grpo["env_steps"] == 8 and grpo["episodes"] == 2
    assert grpo["cpu_minutes"] > 0 and results["provenance"]["mode"] == "services"
