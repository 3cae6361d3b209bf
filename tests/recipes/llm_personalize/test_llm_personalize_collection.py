"""Self-training collection is reproducible: every collected episode's planner samples with its
own seed, so collecting twice with one config plays the same episodes (with a tiny random
model sampling at temperature 0.7, without any cache), and another seed plays others."""

from __future__ import annotations

from pathlib import Path

from support.tiny_llm import tiny_gateway_settings

from llmrl.agents import RolloutResources
from llmrl.common.store import RunStore
from llmrl.llm_gateway.client import connect
from llmrl.orchestrator.executors import embedded_executor
from llmrl.recipes.config import validate_config
from llmrl.recipes.context import RunContext
from llmrl.recipes.llm_personalize.recipe import LlmPersonalize

CONFIG = {
    "model": "tiny", "data_dir": "procedural", "train_episodes": 2, "collect_samples": 2,
    "max_steps": 4, "max_tokens": 8, "collect_temperature": 0.7, "num_envs": 1,
    "guided": False,  # free sampling: guided, 8 tokens fit only "1. mission complete"
}  # fmt: skip


def collect(tmp_path: Path, llm, seed: int, **settings) -> list[list[str]]:
    """Round 1's collection with `seed` in a fresh run: the model's answers, per episode."""
    config = validate_config("llm-personalize", {**CONFIG, "seed": seed, **settings})
    recipe = LlmPersonalize(config)
    out = tmp_path / f"run-{len(list(tmp_path.iterdir()))}"
    store = RunStore(out / "run.sqlite")
    resources = RolloutResources()
    resources._llm = llm  # this test's gateway (the tiny model, no cache) plays the episodes
    try:
        run_id = store.create_run("llm-personalize", config.model_dump(mode="json"), out)
        store.start_phase(run_id, "train/0")
        store.complete_phase(run_id, "train/0", {"model": "tiny"})  # round 1 samples "tiny"
        ctx = RunContext(
            run_id=run_id, recipe="llm-personalize", config=config, out_dir=out, store=store,
            executor=embedded_executor(store, resources),
        )  # fmt: skip
        (phase,) = [phase for phase in recipe.phases() if phase.name == "collect/1"]
        played = phase.run(ctx)["episodes"]
        records = store.episodes(run_id, phase="collect/1")
        assert played == len(records)
    finally:
        store.close()
    records.sort(key=lambda record: int(record.episode_id.rpartition("/")[2]))
    return [[call.response for call in record.llm_calls] for record in records]


def test_collection_with_one_seed_repeats_and_another_seed_differs(tiny_model_dir, tmp_path):
    llm = connect(**tiny_gateway_settings(tiny_model_dir))  # cache "none": every query runs
    try:
        first = collect(tmp_path, llm, seed=5)
        again = collect(tmp_path, llm, seed=5)
        other = collect(tmp_path, llm, seed=6)
    finally:
        llm.close()
    assert len(first) == 4 and all(first)  # 2 training episodes x 2 samples, each queried
    assert again == first
    assert other != first


def test_collect_episodes_plays_the_first_training_episodes_only(tiny_model_dir, tmp_path):
    llm = connect(**tiny_gateway_settings(tiny_model_dir))
    try:
        first_only = collect(tmp_path, llm, seed=5, collect_episodes=1)
        both = collect(tmp_path, llm, seed=5)
    finally:
        llm.close()
    # episode 0's two samples, drawn with the same seeds as when both episodes are collected
    assert first_only == both[:2]


def test_collection_policies_carry_a_sampling_seed_evaluation_none():
    recipe = LlmPersonalize(validate_config("llm-personalize", {**CONFIG, "seed": 1}))
    seed = recipe.sampling_seed(1, "procedural", 0, 1)
    assert recipe._llm_policy("tiny", 0.7, seed=seed)["kwargs"]["seed"] == seed
    assert seed * 1000 + 999 < 2**31  # the planner's per-query seeds stay 32-bit
    assert "seed" not in recipe._llm_policy("tiny")["kwargs"]  # greedy evaluation
    # rounds, episodes and samples draw differently; so does another run seed
    seeds = {recipe.sampling_seed(k, "procedural", e, s) for k in (1, 2) for e in (0, 1)
             for s in (0, 1)}  # fmt: skip
    assert len(seeds) == 8
    other = LlmPersonalize(validate_config("llm-personalize", {**CONFIG, "seed": 2}))
    assert other.sampling_seed(1, "procedural", 0, 1) != seed
    assert recipe.sampling_seed(1, "procedural", 0, 1) == seed  # and a rerun the same
