"""The LLM module, LLM-PPO and KALM's grounded LM on each device torch sees: the model and its
heads sit where `device` says, scores, a PPO step, grounding losses and imagined rollouts
there equal the CPU's, LLM-PPO learns the trivial env there, the gateway serves a local model
there, and a device that is not there is refused by name. The GPU cases are skipped where
torch sees no GPU (this project's CI); a machine with one runs them (`pytest --noconftest
tests/learner/test_llm_devices.py` needs no other fixture file).
"""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest
import support.tiny_text_env  # noqa: F401  (registers TinyTextGoForward)
import torch
from support.tiny_llm import make_tiny_llama
from support.tiny_text_env import CORRECT, ENV_ID, PHRASES

from llmrl.common.devices import check_device, native_bf16, resolve_device
from llmrl.common.registry import registry
from llmrl.learner.llm.model import LlmPolicyModel
from llmrl.learner.llm.scorer import score_candidates
from llmrl.learner.versions import Versions
from llmrl.recipes.glam.llm_ppo import LlmPpoSettings, ppo_minibatch_step
from llmrl.recipes.glam.prompt import PromptHistory
from llmrl.recipes.kalm.grounded_lm import TASKS, GroundedLM, GroundingSpec, task_items
from llmrl.recipes.kalm.imagine import imagine

GPU = pytest.mark.skipif(not torch.cuda.is_available(), reason="torch sees no GPU here")
DEVICES = ["cpu", pytest.param("cuda", marks=GPU)]


@pytest.fixture(scope="module")
def model_dir(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return make_tiny_llama(tmp_path_factory.mktemp("device-llama"), initializer_range=0.02)


def prompts(policy: LlmPolicyModel) -> list[list[int]]:
    """Three GLAM prompts of different lengths (the batch is padded)."""
    history, out = PromptHistory(PHRASES), []
    for mission in ("go to the goal", "go to the red ball", "pick up the purple key"):
        history.start(mission, "You see a wall 2 steps forward")
        out.append(policy.encode(history.prompt()))
    return out


def load(model_dir: Path, device: str, bf16: bool = False) -> LlmPolicyModel:
    torch.manual_seed(0)  # the same LoRA and value head on every device
    return LlmPolicyModel.load(str(model_dir), lora=True, value_hidden=16, bf16=bf16, device=device)


@pytest.mark.parametrize("device", DEVICES)
def test_the_model_and_its_heads_sit_on_the_named_device(model_dir: Path, device: str) -> None:
    policy = load(model_dir, device)
    assert policy.device.type == device
    assert {p.device.type for p in policy.heads.parameters()} == {device}
    assert {p.device.type for p in policy.model.parameters()} == {device}


@pytest.mark.parametrize(
    ("device", "bf16"), [pytest.param("cuda", bf16, marks=GPU) for bf16 in (False, True)]
)
def test_scores_and_values_on_a_device_equal_the_cpus(
    model_dir: Path, device: str, bf16: bool
) -> None:
    reference, policy = load(model_dir, "cpu"), load(model_dir, device, bf16)
    candidates = [reference.encode(" " + phrase) for phrase in PHRASES]
    with torch.no_grad():
        expected = score_candidates(reference, prompts(reference), candidates, "mean")
        got = score_candidates(policy, prompts(policy), candidates, "mean")
        expected_values = reference.heads["value"](expected.hidden).squeeze(-1)
        values = policy.heads["value"](got.hidden).squeeze(-1)
    assert got.scores.device.type == device
    # fp32 on either device agrees to float rounding; bf16 autocast to its 8-bit mantissa
    tolerance = 5e-2 if bf16 else 1e-4
    assert torch.allclose(got.scores.float().cpu(), expected.scores, atol=tolerance)
    assert torch.allclose(values.float().cpu(), expected_values, atol=tolerance)


@pytest.mark.parametrize("device", DEVICES)
def test_a_ppo_step_on_a_device_moves_the_weights_as_on_the_cpu(
    model_dir: Path, device: str
) -> None:
    """The rollout's tensors stay on the CPU; the step brings them to the model's device."""

    def step(where: str) -> list[torch.Tensor]:
        policy = load(model_dir, where)
        candidates = [policy.encode(" " + phrase) for phrase in PHRASES]
        samples = prompts(policy) * 2
        actions = torch.tensor([0, 1, 2, 3, 4, 5])
        advantages = torch.tensor([1.0, -0.5, 0.3, 0.0, -1.0, 0.7])

        def score(chunk: list[list[int]]) -> tuple[torch.Tensor, torch.Tensor]:
            scored = score_candidates(policy, chunk, candidates, "mean")
            return scored.scores, policy.heads["value"](scored.hidden).squeeze(-1)

        with torch.no_grad():
            old_logprobs = torch.log_softmax(score(samples)[0], -1).cpu()[torch.arange(6), actions]
        config = LlmPpoSettings(max_grad_norm=1e4, device=where)
        params = policy.parameters()
        before = [p.detach().cpu().clone() for p in params]
        optimizer = torch.optim.SGD(params, lr=1e-2)
        ppo_minibatch_step(
            score, samples, actions, old_logprobs, advantages, advantages + 0.5,
            torch.zeros(6), config, optimizer, params,
        )  # fmt: skip
        return [p.detach().cpu() - b for p, b in zip(params, before, strict=True)]

    on_cpu, on_device = step("cpu"), step(device)
    assert any(float(d.abs().max()) > 0 for d in on_device)
    for expected, got in zip(on_cpu, on_device, strict=True):
        assert torch.allclose(got, expected, atol=1e-5)


@pytest.mark.parametrize("device", [pytest.param("cuda", marks=GPU)])
def test_llm_ppo_learns_the_trivial_env_on_a_device(
    model_dir: Path, tmp_path: Path, device: str
) -> None:
    """The CPU case is test_llm_ppo's; here the whole loop (rollout buffers on the CPU,
    scoring, GAE and updates on the device, checkpoints) runs with the model on a GPU."""
    llm_ppo = registry.get_algorithm("llm-ppo")
    checkpoint = llm_ppo.train(
        ENV_ID,
        Versions(tmp_path / "line"),
        base_model=str(model_dir),
        lora=False,
        total_timesteps=16 * 10,
        ppo={
            "learning_rate": 1e-2,
            "num_envs": 8,
            "num_steps": 2,
            "minibatch_size": 16,
            "update_epochs": 2,
            "value_hidden": 16,
            "reduction": "mean",
            "device": device,
        },
        seed=0,
    )
    policy = llm_ppo.load(checkpoint)  # device auto: this machine's GPU
    assert policy.device.type == device
    candidates = [policy.encode(" " + phrase) for phrase in PHRASES]
    with torch.no_grad():
        scores = score_candidates(policy, prompts(policy)[:1], candidates, "mean").scores
    assert float(torch.softmax(scores[0], -1)[PHRASES.index(CORRECT)]) >= 0.9


@pytest.mark.parametrize("device", DEVICES)
def test_the_gateway_serves_a_local_model_and_a_trained_adapter_on_the_named_device(
    model_dir: Path, tmp_path: Path, device: str
) -> None:
    """A LoRA trained (here: set) on the CPU, saved as the learner saves it, is served by name
    by a gateway whose model sits on `device`, scoring as the learner's model does."""
    from support.tiny_llm import TINY_MODEL, tiny_gateway_settings

    from llmrl.llm_gateway.api_types import ScoreRequest
    from llmrl.llm_gateway.gateway import Gateway

    trained = load(model_dir, "cpu")
    with torch.no_grad():  # a fresh LoRA changes nothing (B = 0): give it weights
        for name, param in trained.model.named_parameters():
            if "lora_B" in name:
                param.normal_(0.0, 0.05)
    trained.save(tmp_path / "adapter")
    settings = tiny_gateway_settings(
        model_dir, device=device, adapters={"trained": {"1": str(tmp_path / "adapter")}}
    )
    settings["ledger"] = {"backend": "memory"}
    gateway = Gateway(settings, mode="embedded")  # type: ignore[arg-type]
    candidates = [" go forward", " drop"]
    try:
        assert gateway.backend(TINY_MODEL).lm.device.type == device
        base, tuned = (
            gateway.score(ScoreRequest(model=name, prompt="Action 0:", candidates=candidates))
            for name in (TINY_MODEL, f"{TINY_MODEL}:trained@1")
        )
    finally:
        gateway.close()
    prompt = trained.encode("Action 0:")
    phrases = [trained.encode(c) for c in candidates]
    with torch.no_grad():
        expected = score_candidates(trained, [prompt], phrases, "sum").scores[0]
        with trained.model.disable_adapter():
            expected_base = score_candidates(trained, [prompt], phrases, "sum").scores[0]
    assert tuned.logprobs == pytest.approx(expected.tolist(), abs=1e-3)
    assert base.logprobs == pytest.approx(expected_base.tolist(), abs=1e-3)
    assert max(abs(a - b) for a, b in zip(tuned.logprobs, base.logprobs, strict=True)) > 1e-2


def grounded(model_dir: Path, device: str, states: np.ndarray) -> GroundedLM:
    torch.manual_seed(0)  # the same LoRA, slot layers and heads on every device
    spec = GroundingSpec(state_dim=10, action_size=40)
    return GroundedLM.create(str(model_dir), spec, lora_r=4, states=states, device=device)


@pytest.mark.parametrize("device", DEVICES)
def test_grounding_losses_a_step_and_imagination_on_a_device_equal_the_cpus(
    model_dir: Path, device: str
) -> None:
    import random

    rng = np.random.default_rng(0)
    states = rng.uniform(-0.5, 0.5, size=(4, 10)).astype(np.float32)
    actions = np.array([3, 17, 39])
    batch = [
        task_items(task, "push the red ball", states, actions, random.Random(i))
        for i, task in enumerate(TASKS)
    ]

    def run(where: str) -> tuple[dict[str, float], list[torch.Tensor], list]:
        model = grounded(model_dir, where, states)
        assert model.device.type == where
        assert {p.device.type for p in model.modules.parameters()} == {where}
        optimizer = torch.optim.SGD(model.parameters(), lr=1e-2)
        loss, parts = model.loss(batch, {"state": 5.0})
        optimizer.zero_grad()
        loss.backward()
        optimizer.step()
        model.train(False)
        with torch.no_grad():
            rollouts = imagine(model, states[:2], ["push the red ball"] * 2, max_steps=3)
        return parts, [p.detach().cpu() for p in model.parameters()], rollouts

    cpu_parts, cpu_weights, cpu_rollouts = run("cpu")
    parts, weights, rollouts = run(device)
    assert set(parts) == {"state", "action", "stop", "text"}
    for name, value in cpu_parts.items():
        assert parts[name] == pytest.approx(value, abs=1e-4)
    for expected, got in zip(cpu_weights, weights, strict=True):
        assert torch.allclose(got, expected, atol=1e-5)
    for expected, got in zip(cpu_rollouts, rollouts, strict=True):
        np.testing.assert_array_equal(got.actions, expected.actions)
        np.testing.assert_allclose(got.states, expected.states, atol=1e-4)


def test_device_names_are_checked_by_field() -> None:
    for name in ("auto", "cpu", "cuda", "cuda:1"):
        assert check_device(name) == name
    for bad in ("tpu", "gpu", "cuda:x", "", 3):
        with pytest.raises(ValueError, match=r"policy\.device: expected auto, cpu, cuda"):
            check_device(bad, "policy.device")  # type: ignore[arg-type]
    with pytest.raises(ValueError, match="device"):
        LlmPpoSettings(device="tpu")
    with pytest.raises(ValueError, match="device"):
        registry.get_algorithm("kalm-grounding").train([], "/nonexistent", device="gpu")
    assert resolve_device("cpu").type == "cpu"
    assert resolve_device("auto").type == ("cuda" if torch.cuda.is_available() else "cpu")


@pytest.mark.skipif(torch.cuda.is_available(), reason="a GPU is here")
def test_a_gpu_that_is_not_there_is_refused_not_replaced_by_the_cpu(model_dir: Path) -> None:
    with pytest.raises(ValueError, match="device: 'cuda', but torch sees no GPU"):
        resolve_device("cuda")
    with pytest.raises(ValueError, match="no GPU"):
        LlmPolicyModel.load(str(model_dir), device="cuda")


def test_bf16_is_chosen_by_the_device_the_model_runs_on(
    model_dir: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A model on the CPU of a machine that also has a GPU must not autocast to bf16 unless
    that CPU computes bf16 natively (emulated bf16 is ~3x slower than fp32). On an AVX2-only
    CPU (this project's machines) the old rule, "bf16 wherever torch sees a GPU", fails here."""
    from llmrl.llm_gateway.local_causal_lm import resolve_dtype

    on_this_cpu = native_bf16("cpu")
    monkeypatch.setattr(torch.cuda, "is_available", lambda: True)  # as beside a GPU
    assert native_bf16("cpu") == on_this_cpu
    monkeypatch.setenv("LLMRL_PRECISION", "native")  # the per-device rule, asked for by name
    assert (resolve_dtype("auto", torch.device("cpu")) == torch.bfloat16) == on_this_cpu
    policy = LlmPolicyModel.load(str(model_dir), value_hidden=16, device="cpu")
    assert policy.bf16 == on_this_cpu
    monkeypatch.delenv("LLMRL_PRECISION")  # the default: float32 on every machine
    assert resolve_dtype("auto", torch.device("cpu")) == torch.float32
    assert LlmPolicyModel.load(str(model_dir), value_hidden=16, device="cpu").bf16 is False
