"""Episode drivers of the recipe `glam`: the LLM policy (through the gateway, or from an
LLM-PPO checkpoint), Symbolic-PPO's SB3 policy, DRRN, and random.

Policy specs:
* `{"kind": "glam", "model": <gateway model name or "<model>:<adapter>@<version>">,
  "reduction": "sum"|"mean", "greedy": bool}`: at each step the env's action phrases (its
  `action_phrases` observation where it has one, else BabyAI-Text's six) are scored as
  continuations of GLAM's prompt (`llmrl.recipes.glam.prompt`) by the gateway's `score`;
  the policy is the softmax of the scores (summed token log-probs, or their mean), played
  greedily (argmax) or sampled with a generator seeded by the episode's seed. Every score
  call is recorded as an `LlmCall`. With `"chat": true` the prompt is sent as one user turn
  of the model's chat template and the phrases (no leading space) are the assistant's answer:
  the form behaviour cloning trains through the learner's chat SFT.
* `{"kind": "glam-checkpoint", "checkpoint": <llm-ppo version directory>, "reduction": ...,
  "greedy": bool}`: the same policy, scored in this process by the learner's scorer from an
  LLM-PPO checkpoint (NPAE's fully fine-tuned model, which the gateway cannot serve as an
  adapter).
* `{"kind": "glam-sb3", "model": <SB3 .zip>, "greedy": bool}`: Symbolic-PPO's policy on the
  grid (`image`, `direction`, `mission_tokens`), its most likely action or a sample seeded by
  the episode's seed.
* `{"kind": "glam-drrn", "model": <SB3 DQN .zip>, "greedy": bool}`: DRRN's Q-values of the
  env's phrases after GLAM's history (`llmrl.recipes.glam.drrn`), the best or a draw from
  their softmax seeded by the episode's seed.
* `{"kind": "glam-random"}`: a uniformly random phrase (seeded by the episode's seed), the
  baseline a small BabyAI level already reaches ~35% with.
"""

from __future__ import annotations

import functools
import threading
from typing import Any, Literal

import numpy as np
from pydantic import Field

from llmrl.agents import Decision, EpisodeDriver, EpisodeJob, RolloutResources
from llmrl.agents.policy_spec import ArtifactRef, PolicySpec
from llmrl.common.episodes import LlmCall
from llmrl.common.registry import registry
from llmrl.learner.llm.scorer import Reduction
from llmrl.recipes.glam.prompt import PromptHistory, action_phrases

GLAM, RANDOM, CHECKPOINT, SYMBOLIC = "glam", "glam-random", "glam-checkpoint", "glam-sb3"
DRRN = "glam-drrn"


def env_phrases(observation: dict[str, Any]) -> tuple[str, ...]:
    """The env's action phrases (variants rename them; BabyAI-Text sends them one a line),
    else BabyAI-Text's six."""
    phrases = observation.get("action_phrases")
    if phrases is None:
        return action_phrases("babyai")
    if isinstance(phrases, str):
        return tuple(line.strip() for line in phrases.splitlines() if line.strip())
    return tuple(str(p) for p in phrases)


def followed_history(
    history: PromptHistory | None, observation: dict[str, Any], t: int, last_phrase: str
) -> tuple[PromptHistory, tuple[str, ...]]:
    """The episode's prompt history after this step's observation (a new one at its first
    step), and the env's phrases."""
    phrases = env_phrases(observation)
    text, mission = str(observation["text"]), str(observation["mission"])
    if history is None or t == 0:
        history = PromptHistory(phrases)
        history.start(mission, text)
    else:
        history.advance(last_phrase, text)
    return history, phrases


def policy_distribution(logprobs: list[float], token_counts: list[int], reduction: str) -> Any:
    """Softmax over the candidates' scores: summed log-probs, or their per-token mean."""
    scores = np.asarray(logprobs, dtype=np.float64)
    if reduction == "mean":
        scores = scores / np.maximum(np.asarray(token_counts, dtype=np.float64), 1.0)
    scores = scores - scores.max()
    probabilities = np.exp(scores)
    return probabilities / probabilities.sum()


class GlamDriver(EpisodeDriver):
    """Chooses an action phrase by scoring the GLAM prompt's continuations at the gateway."""

    observations = ("text", "mission")
    optional_observations = ("action_phrases", "success")

    def __init__(
        self,
        llm: Any,
        model: str,
        reduction: str,
        greedy: bool,
        seed: int,
        run_id: str,
        chat: bool = False,
    ) -> None:
        self.llm, self.model, self.reduction, self.greedy = llm, model, reduction, greedy
        self.chat = chat
        self.rng = np.random.default_rng(seed)
        self.run_id = run_id
        self.history: PromptHistory | None = None
        self.last_phrase = ""

    def reset(self) -> None:
        self.history = None

    def score(self, prompt: str, phrases: tuple[str, ...]) -> tuple[Any, LlmCall]:
        """The phrases' policy probabilities after `prompt`, and the call's record."""
        result = self.llm.score(
            [{"role": "user", "content": prompt}] if self.chat else prompt,
            list(phrases) if self.chat else [" " + phrase for phrase in phrases],
            model=self.model,
            run_id=self.run_id,
            tag="glam",
        )
        counts = [len(tokens) for tokens in result.token_logprobs]
        probabilities = policy_distribution(result.logprobs, counts, self.reduction)
        call = LlmCall(
            t=0,
            messages=[{"role": "user", "content": prompt}],
            response="",
            model=result.model,
            prompt_tokens=result.prompt_tokens,
            cost_usd=result.cost_usd,
            cached=result.cached,
            info={
                "logprobs": list(result.logprobs),
                "probabilities": probabilities.tolist(),
                "phrases": list(phrases),
            },
        )
        return probabilities, call

    def act(self, observation: dict[str, Any], t: int) -> Decision:
        self.history, phrases = followed_history(self.history, observation, t, self.last_phrase)
        probabilities, call = self.score(self.history.prompt(), phrases)
        if self.greedy:
            index = int(np.argmax(probabilities))
        else:
            index = int(self.rng.choice(len(phrases), p=probabilities))
        self.last_phrase = phrases[index]
        call.t, call.response, call.parsed = t, self.last_phrase, [self.last_phrase]
        return Decision(skill=self.last_phrase, llm_calls=[call])


class CheckpointGlamDriver(GlamDriver):
    """GLAM's policy scored in this process from an LLM-PPO checkpoint (no gateway)."""

    def __init__(
        self, checkpoint: str, reduction: str, greedy: bool, seed: int, run_id: str
    ) -> None:
        super().__init__(None, checkpoint, reduction, greedy, seed, run_id)
        self.policy = _checkpoint_policy(checkpoint)

    def score(self, prompt: str, phrases: tuple[str, ...]) -> tuple[Any, LlmCall]:
        import torch

        from llmrl.learner.llm.scorer import score_candidates

        policy = self.policy
        with _SCORING, torch.no_grad():
            candidates = [policy.encode(" " + phrase) for phrase in phrases]
            prompt_ids = policy.encode(prompt)
            scores = score_candidates(policy, [prompt_ids], candidates, self.reduction).scores
        probabilities = policy_distribution(scores[0].double().tolist(), [1] * len(phrases), "sum")
        call = LlmCall(
            t=0,
            messages=[{"role": "user", "content": prompt}],
            response="",
            model=self.model,
            prompt_tokens=len(prompt_ids),
            info={"probabilities": probabilities.tolist(), "phrases": list(phrases)},
        )
        return probabilities, call


_SCORING = threading.Lock()  # one checkpoint model may serve episodes on several threads


@functools.lru_cache(maxsize=2)
def _checkpoint_policy(checkpoint: str) -> Any:
    """An LLM-PPO checkpoint's model, loaded once per process (evaluations play many
    episodes of the same version)."""
    return registry.get_algorithm("llm-ppo").load(checkpoint)


class SymbolicDriver(EpisodeDriver):
    """Symbolic-PPO: an SB3 policy on BabyAI's grid view and mission word ids."""

    optional_observations = ("success",)

    def __init__(self, model: Any, keys: tuple[str, ...], greedy: bool, seed: int) -> None:
        self.model = model
        self.keys = keys
        self.observations = keys
        self.greedy = greedy
        self.rng = np.random.default_rng(seed)

    def act(self, observation: dict[str, Any], t: int) -> Decision:
        # float32, as it was trained (llmrl.learner.wrappers.FloatObservations)
        obs = {key: np.asarray(observation[key], np.float32)[None] for key in self.keys}
        if self.greedy:
            action, _ = self.model.predict(obs, deterministic=True)
            return Decision(action=int(np.asarray(action).reshape(-1)[0]))
        # sampled with the episode's generator: SB3's own sampling draws on torch's global one
        import torch

        with torch.no_grad():
            tensors, _ = self.model.policy.obs_to_tensor(obs)
            probs = self.model.policy.get_distribution(tensors).distribution.probs[0]
        p = probs.double().numpy()
        return Decision(action=int(self.rng.choice(len(p), p=p / p.sum())))


class RandomPhraseDriver(EpisodeDriver):
    """A uniformly random action phrase at every step (seeded by the episode)."""

    observations = ()
    optional_observations = ("action_phrases", "success")

    def __init__(self, seed: int) -> None:
        self.rng = np.random.default_rng(seed)

    def act(self, observation: dict[str, Any], t: int) -> Decision:
        phrases = env_phrases(observation)
        return Decision(skill=phrases[int(self.rng.integers(len(phrases)))])


class ScoredSpec(PolicySpec):
    """How the phrases' scores become a policy (GLAM and its checkpoints)."""

    reduction: Reduction = Field(
        "sum", description="a phrase's score: its tokens' log-probs summed, or their mean"
    )
    greedy: bool = Field(True, description="play the argmax (else sample, seeded per episode)")


class GlamSpec(ScoredSpec):
    kind: Literal["glam"] = GLAM
    model: str = Field(..., min_length=1, description="gateway model (or <model>:<adapter>@<v>)")
    chat: bool = Field(False, description="the prompt as a chat turn (behaviour cloning's form)")


class CheckpointSpec(ScoredSpec):
    kind: Literal["glam-checkpoint"] = CHECKPOINT
    checkpoint: ArtifactRef


class SavedModelSpec(PolicySpec):
    model: ArtifactRef
    greedy: bool = Field(True, description="play the best action (else sample, seeded)")


class SymbolicSpec(SavedModelSpec):
    kind: Literal["glam-sb3"] = SYMBOLIC


class DrrnSpec(SavedModelSpec):
    kind: Literal["glam-drrn"] = DRRN


class RandomSpec(PolicySpec):
    kind: Literal["glam-random"] = RANDOM


@registry.register_driver(
    GLAM, "GLAM: an LLM scores the env's action phrases (gateway score)", spec=GlamSpec
)
def _glam_driver(spec: GlamSpec, resources: RolloutResources, job: EpisodeJob) -> Any:
    return GlamDriver(
        resources.llm,
        spec.model,
        spec.reduction,
        spec.greedy,
        seed=job.seed,
        run_id=job.run_id,
        chat=spec.chat,
    )


@registry.register_driver(
    CHECKPOINT, "GLAM's policy from an LLM-PPO checkpoint, in-process", spec=CheckpointSpec
)
def _checkpoint_driver(spec: CheckpointSpec, resources: RolloutResources, job: EpisodeJob) -> Any:
    return CheckpointGlamDriver(
        spec.checkpoint, spec.reduction, spec.greedy, seed=job.seed, run_id=job.run_id
    )


@registry.register_driver(
    SYMBOLIC, "Symbolic-PPO: an SB3 policy on BabyAI's grid (GLAM)", spec=SymbolicSpec
)
def _symbolic_driver(spec: SymbolicSpec, resources: RolloutResources, job: EpisodeJob) -> Any:
    from llmrl.learner.algorithms import load_cached
    from llmrl.recipes.glam.training import SYMBOLIC_KEYS

    return SymbolicDriver(
        load_cached("ppo", spec.model), SYMBOLIC_KEYS, greedy=spec.greedy, seed=job.seed
    )


@registry.register_driver(
    DRRN, "DRRN: a text Q-network's choice among the phrases (GLAM)", spec=DrrnSpec
)
def _drrn_driver(spec: DrrnSpec, resources: RolloutResources, job: EpisodeJob) -> Any:
    from llmrl.recipes.glam.drrn import DrrnDriver, cached_drrn

    return DrrnDriver(cached_drrn(spec.model), greedy=spec.greedy, seed=job.seed)


@registry.register_driver(
    RANDOM, "a uniformly random action phrase (GLAM's baseline)", spec=RandomSpec
)
def _random_driver(spec: RandomSpec, resources: RolloutResources, job: EpisodeJob) -> Any:
    return RandomPhraseDriver(seed=job.seed)
