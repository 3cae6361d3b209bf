"""ELLM with Stable-Baselines3 PPO as the learner (`agent=ppo`): the SB3 adapter's same-step
autoreset reports the wrapper's own episodes and rewards, a tiny run pretrains, evaluates and
fine-tunes from the PPO weights, a resumed job continues from its version, bad values are named."""

from __future__ import annotations

import copy
import json
from pathlib import Path

import numpy as np
import pytest
import support.tiny_crafter_text  # noqa: F401  (registers TinyCrafterText)
import torch
from stable_baselines3 import PPO
from support.tiny_crafter_text import ENV_ID

from llmrl.learner.policy_jobs import PolicyJobError, parse_policy_job
from llmrl.learner.versions import Versions
from llmrl.orchestrator.embedded import run_embedded
from llmrl.recipes.config import ConfigError, validate_config
from llmrl.recipes.ellm.intrinsic import IntrinsicRewardWrapper
from llmrl.recipes.ellm.ppo import SOURCE_FILE, load_policy, make_vec_env
from llmrl.recipes.ellm.training import (
    EllmEnvSettings,
    EllmTrainingJob,
    evaluate_agent,
    make_env,
    train_ellm,
)

TINY_PPO = {
    "env": ENV_ID,
    "num_envs": 4,
    "pretrain_frames": 420,
    "finetune_frames": 420,
    "eval_episodes": 4,
    "checkpoint_every": 200,
    "agent": "ppo",
    "ppo": {"n_steps": 16, "batch_size": 32, "n_epochs": 2, "policy_kwargs": {"net_arch": [32]}},
}


def test_the_sb3_adapter_reports_the_wrappers_episodes_and_rewards():
    # deterministic rewards (crafter's and the task's; a novelty reward would learn on the
    # NEXT_STEP reset steps too, which same-step autoreset does not take)
    settings = EllmEnvSettings(
        env=ENV_ID,
        num_envs=1,
        method="none",
        extrinsic_scale=1.0,
        task="place crafting table",
        seed=3,
    )
    rng = np.random.default_rng(0)
    actions = rng.integers(0, 5, size=(70, 1))  # the tiny env has 5 actions
    wrapper = make_env(settings)
    reference, rewards = [], 0.0
    try:  # NEXT_STEP: the step after an end only resets (reward 0, action ignored)
        wrapper.reset(seed=settings.seed)
        steps = iter(actions)
        for row in steps:
            _, reward, _, _, infos = wrapper.step(row)
            rewards += float(reward[0])
            for episode in infos["episodes"]:
                reference.append((episode, rewards))
                rewards = 0.0
                wrapper.step(row)  # the reset step: not an action of the next episode
    finally:
        wrapper.close()
    # same-step: the episode's next observation comes at once; one env, so the same actions
    # (minus the reset steps) give the same episodes
    wrapper = make_env(settings)
    adapted, rewards = [], 0.0
    try:
        vec = make_vec_env(wrapper)
        vec.seed(settings.seed)
        vec.reset()
        for row in actions[: sum(e["length"] for e, _ in reference)]:
            _, reward, dones, infos = vec.step(row)
            rewards += float(reward[0])
            if dones[0]:
                assert set(infos[0]["terminal_observation"]) == set(vec.observation_space.spaces)
                adapted.append((infos[0]["episode"], rewards))
                rewards = 0.0
    finally:
        wrapper.close()
    assert len(reference) >= 2 and len(adapted) == len(reference)
    for (episode, total), (sb3, summed) in zip(reference, adapted, strict=True):
        assert sb3["l"] == episode["length"] and sb3["achievements"] == episode["achievements"]
        assert sb3["r"] == pytest.approx(total) == pytest.approx(summed)
        assert sb3["task_return"] == episode["task_return"]
    assert sum(total for _, total in reference) > 0


def scalars(directory: Path, tag: str) -> list[float]:
    """The values of a TensorBoard scalar over every event file under `directory`."""
    from tensorboard.backend.event_processing.event_accumulator import EventAccumulator

    values = []
    for events in directory.rglob("events.out.tfevents.*"):
        accumulator = EventAccumulator(str(events))
        accumulator.Reload()
        if tag in accumulator.Tags()["scalars"]:
            values += [event.value for event in accumulator.Scalars(tag)]
    return values


def test_a_tiny_ppo_run_pretrains_evaluates_finetunes_and_reports(tmp_path: Path, monkeypatch):
    monkeypatch.setenv("LLMRL_HOME", str(tmp_path / "home"))
    out = tmp_path / "run"
    config = {**TINY_PPO, "methods": ["rnd", "none"], "finetune_from": ["rnd"]}
    run_embedded("ellm", config, out_dir=out, progress=False)
    rows = {r["method"]: r for r in json.loads((out / "results.json").read_text())["rows"]}
    assert sorted(rows) == ["none (ppo)", "rnd (ppo)", "scratch (ppo)"]
    for method in ("rnd (ppo)", "none (ppo)"):
        assert rows[method]["frames"] == 448  # 4 envs x 16-step rollouts, at or past 420
        assert rows[method]["episodes"] == 4 * 5
        assert 0 <= rows[method]["eval_achievements"] <= 3
    assert 0 <= rows["rnd (ppo)"]["finetune_success"] <= 1
    line = Versions(out / "checkpoints/pretrain/rnd-ppo")
    assert line.latest().algorithm == "ppo" and len(line.versions()) >= 2  # every 200 frames
    # CleanRL's charts read the env's own return (crafter's reward), not 0
    logged = [json.loads(t) for t in (out / "checkpoints/pretrain/rnd-ppo/episodes.jsonl").open()]
    assert any(e["extrinsic_return"] > 0 for e in logged) and "env_return" not in logged[0]
    returns = scalars(out / "tb/pretrain/rnd-ppo", "charts/episodic_return")
    assert (
        returns and max(returns) > 0 and max(returns) <= max(e["extrinsic_return"] for e in logged)
    )
    lengths = scalars(out / "tb/pretrain/rnd-ppo", "charts/episodic_length")
    assert set(lengths) <= {float(e["length"]) for e in logged}
    for start in ("rnd", "scratch"):
        assert Versions(out / "checkpoints/finetune" / f"{start}-ppo").latest().algorithm == "ppo"


def test_a_ppo_job_resumes_from_its_latest_version(tmp_path: Path, monkeypatch):
    monkeypatch.setenv("LLMRL_HOME", str(tmp_path))
    common: dict = {
        "env": ENV_ID,
        "num_envs": 2,
        "method": "rnd",
        "agent": "ppo",
        "ppo": {"n_steps": 8, "batch_size": 16, "n_epochs": 1},
        "checkpoint_every": 16,  # two learn calls per job
    }
    line = {"model_path": str(tmp_path / "line")}
    reported: list[int] = []
    first = train_ellm(EllmTrainingJob(**common, **line, frames=32), reported.append)
    # a 16-sample rollout, one mini-batch of 16, one epoch: a gradient step per rollout
    assert first["frames"] == 32 and sum(reported) == 32 and first["gradient_steps"] == 2
    # every version keeps the RND networks beside the model, and a resumed job reads them back
    assert (Path(first["checkpoint"]) / SOURCE_FILE).is_file()
    saved = torch.load(Path(first["checkpoint"]) / SOURCE_FILE, weights_only=True)
    restored: list[dict] = []
    load_state_dict = IntrinsicRewardWrapper.load_state_dict

    def spy(wrapper: IntrinsicRewardWrapper, state: dict) -> None:
        restored.append(copy.deepcopy(state))  # training goes on in its tensors
        load_state_dict(wrapper, state)

    monkeypatch.setattr(IntrinsicRewardWrapper, "load_state_dict", spy)
    reported.clear()
    resumed = train_ellm(EllmTrainingJob(**common, **line, frames=64), reported.append)
    assert resumed["frames"] == 64 and sum(reported) == 32  # the frames it added
    assert resumed["gradient_steps"] == 4
    assert Versions(tmp_path / "line").versions() == ["1", "2", "3", "4"]
    assert len(restored) == 1
    torch.testing.assert_close(restored[0], saved, rtol=0, atol=0)  # the latest version's
    # a job at its budget returns its latest version at once
    reported.clear()
    again = train_ellm(EllmTrainingJob(**common, **line, frames=64), reported.append)
    assert again["checkpoint"] == resumed["checkpoint"] and sum(reported) == 0
    assert Versions(tmp_path / "line").versions() == ["1", "2", "3", "4"]
    logged = [json.loads(t) for t in (tmp_path / "line/episodes.jsonl").open()]
    assert [e["frames"] for e in logged] == sorted(e["frames"] for e in logged)
    # fine-tuning starts a fresh line (its own frame count) from the pretrained weights:
    # with a learning rate of 0 they come out unchanged
    tuned = train_ellm(
        EllmTrainingJob(
            **{**common, "ppo": {**common["ppo"], "learning_rate": 0.0}},
            frames=16,
            task="place crafting table",
            intrinsic_scale=0.0,
            init_from=resumed["checkpoint"],
            model_path=str(tmp_path / "tuned"),
        )
    )
    assert tuned["frames"] == 16 and tuned["gradient_steps"] == 1  # its own count
    before = PPO.load(Path(resumed["checkpoint"]) / "model.zip", device="cpu").policy
    after = PPO.load(Path(tuned["checkpoint"]) / "model.zip", device="cpu").policy
    for key, value in before.state_dict().items():
        assert torch.equal(value, after.state_dict()[key]), key


def test_a_resumed_ppo_line_trains_with_the_resubmitted_settings(tmp_path: Path, monkeypatch):
    """A resumed job's PPO settings replace the saved ones: with a learning rate of 0 the
    resumed updates leave the weights as the first job saved them."""
    monkeypatch.setenv("LLMRL_HOME", str(tmp_path))
    common: dict = {"env": ENV_ID, "num_envs": 2, "method": "rnd", "agent": "ppo"}
    ppo = {"n_steps": 8, "batch_size": 16, "n_epochs": 1}
    line = {"model_path": str(tmp_path / "line")}
    first = train_ellm(EllmTrainingJob(**common, **line, ppo=ppo, frames=16))
    frozen = {**ppo, "learning_rate": 0.0}
    resumed = train_ellm(EllmTrainingJob(**common, **line, ppo=frozen, frames=48))
    assert resumed["frames"] == 48 and resumed["gradient_steps"] > first["gradient_steps"]
    before = PPO.load(Path(first["checkpoint"]) / "model.zip", device="cpu").policy
    after = PPO.load(Path(resumed["checkpoint"]) / "model.zip", device="cpu").policy
    for key, value in before.state_dict().items():
        assert torch.equal(value, after.state_dict()[key]), key


def test_a_ppo_evaluation_repeats_with_its_seed(tmp_path: Path, monkeypatch):
    """PPO samples its actions with the evaluation's seeded rng, not torch's global one."""
    monkeypatch.setenv("LLMRL_HOME", str(tmp_path))
    job = EllmTrainingJob(
        env=ENV_ID,
        num_envs=2,
        method="none",
        agent="ppo",
        ppo={"n_steps": 8, "batch_size": 16, "n_epochs": 1},
        frames=16,
        model_path=str(tmp_path / "line"),
    )
    checkpoint = train_ellm(job)["checkpoint"]
    policy = load_policy(checkpoint)
    wrapper = make_env(job)
    try:
        observations, _ = wrapper.reset(seed=0)
    finally:
        wrapper.close()
    batch = {key: np.repeat(value, 200, axis=0) for key, value in observations.items()}
    torch.manual_seed(1)
    first = policy.act(batch, rng=np.random.default_rng(5))
    torch.manual_seed(2)
    again = policy.act(batch, rng=np.random.default_rng(5))
    other = policy.act(batch, rng=np.random.default_rng(6))
    assert np.array_equal(first, again) and not np.array_equal(first, other)
    assert len(set(first.tolist())) > 1  # sampled, not the most likely action
    settings = EllmEnvSettings(env=ENV_ID, num_envs=2, method="none", seed=3)
    runs = [evaluate_agent(settings, checkpoint, 4, epsilon=0.0, agent="ppo") for _ in range(2)]
    assert runs[0] == runs[1]


@pytest.mark.parametrize(
    ("config", "key"),
    [
        ({"agent": "sac"}, "agent"),
        ({"agent": "ppo", "ppo": {"gae_lambda_typo": 0.9}}, "ppo.gae_lambda_typo"),
        ({"agent": "ppo", "ppo": {"n_steps": 0}}, "ppo.n_steps"),
        ({"agent": "ppo", "ppo": {"seed": 1}}, "ppo.seed"),
        ({"agent": "ppo", "ppo": {"learning_rate": -1e-4}}, "ppo.learning_rate"),
        ({"agent": "ppo", "ppo": {"learning_rate": "fast"}}, "ppo.learning_rate"),
        ({"agent": "ppo", "ppo": {"gamma": 1.5}}, "ppo.gamma"),
        ({"agent": "ppo", "ppo": {"gae_lambda": -0.1}}, "ppo.gae_lambda"),
        ({"agent": "ppo", "ppo": {"clip_range": 0}}, "ppo.clip_range"),
        ({"agent": "ppo", "ppo": {"clip_range_vf": -0.2}}, "ppo.clip_range_vf"),
        ({"agent": "ppo", "ppo": {"ent_coef": -0.01}}, "ppo.ent_coef"),
        ({"agent": "ppo", "ppo": {"vf_coef": True}}, "ppo.vf_coef"),
        ({"agent": "ppo", "ppo": {"max_grad_norm": 0.0}}, "ppo.max_grad_norm"),
        ({"agent": "ppo", "ppo": {"target_kl": -1}}, "ppo.target_kl"),
    ],
)
def test_bad_agent_settings_name_the_key(config: dict, key: str):
    with pytest.raises(ConfigError) as error:
        validate_config("ellm", config)
    assert key in str(error.value)


def test_a_job_with_a_bad_agent_names_the_field(tmp_path: Path, monkeypatch):
    monkeypatch.setenv("LLMRL_HOME", str(tmp_path))
    body = {
        "kind": "ellm",
        "env": ENV_ID,
        "method": "none",
        "frames": 8,
        "model_path": str(tmp_path / "line"),
    }
    with pytest.raises(PolicyJobError, match="agent"):
        parse_policy_job({**body, "agent": "a3c"})
    with pytest.raises(PolicyJobError, match=r"ppo\.verbose"):
        parse_policy_job({**body, "agent": "ppo", "ppo": {"verbose": 2}})


def test_a_job_never_goes_on_in_another_agents_line(tmp_path: Path, monkeypatch):
    monkeypatch.setenv("LLMRL_HOME", str(tmp_path))
    common = {"env": ENV_ID, "num_envs": 2, "method": "none", "frames": 16}
    line = {"model_path": str(tmp_path / "line")}
    dqn = {"learning_starts": 4, "buffer_size": 64, "hidden": 8}
    assert train_ellm(EllmTrainingJob(**common, **line, dqn=dqn))["frames"] == 16
    ppo = {"n_steps": 8, "batch_size": 16, "n_epochs": 1}
    with pytest.raises(ValueError, match=r"model_path: .* holds dqn-ellm versions; agent ppo"):
        train_ellm(EllmTrainingJob(**common, **line, agent="ppo", ppo=ppo))


@pytest.mark.parametrize(
    ("settings", "key"),
    [
        ({"agent": "dqn", "ppo": {"n_steps": 8}}, "ppo"),
        ({"ppo": {"n_steps": 8}}, "ppo"),  # dqn by default
        ({"agent": "dqn", "checkpoint_every": 100}, "checkpoint_every"),
        ({"agent": "ppo", "dqn": {"hidden": 16}}, "dqn"),
    ],
)
def test_a_job_refuses_the_other_agents_settings(tmp_path: Path, settings: dict, key: str):
    body = {"kind": "ellm", "env": ENV_ID, "method": "none", "frames": 8}
    body["model_path"] = str(tmp_path / "line")
    with pytest.raises(PolicyJobError, match=rf"{key}: .* with agent"):
        parse_policy_job({**body, **settings})


@pytest.mark.parametrize(
    ("settings", "key"),
    [
        ({"frames": 1}, "frames"),  # one env: a rollout of one sample
        ({"frames": 8, "ppo": {"n_steps": 1}}, "ppo.n_steps"),
        ({"frames": 8, "ppo": {"batch_size": 1}}, "ppo.batch_size"),
    ],
)
def test_a_ppo_job_too_small_to_normalise_advantages_names_the_key(
    tmp_path: Path, settings: dict, key: str
):
    body = {"kind": "ellm", "env": ENV_ID, "method": "none", "num_envs": 1, "agent": "ppo"}
    body["model_path"] = str(tmp_path / "line")
    with pytest.raises(PolicyJobError, match=rf"{key}: "):
        parse_policy_job({**body, **settings})
    ppo = {**settings.get("ppo", {}), "normalize_advantage": False}
    assert parse_policy_job({**body, **settings, "ppo": ppo}).frames == settings["frames"]


def test_a_ppo_recipe_too_small_to_normalise_advantages_names_the_key():
    config = {"agent": "ppo", "num_envs": 1, "pretrain_frames": 100, "finetune_frames": 1}
    with pytest.raises(ConfigError, match="finetune_frames: a PPO rollout of 1 sample"):
        validate_config("ellm", config)
    assert validate_config("ellm", {**config, "finetune_frames": 0}).agent == "ppo"


def test_good_ppo_numbers_pass():
    ppo = {"learning_rate": 0.0, "gamma": 1, "gae_lambda": 0.95, "clip_range": 0.2}
    ppo |= {"clip_range_vf": None, "ent_coef": 0.01, "vf_coef": 0.5, "target_kl": None}
    assert validate_config("ellm", {"agent": "ppo", "ppo": ppo}).ppo.model_dump() == ppo


def test_a_recipe_with_dqn_refuses_ppo_settings():
    with pytest.raises(ConfigError, match="ppo: PPO settings"):
        validate_config("ellm", {"agent": "dqn", "ppo": {"n_steps": 8}})
    config = validate_config("ellm", {"agent": "ppo", "ppo": {"n_steps": 8}})
    assert config.ppo.n_steps == 8 and config.ppo.batch_size == 256  # ELLM's own default
    assert config.model_dump()["ppo"] == {"n_steps": 8}  # stored as written
