"""The learner's LLM scorer against plain forward passes, and GLAM's prompt format."""

from __future__ import annotations

from pathlib import Path

import pytest
import torch

from llmrl.learner.llm.model import LlmPolicyModel
from llmrl.learner.llm.scorer import score_candidates, score_from_frozen
from llmrl.recipes.glam.prompt import PromptHistory, action_phrases, glam_prompt


@pytest.fixture(scope="module")
def policy(tiny_model_dir: Path) -> LlmPolicyModel:
    return LlmPolicyModel.load(str(tiny_model_dir), lora=False, value_hidden=8, bf16=False)


def plain_logprob(policy: LlmPolicyModel, prompt: list[int], candidate: list[int]) -> list[float]:
    """Token log-probabilities of `candidate` after `prompt` by one unpadded forward."""
    ids = torch.tensor([prompt + candidate])
    logits = policy.model(input_ids=ids).logits[0].float()
    logprobs = torch.log_softmax(logits, -1)
    start = len(prompt)
    return [float(logprobs[start - 1 + i, tok]) for i, tok in enumerate(candidate)]


def test_scores_equal_a_plain_forward_pass(policy: LlmPolicyModel) -> None:
    prompts = [policy.encode(t) for t in ("Goal: go to the ball\nAction 0:", "Hi\nAction 0:")]
    assert len(prompts[0]) != len(prompts[1])  # the batch is padded
    candidates = [policy.encode(" " + p) for p in action_phrases("babyai")]
    assert len({len(c) for c in candidates}) > 1  # so are the candidates
    with torch.no_grad():
        summed = score_candidates(policy, prompts, candidates)
        mean = score_candidates(policy, prompts, candidates, reduction="mean")
        for b, prompt in enumerate(prompts):
            for k, candidate in enumerate(candidates):
                expected = plain_logprob(policy, prompt, candidate)
                assert float(summed.scores[b, k]) == pytest.approx(sum(expected), abs=1e-4)
                assert float(mean.scores[b, k]) == pytest.approx(
                    sum(expected) / len(expected), abs=1e-4
                )
            hidden = policy.model(
                input_ids=torch.tensor([prompt]), output_hidden_states=True
            ).hidden_states[-1][0, -1]
            assert torch.allclose(summed.hidden[b], hidden, atol=1e-4)


def test_scores_are_differentiable(policy: LlmPolicyModel) -> None:
    prompts = [policy.encode("Action 0:")]
    candidates = [policy.encode(" go forward"), policy.encode(" drop")]
    scores = score_candidates(policy, prompts, candidates)
    scores.scores.sum().backward()
    grads = [p.grad for p in policy.model.parameters() if p.grad is not None]
    assert grads and any(float(g.abs().sum()) > 0 for g in grads)
    policy.model.zero_grad()


def test_nothing_is_frozen_when_every_layer_trains(
    policy: LlmPolicyModel, tiny_model_dir: Path
) -> None:
    assert policy.frozen_layers == 0  # full fine-tuning
    lora_everywhere = LlmPolicyModel.load(str(tiny_model_dir), lora=True, value_hidden=8)
    assert lora_everywhere.frozen_layers == 0


def test_bad_reduction_is_named(policy: LlmPolicyModel) -> None:
    with pytest.raises(ValueError, match="reduction"):
        score_candidates(policy, [[1]], [[2]], reduction="max")


def test_glam_prompt_format() -> None:
    history = PromptHistory(action_phrases("babyai"))
    history.start("go to the red ball", "You see a wall 2 steps forward\nYou see a red ball")
    history.advance("turn left", "You see a red ball 1 step forward")
    history.advance("go forward", "You see a wall")
    history.advance("turn right", "You see nothing")
    assert history.prompt() == (
        "Possible action of the agent: turn left, turn right, go forward, pick up, drop, toggle\n"
        "Goal of the agent: go to the red ball\n"
        "Observation 0: You see a red ball 1 step forward\n"
        "Action 0: go forward\n"
        "Observation 1: You see a wall\n"
        "Action 1: turn right\n"
        "Observation 2: You see nothing\n"
        "Action 2:"
    )
    history.start("pick up the key", "You see a key")
    assert history.prompt().endswith(
        "Goal of the agent: pick up the key\nObservation 0: You see a key\nAction 0:"
    )
    with pytest.raises(ValueError, match="actions"):
        glam_prompt(["a"], "m", ["o1"], ["a"])
    with pytest.raises(ValueError, match="action_set"):
        action_phrases("klingon")


def test_lora_on_the_top_layers_only_and_the_value_head(tiny_model_dir: Path) -> None:
    policy = LlmPolicyModel.load(
        str(tiny_model_dir), lora=True, lora_r=4, lora_layers=1, value_hidden=8, bf16=False
    )
    assert policy.frozen_layers == 1
    trained = [name for name, p in policy.model.named_parameters() if p.requires_grad]
    assert trained and all("layers.1." in name and "lora_" in name for name in trained)
    head = policy.heads["value"]
    assert [m.__class__.__name__ for m in head] == [
        "Linear", "Sigmoid", "Linear", "Sigmoid", "Linear",
    ]  # fmt: skip
    assert head[0].in_features == 32 and head[0].out_features == 8 and head[-1].out_features == 1
    with pytest.raises(ValueError, match="lora_layers"):
        LlmPolicyModel.load(str(tiny_model_dir), lora_layers=3)
    with pytest.raises(ValueError, match="base_model"):
        LlmPolicyModel.load("no-such-model-or-dir")


def test_frozen_layer_cache_gives_the_same_scores_values_and_gradients(
    tiny_model_dir: Path,
) -> None:
    torch.manual_seed(0)
    policy = LlmPolicyModel.load(
        str(tiny_model_dir), lora=True, lora_r=4, lora_layers=1, value_hidden=8, bf16=False
    )
    assert policy.frozen_layers == 1  # LoRA on layer 1 only: layer 0 and the embeddings frozen
    for p in policy.model.parameters():  # a LoRA that is not zero yet (B starts at 0)
        if p.requires_grad:
            torch.nn.init.normal_(p, std=0.3)
    texts = ("Goal: go to the ball\nObservation 0: a wall\nAction 0:", "Hi\nAction 0:", "A:")
    prompts = [policy.encode(t) for t in texts]
    candidates = [policy.encode(" " + p) for p in action_phrases("babyai")]
    with torch.no_grad():
        rollout = score_candidates(policy, prompts, candidates, "mean", keep_frozen=True)
    assert rollout.frozen is not None and len(rollout.frozen) == len(prompts)
    assert [f.prompt.shape[0] for f in rollout.frozen] == [len(p) for p in prompts]
    longest = max(len(c) for c in candidates)
    assert rollout.frozen[0].candidates.shape == (len(candidates), longest - 1, 32)

    def scored_and_grads(cached: bool, order: list[int]) -> tuple[torch.Tensor, ...]:
        policy.model.zero_grad()
        policy.heads.zero_grad()
        if cached:
            out = score_from_frozen(policy, [rollout.frozen[i] for i in order], candidates, "mean")
        else:
            out = score_candidates(policy, [prompts[i] for i in order], candidates, "mean")
        values = policy.heads["value"](out.hidden).squeeze(-1)
        logprobs = torch.log_softmax(out.scores, -1)
        (logprobs[:, 2].sum() + (values**2).sum()).backward()
        grads = [p.grad.clone() for p in policy.parameters()]
        assert all(g is not None for g in grads)
        return out.scores.detach(), values.detach(), *grads

    # a minibatch in another order and padding than the rollout's
    uncached = scored_and_grads(False, [2, 0])
    cached = scored_and_grads(True, [2, 0])
    assert torch.allclose(rollout.scores[[2, 0]], uncached[0], atol=1e-5)
    for plain, from_cache in zip(uncached, cached, strict=True):
        assert torch.allclose(plain, from_cache, atol=1e-5, rtol=1e-4)
    assert float(cached[2].abs().sum()) > 0  # the LoRA gets a gradient

    with pytest.raises(ValueError, match="candidates"):
        score_from_frozen(policy, rollout.frozen[:1], [[5, 6, 7, 8, 9, 10]])
