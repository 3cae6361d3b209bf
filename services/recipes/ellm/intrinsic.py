"""Intrinsic rewards as a gymnasium vector wrapper: ELLM's and its baselines'.

`IntrinsicRewardWrapper` sits on a vector env of CrafterText envs (NEXT_STEP autoreset, e.g.
`WorldVectorEnv` over a world with the text entries requested) and gives the agent:

* observations: the numeric entries (`local_map`, `inventory`, `achievements`), plus, with
  goal conditioning, `goal_embedding` (the mean embedding of the current suggestions) and/or
  `caption_embedding` (the state caption's embedding);
* reward = the source's intrinsic reward + `extrinsic_scale` x crafter's reward + 1 when
  the fine-tuning `task` achievement is unlocked (pretraining: extrinsic 0, no task;
  fine-tuning: no intrinsic, task reward only);
* `infos["episodes"]`: one dict per episode that ended at this step (its achievements, its
  intrinsic, extrinsic and task returns, its length), which the recipe turns into curves.

Reward sources (`make_reward_source`), one per method:
* `ellm`: an LLM suggester (`llm`: generates goals, or `llm-score`: ranks a goal list) and
  `SuggestionReward` (the transition caption's best cosine similarity to a suggestion above
  the threshold, each suggestion paying once per episode); the suggester is asked for the
  new state's goals after each step (it asks the LLM only when the caption changed);
* `oracle` and `all-goals`: the same reward with ELLM's oracle or every goal as suggestions;
* `rnd`, `knn`: novelty (`novelty.py`); `none`: nothing.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Sequence
from typing import Any

import gymnasium as gym
import numpy as np
from gymnasium import spaces

AGENT_KEYS = ("local_map", "inventory", "achievements")
TEXT_KEYS = ("caption", "transition_caption")
SUGGESTION_METHODS = {"oracle": "oracle", "all-goals": "all-goals"}  # method -> suggester
NOVELTY_METHODS = ("rnd", "knn")
METHODS = ("ellm", "oracle", "all-goals", "rnd", "knn", "none")
LLM_SUGGESTERS = ("llm", "llm-score")
CONDITIONING = ("none", "suggestions", "caption", "both")


class NoReward:
    """The no-intrinsic baseline."""

    name = "none"

    def __call__(self, observations: dict[str, np.ndarray]) -> np.ndarray:
        return np.zeros(len(next(iter(observations.values()))), np.float32)


class SuggestionSource:
    """Suggestions per env and ELLM's reward for reaching them (see module docstring).

    One suggester serves every env (`suggest_many`: the captions it has not seen go to the
    gateway together, and each caption is asked once); `rewards[i]` is env i's
    `SuggestionReward` (its episode's paid goals), all sharing one embedding cache.
    `embed(texts)` gives sentence embeddings (goal conditioning only).
    """

    def __init__(
        self,
        name: str,
        suggester: Any,
        rewards: Sequence[Any],
        embed: Callable[[list[str]], np.ndarray] | None = None,
        conditioning: str = "none",
        embedding_dim: int = 0,
    ) -> None:
        self.name = name
        self.suggester, self.rewards = suggester, list(rewards)
        self.embed, self.conditioning, self.embedding_dim = embed, conditioning, embedding_dim
        self.suggestions: list[list[str]] = [[] for _ in self.rewards]
        self.paid = 0
        self.seconds = {"suggest": 0.0, "reward": 0.0, "embed": 0.0}

    def _suggest(self, observations: dict[str, np.ndarray], envs: np.ndarray) -> None:
        chosen = np.flatnonzero(envs)
        if len(chosen) == 0:
            return
        started = time.perf_counter()
        answers = self.suggester.suggest_many(
            [str(observations["caption"][i]) for i in chosen],
            [self.rewards[i].achieved for i in chosen],
            states=[{key: observations[key][i] for key in AGENT_KEYS} for i in chosen],
        )
        for i, answer in zip(chosen, answers, strict=True):
            self.suggestions[i] = list(answer)
        self.seconds["suggest"] += time.perf_counter() - started

    def start(self, observations: dict[str, np.ndarray], envs: np.ndarray) -> None:
        for i in np.flatnonzero(envs):
            self.rewards[i].reset()
        self._suggest(observations, envs)

    def step(self, observations: dict[str, np.ndarray], envs: np.ndarray) -> np.ndarray:
        rewards = np.zeros(len(envs), np.float32)
        started = time.perf_counter()
        for i in np.flatnonzero(envs):
            transition = str(observations["transition_caption"][i])
            if transition:
                reward, goal = self.rewards[i].reward(transition, self.suggestions[i])
                if goal is not None:
                    rewards[i] = reward
                    self.paid += 1
        self.seconds["reward"] += time.perf_counter() - started
        self._suggest(observations, envs)
        return rewards

    def extra_observations(self, observations: dict[str, np.ndarray]) -> dict[str, np.ndarray]:
        extra: dict[str, np.ndarray] = {}
        if self.embed is None or self.conditioning == "none":
            return extra
        started = time.perf_counter()
        n = len(self.rewards)
        if self.conditioning in ("suggestions", "both"):
            goals = np.zeros((n, self.embedding_dim), np.float32)
            for i, suggestions in enumerate(self.suggestions):
                if suggestions:
                    goals[i] = np.asarray(self.embed(suggestions), np.float32).mean(axis=0)
            extra["goal_embedding"] = goals
        if self.conditioning in ("caption", "both"):
            captions = [str(c) for c in observations["caption"]]
            extra["caption_embedding"] = np.asarray(self.embed(captions), np.float32)
        self.seconds["embed"] += time.perf_counter() - started
        return extra

    def counters(self) -> dict[str, float]:
        counters = {key: float(value) for key, value in self.suggester.counters().items()}
        counters["rewarded_goals"] = float(self.paid)
        return counters


class NoveltySource:
    """A novelty reward (RND, kNN, none) over the agent's numeric observation."""

    def __init__(self, reward: Any) -> None:
        self.reward, self.name = reward, reward.name
        self.seconds = {"reward": 0.0}

    def start(self, observations: dict[str, np.ndarray], envs: np.ndarray) -> None:
        pass

    def step(self, observations: dict[str, np.ndarray], envs: np.ndarray) -> np.ndarray:
        started = time.perf_counter()
        numeric = {key: observations[key] for key in AGENT_KEYS if key in observations}
        rewards = np.where(envs, self.reward(numeric), 0.0).astype(np.float32)
        self.seconds["reward"] += time.perf_counter() - started
        return rewards

    def extra_observations(self, observations: dict[str, np.ndarray]) -> dict[str, np.ndarray]:
        return {}

    def counters(self) -> dict[str, float]:
        return {}

    def state_dict(self) -> dict[str, Any]:
        return self.reward.state_dict() if hasattr(self.reward, "state_dict") else {}

    def load_state_dict(self, state: dict[str, Any]) -> None:
        if hasattr(self.reward, "load_state_dict"):
            self.reward.load_state_dict(state)


class IntrinsicRewardWrapper(gym.vector.VectorWrapper):
    """Intrinsic (and task) reward, numeric observations and finished-episode infos over a
    vector of CrafterText envs (see module docstring)."""

    def __init__(
        self,
        env: gym.vector.VectorEnv,
        source: Any,
        *,
        extrinsic_scale: float = 0.0,
        task_index: int | None = None,
        embedding_dim: int = 0,
    ) -> None:
        super().__init__(env)
        self.source = source
        self.extrinsic_scale, self.task_index = extrinsic_scale, task_index
        inner = env.single_observation_space
        missing = [key for key in (*AGENT_KEYS, *TEXT_KEYS) if key not in inner.spaces]
        if missing:
            raise ValueError(
                f"env: observations lack {', '.join(missing)}; ELLM needs a CrafterText-like "
                f"env with {', '.join((*AGENT_KEYS, *TEXT_KEYS))}"
            )
        entries = {key: inner[key] for key in AGENT_KEYS}
        conditioning = getattr(source, "conditioning", "none")
        if conditioning in ("suggestions", "both"):
            entries["goal_embedding"] = spaces.Box(-1.0, 1.0, (embedding_dim,), np.float32)
        if conditioning in ("caption", "both"):
            entries["caption_embedding"] = spaces.Box(-1.0, 1.0, (embedding_dim,), np.float32)
        self.single_observation_space = spaces.Dict(entries)
        self.observation_space = gym.vector.utils.batch_space(
            self.single_observation_space, self.num_envs
        )
        n = self.num_envs
        self.resetting = np.zeros(n, dtype=bool)
        self.previous_achievements = np.zeros((n, len(inner["achievements"].low)), np.int64)
        self.returns = {
            "intrinsic": np.zeros(n),
            "extrinsic": np.zeros(n),
            "task": np.zeros(n),
        }
        self.lengths = np.zeros(n, dtype=np.int64)
        self.seconds = {"env": 0.0}

    def _agent_observations(self, observations: dict[str, np.ndarray]) -> dict[str, np.ndarray]:
        agent = {key: observations[key] for key in AGENT_KEYS}
        agent.update(self.source.extra_observations(observations))
        return agent

    def reset(
        self, *, seed: int | list[int] | None = None, options: dict[str, Any] | None = None
    ) -> tuple[dict[str, np.ndarray], dict[str, Any]]:
        observations, info = self.env.reset(seed=seed, options=options)
        everyone = np.ones(self.num_envs, dtype=bool)
        self.source.start(observations, everyone)
        self.previous_achievements[:] = observations["achievements"]
        self.resetting[:] = False
        for returns in self.returns.values():
            returns[:] = 0.0
        self.lengths[:] = 0
        return self._agent_observations(observations), info

    def step(self, actions: Any) -> tuple[Any, np.ndarray, np.ndarray, np.ndarray, dict]:
        started = time.perf_counter()
        observations, extrinsic, terminated, truncated, infos = self.env.step(actions)
        self.seconds["env"] += time.perf_counter() - started
        stepped = ~self.resetting
        if self.resetting.any():  # these envs began new episodes: no reward, fresh goals
            self.source.start(observations, self.resetting)
        intrinsic = np.where(stepped, self.source.step(observations, stepped), 0.0)
        achievements = np.asarray(observations["achievements"])
        task = np.zeros(self.num_envs)
        if self.task_index is not None:
            newly = (
                achievements[:, self.task_index] > self.previous_achievements[:, self.task_index]
            )
            task = (newly & stepped).astype(np.float64)
        self.previous_achievements[:] = achievements
        extrinsic = np.where(stepped, extrinsic, 0.0)
        reward = intrinsic + self.extrinsic_scale * extrinsic + task
        self.returns["intrinsic"] += intrinsic
        self.returns["extrinsic"] += extrinsic
        self.returns["task"] += task
        self.lengths += stepped
        ended = (terminated | truncated) & stepped
        episodes = []
        for i in np.flatnonzero(ended):
            episodes.append(
                {
                    "env": int(i),
                    "achievements": achievements[i].astype(int).tolist(),
                    "unlocked": int(achievements[i].sum()),
                    "length": int(self.lengths[i]),
                    **{f"{name}_return": float(r[i]) for name, r in self.returns.items()},
                }
            )
            for returns in self.returns.values():
                returns[i] = 0.0
            self.lengths[i] = 0
        self.resetting = terminated | truncated
        infos = dict(infos)
        infos["episodes"] = episodes
        return self._agent_observations(observations), reward, terminated, truncated, infos

    def restart(self, ended: np.ndarray) -> dict[str, np.ndarray]:
        """Same-step autoreset for adapters (SB3): start the `ended` envs' next episodes now,
        stepping only them in the world (its `active` mask; the others are not stepped and
        repeat their observation), and return every env's agent observation. Without it the
        next `step` resets them instead (NEXT_STEP)."""
        ended = np.asarray(ended, dtype=bool)
        vector = self.env
        if not ended.any():
            raise ValueError("restart: no env ended")
        if not self.resetting[ended].all():
            raise ValueError("restart: only envs whose episode just ended can restart")
        result = vector.world.step(observations=vector.keys, active=ended)
        observations = {key: np.asarray(result[key]) for key in vector.keys}
        self.source.start(observations, ended)
        self.previous_achievements[ended] = observations["achievements"][ended]
        self.resetting[ended] = False
        return self._agent_observations(observations)

    def counters(self) -> dict[str, float]:
        return self.source.counters()

    def timings(self) -> dict[str, float]:
        """Seconds spent stepping the envs and in the reward source's parts."""
        return {**self.seconds, **getattr(self.source, "seconds", {})}

    def state_dict(self) -> dict[str, Any]:
        return self.source.state_dict() if hasattr(self.source, "state_dict") else {}

    def load_state_dict(self, state: dict[str, Any]) -> None:
        if hasattr(self.source, "load_state_dict") and state:
            self.source.load_state_dict(state)
