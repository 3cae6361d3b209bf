"""The recipe `glam`'s baselines wired end to end on a real BabyAI-Text level with a tiny
model and tiny budgets: NPAE (random weights, full fine-tuning, same PPO), Symbolic-PPO (SB3
on the grid), DRRN (SB3 DQN on the text) and behaviour cloning (bot demonstrations -> chat
SFT -> gateway adapter), each evaluated on the same held-out seeds, the RL ones every
`eval_every` updates."""

from __future__ import annotations

import json
from pathlib import Path
from types import SimpleNamespace

import pytest
import torch
from support.tiny_llm import TINY_MODEL
from tensorboard.backend.event_processing.event_accumulator import EventAccumulator

from llmrl.agents import make_driver
from llmrl.learner.algorithms import load_cached
from llmrl.learner.algorithms.base import validate_settings
from llmrl.learner.llm.model import LlmPolicyModel
from llmrl.learner.policy_jobs import PolicyJobError, parse_policy_job
from llmrl.learner.versions import Checkpoint
from llmrl.orchestrator.embedded import run_embedded
from llmrl.recipes.glam.driver import CheckpointGlamDriver
from llmrl.recipes.glam.llm_ppo import LlmPpoConfig

ENV = "BabyAIText-GoToLocalS5N2"
SIX = {"turn left", "turn right", "go forward", "pick up", "drop", "toggle"}


def episodes(out: Path, phase: str) -> list[dict]:
    path = out / "episodes" / f"{phase.replace('/', '-')}.jsonl"
    return [json.loads(line) for line in path.open()]


def test_the_baselines_train_on_the_budget_and_are_evaluated_alike(
    tiny_gateway: Path, tmp_path: Path
):
    config = {
        "env": ENV,
        "model": TINY_MODEL,
        "methods": ["npae", "symbolic-ppo", "drrn", "bc"],
        "train_steps": 32,  # 2 updates of 4 envs x 4 steps
        "ppo": {"num_envs": 4, "num_steps": 4, "minibatch_size": 8, "update_epochs": 1},
        "eval_every": 1,
        "bc_steps": 2,
        "bc_batch_size": 2,
        "eval_episodes": 2,
        "max_steps": 5,
    }
    out = tmp_path / "run"
    run_embedded("glam", config, out_dir=out, progress=False)
    results = json.loads((out / "results.json").read_text())
    rows = {row["method"]: row for row in results["rows"]}
    assert sorted(rows) == ["bc", "drrn", "npae", "symbolic-ppo"]
    assert {rows[m]["env_steps"] for m in rows} == {32}
    assert all(rows[m]["episodes"] == 2 for m in rows)
    assert "eval_curve.png" in results["plots"]

    # the RL baselines were evaluated on the held-out seeds after each update
    events = EventAccumulator(str(out / "tb")).Reload()
    for method in ("npae", "symbolic-ppo", "drrn"):
        points = events.Scalars(f"eval/{method}/success_rate")
        assert [p.step for p in points] == [16, 32]
        seeds = [e["seed"] for e in episodes(out, f"curve/{method}/1")]
        assert seeds == [e["seed"] for e in episodes(out, f"evaluate/{method}")]

    # NPAE: the whole model trained from random weights, played from its checkpoint
    (npae,) = [e for e in episodes(out, "evaluate/npae")][:1]
    assert npae["policy"] == "glam-checkpoint"
    checkpoint = Checkpoint.read(
        next(n for n in results["notes"] if n.startswith("npae:")).split()[1]
    )
    assert checkpoint.config["init"] == "random" and checkpoint.config["lora"] is False
    assert checkpoint.result["global_step"] == 32
    played = CheckpointGlamDriver(str(checkpoint.path), "sum", True, 0, "r").policy
    assert not played.lora and played.model.training is False

    # Symbolic-PPO and DRRN played minigrid actions, not phrases
    for method in ("symbolic-ppo", "drrn"):
        steps = [s for e in episodes(out, f"evaluate/{method}") for s in e["steps"]]
        assert steps and all(s["action"] in range(6) and not s.get("skill") for s in steps)
    assert episodes(out, "evaluate/drrn")[0]["policy"] == "glam-drrn"
    # sampled by default (the original's tests sample), from the episode's own generator
    model = sorted((out / "models" / "symbolic-ppo").rglob("*.zip"))[-1]
    space = load_cached("ppo", str(model)).observation_space
    space.seed(0)
    observation = {key: value for key, value in space.sample().items()}

    def played(seed: int, greedy: bool) -> list[int]:
        policy = {"kind": "glam-sb3", "model": str(model), "greedy": greedy}
        job = SimpleNamespace(seed=seed)
        play = make_driver(policy, None, job)
        return [play.act(observation, t).action for t in range(40)]

    assert played(3, greedy=False) == played(3, greedy=False)
    assert len(set(played(3, greedy=False))) > 1  # a near-uniform policy after 2 updates
    assert len(set(played(3, greedy=True))) == 1

    # BC: GLAM prompts -> the bot's phrases, learned by SFT, scored through the gateway
    demos = [json.loads(line) for line in (out / "data" / "bc_demonstrations.jsonl").open()]
    assert demos
    for demo in demos:
        user, assistant = demo["messages"]
        assert user["content"].startswith("Possible action of the agent:")
        assert assistant["content"] in SIX
    calls = [c for e in episodes(out, "evaluate/bc") for c in e["llm_calls"]]
    assert calls and all(c["model"].startswith(f"{TINY_MODEL}:") for c in calls)
    assert all("-bc@" in c["model"] for c in calls)


def test_glam_can_train_every_pretrained_weight(tiny_gateway: Path, tmp_path: Path):
    config = {
        "env": ENV,
        "model": TINY_MODEL,
        "methods": ["glam"],
        "finetune": "full",
        "train_steps": 16,  # 1 update of 4 envs x 4 steps
        "ppo": {
            "grad_diagnostics": True,
            "vf_coef": 0.25,  # reaches the learner's PPO
            "num_envs": 4,
            "num_steps": 4,
            "minibatch_size": 8,
            "microbatch_size": 4,
            "update_epochs": 1,
            "learning_rate": 1e-4,
        },
        "eval_every": 1,
        "eval_episodes": 2,
        "max_steps": 5,
    }
    out = tmp_path / "run"
    run_embedded("glam", config, out_dir=out, progress=False)
    results = json.loads((out / "results.json").read_text())
    assert [row["method"] for row in results["rows"]] == ["glam"]

    # played from its checkpoint in-process, as NPAE, not through the gateway as an adapter
    played = episodes(out, "evaluate/glam")
    assert {e["policy"] for e in played} == {"glam-checkpoint"}
    checkpoint = Checkpoint.read(
        next(n for n in results["notes"] if n.startswith("glam:")).split()[1]
    )
    assert checkpoint.config["init"] == "pretrained" and checkpoint.config["lora"] is False
    ppo = checkpoint.config["ppo"]  # the recipe's group, whole, as the algorithm saved it
    assert ppo["microbatch_size"] == 4 and ppo["grad_diagnostics"] and ppo["vf_coef"] == 0.25
    assert ppo["lora_layers"] is None  # every layer trained
    # the policy and value losses' gradient norms, logged apart
    trained_tb = EventAccumulator(str(out / "tb" / "train" / "glam")).Reload()
    norms = {tag: trained_tb.Scalars(tag)[0].value for tag in trained_tb.Tags()["scalars"]}
    assert norms["losses/policy_grad_norm"] > 0 and norms["losses/value_grad_norm"] > 0
    trained = CheckpointGlamDriver(str(checkpoint.path), "sum", True, 0, "r").policy
    assert not trained.lora

    # every weight moved a little from the pretrained ones (Adam: about lr per step), none
    # was re-drawn as NPAE's are
    pretrained = dict(LlmPolicyModel.load(str(tiny_gateway), lora=False).model.named_parameters())
    for name, weight in trained.model.named_parameters():
        start = pretrained[name]
        assert not torch.equal(weight, start), name
        assert torch.allclose(weight, start, atol=5e-4), name


def test_npae_has_the_architecture_but_not_the_weights(flat_model_dir: Path):
    pretrained = LlmPolicyModel.load(str(flat_model_dir), lora=False)
    torch.manual_seed(1)
    npae = LlmPolicyModel.load(str(flat_model_dir), lora=False, random_init=True)
    ours, theirs = dict(npae.model.named_parameters()), dict(pretrained.model.named_parameters())
    assert {k: v.shape for k, v in ours.items()} == {k: v.shape for k, v in theirs.items()}
    assert all(p.requires_grad for p in npae.parameters())
    assert not torch.equal(ours["model.embed_tokens.weight"], theirs["model.embed_tokens.weight"])


def test_a_bad_init_names_the_key():
    with pytest.raises(
        ValueError, match=r"^llm-ppo: init: Input should be 'pretrained' or 'random'"
    ):
        validate_settings("llm-ppo", LlmPpoConfig, {"base_model": "tiny", "init": "scratch"})
    body = {
        "kind": "glam",
        "env": "TinyTextGoForward",
        "model": "t",
        "adapter": "a",
        "total_timesteps": 8,
    }
    with pytest.raises(PolicyJobError, match="init"):
        parse_policy_job({**body, "init": "scratch"})
