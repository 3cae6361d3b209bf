"""LLM-PPO (`llm-ppo`) on tiny random Llamas: the update, learning, resuming, bad settings.

The policy model is near-uniform (`initializer_range=0.02`) so that every action is explored;
candidates are scored by their mean token log-probability, as with a summed score a
near-uniform LM prefers the shortest phrase by orders of magnitude.
"""

from __future__ import annotations

import math
from pathlib import Path
from typing import Any

import numpy as np
import pytest
import support.tiny_text_env  # noqa: F401  (registers TinyTextGoForward)
import torch
from support.tiny_llm import make_tiny_llama, tiny_gateway_settings
from support.tiny_text_env import CORRECT, ENV_ID, PHRASES

from llmrl.common.registry import registry
from llmrl.learner.adapters import adapter_versions
from llmrl.learner.llm.model import LlmPolicyModel
from llmrl.learner.llm.scorer import score_candidates
from llmrl.learner.versions import Versions
from llmrl.llm_gateway.client import connect
from llmrl.recipes.glam.llm_ppo import LlmPpoConfig, LlmPpoSettings, ppo_minibatch_step
from llmrl.recipes.glam.prompt import PromptHistory

SMALL_PPO = {
    "num_envs": 8,
    "num_steps": 2,
    "minibatch_size": 16,
    "update_epochs": 1,
    "value_hidden": 16,
    "reduction": "mean",
}
SMALL = {"ppo": SMALL_PPO, "bf16": False, "seed": 0}


@pytest.fixture(scope="module")
def flat_model_dir(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return make_tiny_llama(tmp_path_factory.mktemp("flat-llama"), initializer_range=0.02)


def prompt_ids(policy: LlmPolicyModel) -> list[int]:
    history = PromptHistory(PHRASES)
    history.start("go to the goal", "You see the goal 1 step forward")
    return policy.encode(history.prompt())


def action_probabilities(policy: LlmPolicyModel, reduction: str = "mean") -> torch.Tensor:
    candidates = [policy.encode(" " + phrase) for phrase in PHRASES]
    with torch.no_grad():
        scores = score_candidates(policy, [prompt_ids(policy)], candidates, reduction).scores
    return torch.softmax(scores[0], -1)


def test_one_update_lowers_the_loss_and_favours_the_advantaged_action(
    flat_model_dir: Path,
) -> None:
    policy = LlmPolicyModel.load(str(flat_model_dir), lora=True, value_hidden=16, bf16=False)
    config = LlmPpoSettings(norm_adv=False, learning_rate=1e-2)
    candidates = [policy.encode(" " + phrase) for phrase in PHRASES]
    prompts = [prompt_ids(policy)] * len(PHRASES)
    actions = torch.arange(len(PHRASES))  # every action once; only CORRECT was good
    advantages = torch.tensor([1.0 if p == CORRECT else -0.2 for p in PHRASES])
    with torch.no_grad():
        scores = score_candidates(policy, prompts, candidates, "mean").scores
        old_logprobs = torch.log_softmax(scores, -1)[actions, actions]
    old_values, returns = torch.zeros(len(PHRASES)), advantages.clone()
    before = action_probabilities(policy)[PHRASES.index(CORRECT)]
    params = policy.parameters()
    optimizer = torch.optim.Adam(params, lr=config.learning_rate, eps=config.adam_eps)

    def score(samples: list[list[int]]) -> tuple[torch.Tensor, torch.Tensor]:
        scored = score_candidates(policy, samples, candidates, "mean")
        return scored.scores, policy.heads["value"](scored.hidden).squeeze(-1)

    def step() -> dict[str, float]:
        return ppo_minibatch_step(
            score,
            prompts,
            actions,
            old_logprobs,
            advantages,
            returns,
            old_values,
            config,
            optimizer,
            params,
        )

    first, second = step(), step()
    assert second["loss"] < first["loss"]
    assert second["policy_loss"] < first["policy_loss"]
    assert action_probabilities(policy)[PHRASES.index(CORRECT)] > before


def one_ppo_step(
    model_dir: Path, microbatch_size: int | None, **settings: Any
) -> tuple[list[torch.Tensor], dict[str, float]]:
    """The weights after one SGD step of PPO on 6 fixed samples, and the step's statistics;
    the same LoRA and value head initialisation every call."""
    history = PromptHistory(PHRASES)
    prompts = []
    for mission in ("go to the goal", "go to the red ball", "pick up the key"):
        history.start(mission, "You see a wall 2 steps forward")
        prompts += [history.prompt()] * 2
    actions = torch.tensor([0, 1, 2, 3, 4, 5])
    advantages = torch.tensor([1.0, -0.5, 0.3, 0.0, -1.0, 0.7])
    returns, old_values = advantages + 0.5, torch.zeros(6)
    torch.manual_seed(0)
    policy = LlmPolicyModel.load(str(model_dir), lora=True, value_hidden=16, bf16=False)
    candidates = [policy.encode(" " + phrase) for phrase in PHRASES]
    samples = [policy.encode(prompt) for prompt in prompts]

    def score(chunk: list[list[int]]) -> tuple[torch.Tensor, torch.Tensor]:
        scored = score_candidates(policy, chunk, candidates, "mean")
        return scored.scores, policy.heads["value"](scored.hidden).squeeze(-1)

    with torch.no_grad():
        old_logprobs = torch.log_softmax(score(samples)[0], -1)[torch.arange(6), actions]
    config = LlmPpoSettings(microbatch_size=microbatch_size, max_grad_norm=1e4, **settings)
    params = policy.parameters()
    before = [p.detach().clone() for p in params]
    # plain SGD, no clipping: the step is the gradient itself (Adam's first step is not)
    optimizer = torch.optim.SGD(params, lr=1e-2)
    stats = ppo_minibatch_step(
        score, samples, actions, old_logprobs, advantages, returns, old_values, config,
        optimizer, params,
    )  # fmt: skip
    after = [p.detach().clone() for p in params]
    assert any(not torch.equal(a, b) for a, b in zip(before, after, strict=True))
    return after, stats


def test_microbatches_take_the_same_step_as_the_whole_minibatch(flat_model_dir: Path) -> None:
    """Gradients accumulated over chunks of 2 equal the 6-sample minibatch's (advantages
    normalised over the whole minibatch), so the weights after one step agree."""
    whole, whole_stats = one_ppo_step(flat_model_dir, None)
    chunked, chunked_stats = one_ppo_step(flat_model_dir, 2)
    for a, b in zip(whole, chunked, strict=True):
        torch.testing.assert_close(a, b, rtol=1e-4, atol=1e-6)
    for name in ("loss", "policy_loss", "value_loss", "entropy", "grad_norm"):
        assert chunked_stats[name] == pytest.approx(whole_stats[name], rel=1e-4, abs=1e-6)


def test_gradient_diagnostics_split_the_same_step_by_loss_term(flat_model_dir: Path) -> None:
    """With grad_diagnostics the step is unchanged, and the policy and value terms' gradient
    norms on the shared weights are reported: the value term's is 0 when it weighs nothing."""
    plain, plain_stats = one_ppo_step(flat_model_dir, None)
    split, split_stats = one_ppo_step(flat_model_dir, 2, grad_diagnostics=True)
    for a, b in zip(plain, split, strict=True):
        torch.testing.assert_close(a, b, rtol=1e-4, atol=1e-6)
    assert split_stats["grad_norm"] == pytest.approx(plain_stats["grad_norm"], rel=1e-4)
    assert split_stats["policy_grad_norm"] > 0 and split_stats["value_grad_norm"] > 0
    assert "policy_grad_norm" not in plain_stats
    _, policy_only = one_ppo_step(flat_model_dir, None, grad_diagnostics=True, vf_coef=0.0)
    assert policy_only["value_grad_norm"] == 0.0
    assert policy_only["policy_grad_norm"] == pytest.approx(policy_only["grad_norm"], rel=1e-5)


def test_a_tiny_model_learns_the_trivial_env(flat_model_dir: Path, tmp_path: Path) -> None:
    line = Versions(tmp_path / "line")
    llm_ppo = registry.get_algorithm("llm-ppo")
    progress: list[int] = []
    checkpoint = llm_ppo.train(
        ENV_ID,
        line,
        on_progress=progress.append,
        base_model=str(flat_model_dir),
        lora=False,
        total_timesteps=16 * 10,
        checkpoint_every=5,
        tensorboard_dir=str(tmp_path / "tb"),
        **{**SMALL, "ppo": {**SMALL_PPO, "update_epochs": 2, "learning_rate": 1e-2}},
    )
    assert [n for n in progress if n] == [16] * 10  # per update (0s: cancel points)
    assert progress.count(0) > 10  # after loading the model, per rollout step, per minibatch
    assert line.versions() == ["1", "2"]  # updates 5 and 10
    assert checkpoint.algorithm == "llm-ppo" and checkpoint.result["update"] == 10
    policy = llm_ppo.load(checkpoint)
    assert float(action_probabilities(policy)[PHRASES.index(CORRECT)]) >= 0.9

    from tensorboard.backend.event_processing.event_accumulator import EventAccumulator

    tags = EventAccumulator(str(tmp_path / "tb")).Reload().Tags()["scalars"]
    for tag in (
        "charts/episodic_return",
        "charts/success",
        "charts/SPS",
        "losses/policy_loss",
        "losses/value_loss",
        "losses/entropy",
        "losses/approx_kl",
        "losses/clipfrac",
        "losses/grad_norm",
        "losses/explained_variance",
    ):
        assert tag in tags


def test_explained_variance_says_how_much_of_the_returns_the_values_account_for() -> None:
    """The contract llm-ppo's `losses/explained_variance` relies on (Stable-Baselines3's)."""
    from stable_baselines3.common.utils import explained_variance

    returns = np.array([0.0, 1.0, 2.0, 3.0])
    assert explained_variance(returns.copy(), returns) == pytest.approx(1.0)
    assert explained_variance(np.full(4, 1.5), returns) == pytest.approx(0.0)
    assert explained_variance(returns[::-1].copy(), returns) == pytest.approx(-3.0)
    assert math.isnan(explained_variance(returns, np.ones(4)))


class Killed(Exception):
    """Stands for a kill in the middle of a run."""


def test_resume_after_a_kill_continues_from_the_last_checkpoint(
    flat_model_dir: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("LLMRL_HOME", str(tmp_path))
    line = adapter_versions("tiny", "glam")
    llm = connect(**tiny_gateway_settings(flat_model_dir))  # running before any adapter exists
    llm_ppo = registry.get_algorithm("llm-ppo")
    ppo = {**SMALL_PPO, "num_envs": 2, "minibatch_size": 4, "lora_r": 4}
    settings = {**SMALL, "ppo": ppo, "total_timesteps": 4 * 3}
    settings.update(base_model=str(flat_model_dir), lora=True)
    done: list[int] = []

    def kill_after_two_updates(steps: int) -> None:
        if steps:  # 0: a cancel point within an update
            done.append(steps)
        if len(done) == 2:
            raise Killed

    with pytest.raises(Killed):
        llm_ppo.train(ENV_ID, line, on_progress=kill_after_two_updates, **settings)
    assert line.versions() == ["1"]  # update 2 was killed before its checkpoint
    first = line.latest()
    assert (first.path / "adapter_config.json").is_file()  # a LoRA adapter the gateway serves
    assert first.result["update"] == 1

    resumed = llm_ppo.train(ENV_ID, line, on_progress=lambda n: n and done.append(n), **settings)
    assert resumed.result["resumed_from"] == 1
    assert resumed.result["update"] == 3 and resumed.result["global_step"] == 3 * 4
    assert line.versions() == ["1", "2", "3"]
    assert done[2:] == [4, 4]  # updates 2 and 3 ran again, not update 1
    # a finished line is not trained further
    assert llm_ppo.train(ENV_ID, line, **settings).path == resumed.path

    # the gateway serves the version by name, scoring as the learner does
    policy = llm_ppo.load(resumed)
    prompt = policy.tokenizer.decode(prompt_ids(policy))
    served = llm.score(prompt, [" " + p for p in PHRASES], model="tiny:glam@3", cache=False)
    candidates = [policy.encode(" " + phrase) for phrase in PHRASES]
    with torch.no_grad():
        learner = score_candidates(policy, [prompt_ids(policy)], candidates, "sum").scores[0]
    assert served.logprobs == pytest.approx(learner.tolist(), abs=1e-3)
    llm.close()


@pytest.mark.parametrize(
    ("source", "settings", "named"),
    [
        (
            ENV_ID,
            {"ppo": {"num_envs": -1}},
            "llm-ppo: ppo.num_envs: Input should be greater than 0",
        ),
        (ENV_ID, {"ppo": {"num_steps": 0}}, "llm-ppo: ppo.num_steps: "),
        (
            ENV_ID,
            {"ppo": {"num_steps": 4.0}},
            "llm-ppo: ppo.num_steps: Input should be a valid integer",
        ),
        (ENV_ID, {"ppo": {"minibatch_size": -4}}, "llm-ppo: ppo.minibatch_size: "),
        (ENV_ID, {"ppo": {"learning_rate": 0}}, "llm-ppo: ppo.learning_rate: "),
        (ENV_ID, {"ppo": {"learning_rate": "1e-4"}}, "llm-ppo: ppo.learning_rate: "),
        (ENV_ID, {"ppo": {"learning_rate": float("nan")}}, "llm-ppo: ppo.learning_rate: .*finite"),
        (ENV_ID, {"ppo": {"max_grad_norm": float("inf")}}, "llm-ppo: ppo.max_grad_norm: .*finite"),
        (
            ENV_ID,
            {"ppo": {"gamma": 1.5}},
            r"llm-ppo: ppo.gamma: .*less than or equal to 1 \(got 1\.5\)",
        ),
        (ENV_ID, {"action_set": "klingon"}, "llm-ppo: action_set: unknown action phrase set"),
        (
            ENV_ID,
            {"ppo": {"reduction": "max"}},
            "llm-ppo: ppo.reduction: Input should be 'sum' or 'mean'",
        ),
        (ENV_ID, {"init": "scratch"}, "llm-ppo: init: "),
        (ENV_ID, {"ppo": {"device": "tpu"}}, "llm-ppo: ppo.device: expected auto"),
        (ENV_ID, {"ppo": {"lora_layers": 0}}, "llm-ppo: ppo.lora_layers: "),
        (ENV_ID, {"ppo": {"cache_frozen": "yes"}}, "llm-ppo: ppo.cache_frozen: "),
        (ENV_ID, {"bf16": 1}, "llm-ppo: bf16: "),
        (ENV_ID, {"ppo": {"target_kl": -0.1}}, "llm-ppo: ppo.target_kl: "),
        (ENV_ID, {"bogus": 1}, "llm-ppo: bogus: unknown setting; allowed: total_timesteps, ppo, "),
        (ENV_ID, {"ppo": {"bogus": 1}}, "llm-ppo: ppo.bogus: unknown setting; allowed: num_envs, "),
        (ENV_ID, {"learning_rate": 0.1}, "llm-ppo: learning_rate: unknown setting; allowed: "),
        ("NoSuchEnv", {}, "env: unknown env 'NoSuchEnv'"),
    ],
)
def test_bad_settings_are_named(source: str, settings: dict, named: str, tmp_path: Path) -> None:
    with pytest.raises(ValueError, match=f"^{named}"):
        registry.get_algorithm("llm-ppo").train(
            source, tmp_path / "line", base_model="/nonexistent", **settings
        )
    assert not (tmp_path / "line").exists()


def test_base_model_is_required_and_every_setting_has_help(tmp_path: Path) -> None:
    with pytest.raises(ValueError, match=r"^llm-ppo: base_model: required \(local HF model"):
        registry.get_algorithm("llm-ppo").train(ENV_ID, tmp_path / "line")
    for model in (LlmPpoConfig, LlmPpoSettings):
        assert all(field.description for field in model.model_fields.values())


def test_the_frozen_layer_cache_trains_as_the_full_forward(
    flat_model_dir: Path, tmp_path: Path
) -> None:
    llm_ppo = registry.get_algorithm("llm-ppo")
    ppo = {**SMALL_PPO, "num_envs": 4, "minibatch_size": 4, "lora_r": 4, "lora_layers": 1}
    ppo.update(learning_rate=1e-2, update_epochs=2)
    settings = {**SMALL, "total_timesteps": 8 * 2, "base_model": str(flat_model_dir), "lora": True}
    weights = {}
    for cache in (True, False):
        checkpoint = llm_ppo.train(
            ENV_ID,
            tmp_path / f"line-{cache}",
            **{**settings, "ppo": {**ppo, "cache_frozen": cache}},
        )
        assert checkpoint.result["update"] == 2
        policy = llm_ppo.load(checkpoint)
        assert policy.frozen_layers == 1
        weights[cache] = [p.detach() for p in policy.parameters() if p.requires_grad]
        weights[cache] += [p.detach() for p in policy.heads.parameters()]
        assert checkpoint.result["rollout_seconds"] > 0 and checkpoint.result["update_seconds"] > 0
    moved = 0
    for with_cache, without in zip(weights[True], weights[False], strict=True):
        assert torch.allclose(with_cache, without, atol=1e-4)
        moved += int(float(with_cache.abs().sum()) > 0)
    assert moved > 0


TRAIN_IN_A_CHILD = """
import json, sys
import support.tiny_text_env
from llmrl.common.registry import registry
registry.get_algorithm("llm-ppo").train(
    support.tiny_text_env.ENV_ID, sys.argv[1], **json.loads(sys.argv[2])
)
"""


def test_a_killed_training_process_resumes_from_its_last_checkpoint(
    flat_model_dir: Path, tmp_path: Path
) -> None:
    import json
    import signal
    import subprocess
    import sys

    from support.processes import child_env, wait_until

    line = Versions(tmp_path / "line")
    ppo = {**SMALL_PPO, "num_envs": 2, "minibatch_size": 4, "lora_r": 4, "lora_layers": 1}
    settings = {**SMALL, "ppo": ppo, "total_timesteps": 4 * 5}
    settings.update(base_model=str(flat_model_dir), lora=True)
    child = subprocess.Popen(
        [sys.executable, "-c", TRAIN_IN_A_CHILD, str(line.root), json.dumps(settings)],
        env=child_env({"LLMRL_HOME": str(tmp_path)}),
        stdout=subprocess.DEVNULL,
        stderr=subprocess.PIPE,
    )
    try:
        wait_until(lambda: line.versions() or child.poll() is not None, 120, "a first version")
        child.send_signal(signal.SIGKILL)  # in the middle of training: no clean-up
        _, errors = child.communicate(timeout=30)
    finally:
        if child.poll() is None:
            child.kill()
    assert child.returncode == -signal.SIGKILL, errors.decode()[-2000:]
    saved = line.versions()
    assert saved and len(saved) < 5  # killed before the end, after a checkpoint
    killed_at = line.latest().result["update"]
    assert all((line.path(v) / "state.json").is_file() for v in saved)  # no half version

    resumed = registry.get_algorithm("llm-ppo").train(ENV_ID, line, **settings)
    assert resumed.result["resumed_from"] == killed_at
    assert resumed.result["update"] == 5 and resumed.result["global_step"] == 5 * 4
    assert line.versions() == [str(v) for v in range(1, 6)]
