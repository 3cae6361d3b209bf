"""The when2ask recipe end to end in embedded mode, at a tiny scale; its phase plan."""

from __future__ import annotations

import json

import pytest

from llmrl.common.store import RunStore
from llmrl.orchestrator.compare import RunData, build_report
from llmrl.orchestrator.embedded import run_embedded
from llmrl.recipes.config import ConfigError, validate_config
from llmrl.recipes.results import Results
from llmrl.recipes.when2ask.recipe import When2Ask


def phase_names(**config) -> list[str]:
    return [p.name for p in When2Ask(validate_config("when2ask", config)).phases()]


def test_phase_plan_follows_the_methods():
    names = phase_names(envs=["KeyInBox"], never_ask_steps=0)
    assert names == [
        "train/KeyInBox",
        "evaluate/KeyInBox/learned",
        "evaluate/KeyInBox/always",
        "evaluate/KeyInBox/forced-only",
        "evaluate/KeyInBox/news-or-skill-end",
        "evaluate/KeyInBox/random",
        "report",
    ]
    assert phase_names(envs=["KeyInBox"], methods=["always"]) == [
        "evaluate/KeyInBox/always",
        "report",
    ]


@pytest.mark.parametrize(
    ("config", "field"),
    [
        ({"envs": ["Nope"]}, "envs"),
        ({"methods": ["sometimes"]}, "methods"),
        ({"lam": -1}, "lam"),
        ({"new_plan_bonus": -0.1}, "new_plan_bonus"),
        ({"max_steps": 0}, "max_steps"),
        ({"planner_noise_mode": "sometimes"}, "planner_noise_mode"),
        ({"lr_schedule": "cosine"}, "lr_schedule"),
    ],
)
def test_bad_config_names_the_field(config, field):
    with pytest.raises(ConfigError, match=f"config.{field}"):
        validate_config("when2ask", config)


def test_the_old_name_of_forced_only_is_an_unknown_method():
    """`hard-coded`, forced-only's name before the paper's rule joined it: the history files
    that used it are read at their own commits (research/), not by today's config."""
    with pytest.raises(
        ConfigError, match=r"config\.methods: .*unknown method\(s\) \['hard-coded'\]"
    ):
        validate_config("when2ask", {"methods": ["hard-coded"]})


def test_noisy_planner_spec_carries_p_and_seed():
    recipe = When2Ask(validate_config("when2ask", {"planner": "noisy", "planner_noise": 0.3}))
    assert recipe.planner_spec() == {"name": "noisy-oracle", "kwargs": {"p": 0.3, "seed": 0}}
    with pytest.raises(ConfigError, match=r"config\.planner_noise"):
        validate_config("when2ask", {"planner": "noisy", "planner_noise": 1.5})
    persistent = {"planner": "noisy", "planner_noise": 0.3, "planner_noise_mode": "persistent"}
    assert When2Ask(validate_config("when2ask", persistent)).planner_spec() == {
        "name": "noisy-oracle",
        "kwargs": {"p": 0.3, "seed": 0, "mode": "persistent"},
    }


def test_step_cap_truncates_evaluation_episodes(tmp_path):
    # The oracle needs 16-20 steps on SimpleDoorKey: a cap of 5 ends every episode unsolved.
    config = {"envs": ["SimpleDoorKey"], "methods": ["always"], "eval_episodes": 3}
    run_embedded("when2ask", {**config, "max_steps": 5}, out_dir=tmp_path / "5", progress=False)
    row = json.loads((tmp_path / "5" / "results.json").read_text())["rows"][0]
    assert row["steps/ep"] == 5 and row["success_%"] == 0
    assert row["queries/ep"] == 5  # always-ask: one query per step, none after the cap
    run_embedded("when2ask", config, out_dir=tmp_path / "200", progress=False)
    row = json.loads((tmp_path / "200" / "results.json").read_text())["rows"][0]
    assert row["success_%"] == 100 and row["steps/ep"] > 5


def test_random_ask_without_learned_needs_its_rate():
    with pytest.raises(ConfigError, match="random_ask_p"):
        validate_config("when2ask", {"methods": ["random"]})
    assert validate_config("when2ask", {"methods": ["random"], "random_ask_p": 0.2})


def test_until_confident_needs_the_confidence_feature():
    with pytest.raises(ConfigError, match="mediator_sees_confidence"):
        validate_config("when2ask", {"methods": ["until-confident"]})
    with pytest.raises(ConfigError, match="confident_at"):
        validate_config("when2ask", {"confident_at": 1.5})
    config = {"methods": ["until-confident"], "mediator_sees_confidence": True}
    assert validate_config("when2ask", config)


def test_tiny_run_writes_table_plots_and_models(tmp_path):
    config = {
        "envs": ["SimpleDoorKey"],
        "train_steps": 256,
        "never_ask_steps": 256,
        "n_envs": 2,
        "n_steps": 64,
        "eval_episodes": 3,
    }
    run_embedded("when2ask", config, out_dir=tmp_path, progress=False)
    results = json.loads((tmp_path / "results.json").read_text())
    methods = [row["method"] for row in results["rows"]]
    assert methods == [
        "learned",
        "always",
        "forced-only",
        "news-or-skill-end",
        "random",
        "never-ask",
    ]
    by_method = {row["method"]: row for row in results["rows"]}
    # Always-ask queries at every step; forced-only only when forced; the paper's rule between.
    assert by_method["always"]["queries/ep"] == pytest.approx(by_method["always"]["steps/ep"])
    forced, news = by_method["forced-only"]["queries/ep"], by_method["news-or-skill-end"]
    assert forced < news["queries/ep"] < by_method["always"]["queries/ep"]
    assert by_method["never-ask"]["queries/ep"] == 0
    # the recipe's targets judge its table (in an experiment report, here of this one run)
    run = RunData("tiny", "when2ask", {"seed": 0}, "completed", Results.from_dict(results))
    report = build_report([run], tmp_path / "report", "tiny", plots=False)
    targets = [verdict["target"] for verdict in report["verdicts"]]
    assert targets[0].startswith("SimpleDoorKey: learned − best fixed rule")
    assert "SimpleDoorKey: learned's queries/ep as a share of always-ask's" in targets
    for name in results["plots"]:
        assert (tmp_path / name).stat().st_size > 0
    assert (tmp_path / "models" / "SimpleDoorKey-asking.zip").exists()
    assert list((tmp_path / "tb").rglob("events.out.tfevents*"))


def test_step_cap_reaches_training(tmp_path):
    config = {
        "envs": ["SimpleDoorKey"], "methods": ["learned"], "train_steps": 64, "n_envs": 2,
        "n_steps": 16, "eval_episodes": 2, "max_steps": 4, "planner": "noisy",
        "planner_noise": 0.5, "planner_noise_mode": "persistent",
    }  # fmt: skip
    run = run_embedded("when2ask", config, out_dir=tmp_path, progress=False)
    store = RunStore(tmp_path / "run.sqlite")
    try:
        curve = store.phase_outputs(run.run_id, "train/SimpleDoorKey")["curve"]
    finally:
        store.close()
    assert len(curve) >= 64 // 4  # every training episode ended at the cap
    assert all(point["l"] == 4 and not point["success"] for point in curve)
    # with the noisy planner the table says how each method met its errors
    row = json.loads((tmp_path / "results.json").read_text())["rows"][0]
    assert 0 <= row["wrong_plans/ep"] <= row["queries/ep"]
    assert row["wrong_plans/ep"] <= row["wrong_plan_steps/ep"] <= row["steps/ep"]


def test_an_annealed_learning_rate_reaches_the_mediators_training(tmp_path):
    from stable_baselines3 import PPO

    config = {
        "envs": ["SimpleDoorKey"], "methods": ["learned"], "train_steps": 64, "n_envs": 2,
        "n_steps": 16, "eval_episodes": 1, "learning_rate": 0.002, "lr_schedule": "linear",
    }  # fmt: skip
    run_embedded("when2ask", config, out_dir=tmp_path, progress=False)
    model = PPO.load(str(tmp_path / "models" / "SimpleDoorKey-asking.zip"), device="cpu")
    assert model.lr_schedule(1.0) == pytest.approx(0.002)
    assert model.policy.optimizer.param_groups[0]["lr"] == pytest.approx(0.0)  # the last update


def test_a_mediator_that_sees_its_plan_trains_and_plays_on_the_wider_observation(tmp_path):
    """The skill in hand, the agent's knowledge and the object count widen what PPO trains and
    plays on (the skill's features once, whether sees_plan, sees_knowledge or both ask)."""
    from stable_baselines3 import PPO

    from llmrl.recipes.when2ask.mediator import KNOWLEDGE_FEATURES, OBS_SIZE, PLAN_FEATURES

    config = {
        "envs": ["SimpleDoorKey"], "methods": ["learned"], "train_steps": 64, "n_envs": 2,
        "n_steps": 16, "eval_episodes": 2, "mediator_sees_plan": True,
        "mediator_counts_objects": True, "mediator_sees_knowledge": True, "planner": "noisy",
        "planner_noise": 0.3, "planner_noise_mode": "distractors",
    }  # fmt: skip
    run_embedded("when2ask", config, out_dir=tmp_path, progress=False)
    results = json.loads((tmp_path / "results.json").read_text())
    assert [row["method"] for row in results["rows"]] == ["learned"]
    assert results["rows"][0]["queries/ep"] >= 1  # it played: the first query is forced
    model = PPO.load(tmp_path / "models" / "SimpleDoorKey-asking.zip")
    assert model.observation_space.shape == (OBS_SIZE + PLAN_FEATURES + KNOWLEDGE_FEATURES + 1,)
    assert any("sees the skill in hand" in note for note in results["notes"])
    assert any("reads the planner's input" in note for note in results["notes"])
    assert any("counts the objects it knows" in note for note in results["notes"])
    assert any("distractors errors" in note for note in results["notes"])
