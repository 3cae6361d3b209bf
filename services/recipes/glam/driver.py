"""Episode drivers of the recipe `glam`: the LLM policy through the gateway, and random.

Policy specs:
* `{"kind": "glam", "model": <gateway model name or "<model>:<adapter>@<version>">,
  "reduction": "sum"|"mean", "greedy": bool}`: at each step the env's action phrases (its
  `action_phrases` observation where it has one, else BabyAI-Text's six) are scored as
  continuations of GLAM's prompt (`llmrl.learner.llm.glam_prompt`) by the gateway's `score`;
  the policy is the softmax of the scores (summed token log-probs, or their mean), played
  greedily (argmax) or sampled with a generator seeded by the episode's seed. Every score
  call is recorded as an `LlmCall`.
* `{"kind": "glam-random"}`: a uniformly random phrase (seeded by the episode's seed), the
  baseline a small BabyAI level already reaches ~35% with.
"""

from __future__ import annotations

from typing import Any

import numpy as np

from llmrl.agents import Decision, EpisodeDriver, EpisodeJob, RolloutResources
from llmrl.common.episodes import LlmCall
from llmrl.common.registry import registry
from llmrl.learner.llm.glam_prompt import PromptHistory, action_phrases

GLAM, RANDOM = "glam", "glam-random"
REDUCTIONS = ("sum", "mean")


def env_phrases(observation: dict[str, Any]) -> tuple[str, ...]:
    """The env's action phrases (variants rename them; BabyAI-Text sends them one a line),
    else BabyAI-Text's six."""
    phrases = observation.get("action_phrases")
    if phrases is None:
        return action_phrases("babyai")
    if isinstance(phrases, str):
        return tuple(line.strip() for line in phrases.splitlines() if line.strip())
    return tuple(str(p) for p in phrases)


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
        self, llm: Any, model: str, reduction: str, greedy: bool, seed: int, run_id: str
    ) -> None:
        if reduction not in REDUCTIONS:
            raise ValueError(
                f"reduction: expected one of {', '.join(REDUCTIONS)}, got {reduction!r}"
            )
        self.llm, self.model, self.reduction, self.greedy = llm, model, reduction, greedy
        self.rng = np.random.default_rng(seed)
        self.run_id = run_id
        self.history: PromptHistory | None = None
        self.last_phrase = ""

    def reset(self) -> None:
        self.history = None

    def act(self, observation: dict[str, Any], t: int) -> Decision:
        phrases = env_phrases(observation)
        text, mission = str(observation["text"]), str(observation["mission"])
        if self.history is None or t == 0:
            self.history = PromptHistory(phrases)
            self.history.start(mission, text)
        else:
            self.history.advance(self.last_phrase, text)
        prompt = self.history.prompt()
        result = self.llm.score(
            prompt,
            [" " + phrase for phrase in phrases],
            model=self.model,
            run_id=self.run_id,
            tag="glam",
        )
        counts = [len(tokens) for tokens in result.token_logprobs]
        probabilities = policy_distribution(result.logprobs, counts, self.reduction)
        if self.greedy:
            index = int(np.argmax(probabilities))
        else:
            index = int(self.rng.choice(len(phrases), p=probabilities))
        self.last_phrase = phrases[index]
        call = LlmCall(
            t=t,
            messages=[{"role": "user", "content": prompt}],
            response=self.last_phrase,
            parsed=[self.last_phrase],
            model=result.model,
            prompt_tokens=result.prompt_tokens,
            cost_usd=result.cost_usd,
            cached=result.cached,
            info={"logprobs": list(result.logprobs), "probabilities": probabilities.tolist()},
        )
        return Decision(skill=self.last_phrase, llm_calls=[call])


class RandomPhraseDriver(EpisodeDriver):
    """A uniformly random action phrase at every step (seeded by the episode)."""

    observations = ()
    optional_observations = ("action_phrases", "success")

    def __init__(self, seed: int) -> None:
        self.rng = np.random.default_rng(seed)

    def act(self, observation: dict[str, Any], t: int) -> Decision:
        phrases = env_phrases(observation)
        return Decision(skill=phrases[int(self.rng.integers(len(phrases)))])


@registry.register_driver(GLAM, "GLAM: an LLM scores the env's action phrases (gateway score)")
def _glam_driver(policy: dict[str, Any], resources: RolloutResources, job: EpisodeJob) -> Any:
    if not policy.get("model"):
        raise ValueError("policy.model: a gateway model name is required")
    return GlamDriver(
        resources.llm,
        str(policy["model"]),
        str(policy.get("reduction", "sum")),
        bool(policy.get("greedy", True)),
        seed=job.seed,
        run_id=job.run_id,
    )


@registry.register_driver(RANDOM, "a uniformly random action phrase (GLAM's baseline)")
def _random_driver(policy: dict[str, Any], resources: RolloutResources, job: EpisodeJob) -> Any:
    return RandomPhraseDriver(seed=job.seed)
