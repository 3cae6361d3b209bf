"""`llmrl submit glam ...` on a real stack: the orchestrator runs the recipe, its training runs
as the learner service's policy job "glam" stepping the simulator service over gRPC, and a
rollout worker evaluates the trained adapter through its gateway (tiny model, tiny budget)."""

from __future__ import annotations

import json

import httpx
from support.tiny_llm import TINY_MODEL
from support.tiny_text_env import ENV_ID


def test_submitted_glam_trains_on_the_learner_against_the_simulator_service(service_stack):
    stack, learner = service_stack
    overrides = [
        f"env={ENV_ID}",
        f"model={TINY_MODEL}",
        'methods=["glam"]',
        "train_steps=16",
        "ppo.num_envs=4",
        "ppo.num_steps=2",
        "ppo.minibatch_size=8",
        "ppo.update_epochs=1",
        "eval_every=1",
        "eval_episodes=2",
    ]
    run = stack.submit_and_wait("glam", overrides, 480)
    assert run["status"] == "completed", run.get("error")

    # the training was the learner's policy job, stepping the simulator service
    jobs = httpx.get(f"{learner.health_url.rsplit('/', 1)[0]}/policy-jobs", timeout=5).json()
    (job,) = [j for j in jobs if j["request"]["kind"] == "glam"]
    assert job["request"]["simulator"] == stack.env["LLMRL_SIMULATOR_ADDRESS"]
    assert job["status"] == "succeeded"
    assert job["result"]["global_step"] == 16

    # the worker evaluated the adapter version the learner saved, through its gateway
    results = json.loads(next(stack.home.rglob("results.json")).read_text())
    glam = next(row for row in results["rows"] if row["method"] == "glam")
    assert glam["env_steps"] == 16 and glam["episodes"] == 2
