"""The recipe `glam` end to end in embedded mode with a tiny model on a trivial text env;
its config errors; the driver scores as the gateway does."""

from __future__ import annotations

import json
import re
from pathlib import Path

import numpy as np
import pytest
import support.tiny_text_env  # noqa: F401  (registers TinyTextGoForward)
from support.tiny_llm import TINY_MODEL, tiny_gateway_settings
from support.tiny_text_env import CORRECT, ENV_ID, PHRASES

from llmrl.agents import EpisodeJob, RolloutResources, make_driver
from llmrl.common.episodes import EpisodeRecord, LlmCall
from llmrl.llm_gateway.client import connect
from llmrl.orchestrator.embedded import run_embedded
from llmrl.orchestrator.experiments import plan_experiment, spec_from_arguments
from llmrl.recipes.config import ConfigError, validate_config
from llmrl.recipes.glam.prompt import PromptHistory, action_phrases
from llmrl.recipes.glam.recipe import Glam
from llmrl.recipes.glam.report import action_distribution


def eval_scalars(out: Path, tag: str) -> list[tuple[int, float]]:
    from tensorboard.backend.event_processing.event_accumulator import EventAccumulator

    events = EventAccumulator(str(out / "tb")).Reload()
    return [(int(s.step), float(s.value)) for s in events.Scalars(tag)]


def stored_success(episodes: Path) -> float:
    records = [json.loads(line) for line in episodes.open()]
    assert records
    return sum(bool(r["success"]) for r in records) / len(records)


def phase_names(**config) -> list[str]:
    return [p.name for p in Glam(validate_config("glam", config)).phases()]


def test_phase_plan_follows_methods_and_variants():
    assert phase_names(methods=["zero-shot", "glam", "random"], variants=["nouns"]) == [
        "evaluate/zero-shot",
        "train/glam",
        "evaluate/glam",
        "evaluate/random",
        "generalise/zero-shot/nouns",
        "generalise/glam/nouns",
        "generalise/random/nouns",
        "report",
    ]
    assert phase_names(methods=["random"]) == ["evaluate/random", "report"]
    assert phase_names(methods=["npae", "symbolic-ppo", "bc"]) == [
        "train/npae",
        "evaluate/npae",
        "train/symbolic-ppo",
        "evaluate/symbolic-ppo",
        "demos/bc",
        "train/bc",
        "evaluate/bc",
        "report",
    ]


@pytest.mark.parametrize(
    ("config", "key"),
    [
        ({"env": "NoSuchEnv"}, "env"),
        ({"env": "SimpleDoorKey"}, "env"),  # registered, but not a GLAM text env
        ({"ppo": {"device": "gpu"}}, "ppo.device"),
        ({"variants": ["klingon"]}, "variants"),
        ({"methods": ["npae-by-magic"]}, "methods"),
        ({"train_steps": -5}, "train_steps"),
        ({"ppo": {"num_envs": 0}}, "ppo.num_envs"),
        ({"eval_episodes": -1}, "eval_episodes"),
        ({"ppo": {"reduction": "max"}}, "ppo.reduction"),
        ({"ppo": {"lora_layers": 0}}, "ppo.lora_layers"),
        ({"ppo": {"lora_r": 0}}, "ppo.lora_r"),
        ({"ppo": {"learning_rate": "fast"}}, "ppo.learning_rate"),
        ({"ppo": {"bogus": 1}}, "ppo.bogus: unknown key; ppo's keys: num_envs"),
        ({"eval_every": 0}, "eval_every"),
        ({"eval_every": -2}, "eval_every"),
        ({"methods": ["glam", "dqn"]}, "methods"),
        ({"drrn_learning_rate": 0}, "drrn_learning_rate"),
        ({"bc_steps": 0}, "bc_steps"),
        ({"npae_learning_rate": 0}, "npae_learning_rate"),
        ({"finetune": "qlora"}, "finetune"),
        ({"ppo": {"vf_coef": -1}}, "ppo.vf_coef"),
        ({"ppo": {"gamma": 1.5}}, "ppo.gamma"),
    ],
)
def test_bad_config_names_the_key(config, key):
    with pytest.raises(ConfigError, match=f"config.{key}"):
        validate_config("glam", config)


@pytest.mark.parametrize("key", ["learning_rate", "num_envs", "gamma", "lora_layers", "device"])
def test_a_flat_llm_ppo_key_is_refused_with_its_place_in_the_ppo_group(key: str):
    """LLM-PPO's settings are one group, declared once (`LlmPpoSettings`): a flat key, as
    experiment files wrote them before, is refused naming where it went."""
    with pytest.raises(
        ConfigError, match=rf"config\.{key}: moved into the ppo group: write ppo\.{key}="
    ):
        validate_config("glam", {key: 1})
    sweep = spec_from_arguments("glam", [f"{key}=[1,2]"])
    with pytest.raises(ConfigError, match=rf"grid\.{key}: moved into the ppo group"):
        plan_experiment(sweep, "flat-key")


def test_a_ppo_key_is_set_in_yaml_on_the_command_line_and_as_a_grid_axis():
    """`ppo: {...}`, `ppo.<key>=...` and a `ppo.<key>=[...]` grid axis reach the same group;
    the keys not given keep the group's defaults."""
    config = validate_config("glam", {"ppo": {"learning_rate": 0.001, "num_envs": 4}})
    assert (config.ppo.learning_rate, config.ppo.num_envs, config.ppo.num_steps) == (0.001, 4, 40)
    sweep = spec_from_arguments("glam", ["ppo.learning_rate=[0.001,0.0001]", "ppo.num_envs=4"])
    planned = plan_experiment(sweep, "ppo-grid")
    assert [run.point for run in planned] == [
        {"ppo.learning_rate": 0.001},
        {"ppo.learning_rate": 0.0001},
    ]
    assert [(r.config["ppo"]["learning_rate"], r.config["ppo"]["num_envs"]) for r in planned] == [
        (0.001, 4),
        (0.0001, 4),
    ]
    with pytest.raises(ConfigError, match=r"config\.ppo\.learning_rat: unknown key"):
        plan_experiment(spec_from_arguments("glam", ["ppo.learning_rat=[1,2]"]), "typo")


@pytest.mark.parametrize("old", ["rollout_steps", "lora_rank"])
def test_a_key_of_an_older_schema_is_an_unknown_key(old: str):
    """The names num_steps and lora_r had before: history files that used them are read at
    their own commits (research/), so today's config knows them no more than any other."""
    with pytest.raises(ConfigError, match=rf"config\.{old}: "):
        validate_config("glam", {old: 8})
    sweep = spec_from_arguments("glam", [f"{old}=[4,8]"])
    with pytest.raises(ConfigError, match=rf"grid\.{old}: unknown config key"):
        plan_experiment(sweep, "old-key")


def test_the_driver_scores_as_the_gateway(tiny_gateway: Path):
    llm = connect(**tiny_gateway_settings(tiny_gateway))
    job = EpisodeJob(run_id="r", episode_id="e/0", env=ENV_ID, seed=3, policy={})
    policy = {"kind": "glam", "model": TINY_MODEL, "reduction": "sum", "greedy": True}
    resources = RolloutResources(simulator=None, llm_gateway=None)
    resources._llm = llm  # this test's gateway, not the process's shared one
    driver = make_driver(policy, resources, job)
    observation = {"text": "You see the goal 1 step forward", "mission": "go to the goal"}
    decision = driver.act(observation, 0)

    history = PromptHistory(PHRASES)
    history.start(observation["mission"], observation["text"])
    served = llm.score(history.prompt(), [" " + p for p in PHRASES], model=TINY_MODEL)
    (call,) = decision.llm_calls
    assert call.messages[0]["content"] == history.prompt()
    assert call.info["logprobs"] == pytest.approx(served.logprobs, abs=1e-5)
    assert decision.skill == PHRASES[int(np.argmax(served.logprobs))]
    llm.close()


def test_a_tiny_run_trains_and_compares_the_methods(tiny_gateway: Path, tmp_path: Path):
    config = {
        "env": ENV_ID,
        "model": TINY_MODEL,
        "methods": ["zero-shot", "glam", "random"],
        "eval_every": 5,
        "train_steps": 16 * 10,
        "ppo": {
            "num_envs": 8,
            "num_steps": 2,
            "minibatch_size": 16,
            "update_epochs": 2,
            "learning_rate": 1e-2,
            "reduction": "mean",
        },
        "eval_episodes": 6,
        "greedy": True,  # argmax: the trained policy's one step is certain
    }
    out = tmp_path / "run"
    run_embedded("glam", config, out_dir=out, progress=False)
    results = json.loads((out / "results.json").read_text())
    by_method = {row["method"]: row for row in results["rows"]}
    assert sorted(by_method) == ["glam", "random", "zero-shot"]
    assert all(row["test"] == "train" for row in results["rows"])
    assert by_method["glam"]["env_steps"] == 160 and by_method["zero-shot"]["env_steps"] == 0
    assert any(re.search(r"tiny:glam-\S+@\d+ after 160 env steps", n) for n in results["notes"])
    # the trained policy goes forward at once; the random baseline does not always
    assert by_method["glam"]["success_rate"] == 1.0
    assert by_method["glam"]["mean_length"] == 1.0
    assert CORRECT in PHRASES
    assert results["plots"] == ["eval_curve.png", "learning_curve.png"]
    assert (out / "learning_curve.png").stat().st_size > 0
    # the report says how each LLM policy spread its probability over the phrases
    shares = {
        note.split(":")[0]: dict(
            (part.rsplit(" ", 1)[0], float(part.rsplit(" ", 1)[1]))
            for part in note.split(": ", 2)[2].split(", ")
        )
        for note in results["notes"]
        if "mean policy over its held-out steps" in note
    }
    assert sorted(shares) == ["glam", "zero-shot"]  # random scores nothing
    assert max(shares["glam"], key=shares["glam"].get) == CORRECT
    assert sum(shares["glam"].values()) == pytest.approx(1.0, abs=0.02)
    # held-out evaluations every 5 updates of 16 steps: after 80 and 160 env steps
    assert eval_scalars(out, "eval/glam/success_rate") == [
        (80, pytest.approx(stored_success(out / "episodes" / "curve-glam-5.jsonl"))),
        (160, 1.0),
    ]


def test_random_baseline_plays_babyai_text_variants_and_test_mixes(tmp_path: Path):
    config = {
        "methods": ["random"],
        "variants": ["actions", "french", "BabyAIText-MixTestNewObjects"],
        "eval_episodes": 3,
        "max_steps": 8,
    }
    run_embedded("glam", config, out_dir=tmp_path, progress=False)
    rows = json.loads((tmp_path / "results.json").read_text())["rows"]
    assert [row["test"] for row in rows] == [
        "train",
        "actions",
        "french",
        "BabyAIText-MixTestNewObjects",
    ]
    phrases = {
        step["skill"]
        for line in (tmp_path / "episodes" / "generalise-random-french.jsonl").open()
        for step in json.loads(line)["steps"]
    }
    assert phrases and not phrases & {"turn left", "turn right", "go forward"}  # French ones
    first, french = rows[0], rows[2]
    # the same seeds and choices by index: a renamed vocabulary changes nothing for random
    assert french["success_change"] == 0.0 and french["mean_length"] == first["mean_length"]


def test_learning_curve_of_a_training_that_wrote_no_events_is_no_plot(tmp_path):
    """A run whose training resumed from a line already at its last update has no
    TensorBoard folder: the report goes on without the plot instead of failing."""
    from llmrl.recipes.glam.report import plot_learning_curve

    path = tmp_path / "learning_curve.png"
    assert plot_learning_curve(tmp_path / "tb" / "train" / "glam", path, "t") is False
    assert not path.exists()


def test_action_distribution_averages_what_each_step_scored():
    def call(probabilities, phrases=None):
        info = {"probabilities": probabilities}
        if phrases:
            info["phrases"] = phrases
        return LlmCall(t=0, messages=[], response="", info=info)

    record = EpisodeRecord(run_id="r", episode_id="e/0", env=ENV_ID, seed=0, policy="glam")
    record.llm_calls = [call([0.5, 0.5], ["a", "b"]), call([1.0, 0.0], ["a", "b"])]
    assert action_distribution([record]) == {"a": 0.75, "b": 0.25}
    older = EpisodeRecord(run_id="r", episode_id="e/1", env=ENV_ID, seed=1, policy="glam")
    older.llm_calls = [call([1 / 6] * 6)]  # written before calls named their phrases
    assert list(action_distribution([older])) == list(action_phrases("babyai"))
    silent = EpisodeRecord(run_id="r", episode_id="e/2", env=ENV_ID, seed=2, policy="random")
    assert action_distribution([silent]) == {}
