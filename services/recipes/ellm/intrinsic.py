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
from dataclasses import dataclass
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
CRAFTER_TASKS = {  # the fine-tuning tasks (the names) and the achievement that pays each
    "place crafting table": "place_table",
    "attack cow": "eat_cow",
    "collect stone": "collect_stone",
}
HOUSEKEEP_FIGURES = (  # an episode's figures on Housekeep: tidying, and exploring
    "correctly_placed",
    "correct_at_start",
    "misplaced_at_start",
    "success_rate",
    "rooms_explored",
    "objects_found",
)


@dataclass(frozen=True)
class EnvProfile:
    """What ELLM reads of an env family: the agent's numeric entries, the text entries, the
    suggesters of the methods, and how a step's transition caption, an episode's figures and a
    task's progress come out of the observations."""

    name: str
    agent_keys: tuple[str, ...]  # numeric entries the agent (and novelty rewards) read
    embed_keys: tuple[str, ...]  # of those, cells of ids that dqn-ellm embeds
    caption_key: str  # the state text suggestions are asked for
    state_keys: tuple[str, ...]  # entries a suggester reads as its `state`
    extra_keys: tuple[str, ...]  # other entries requested from the world
    suggesters: dict[str, str]  # method -> suggester (ellm: None = the `suggester` setting)
    tasks: dict[str, str]  # fine-tuning task -> what measures its progress
    default_task: str

    @property
    def world_keys(self) -> list[str]:
        keys = [*self.agent_keys, self.caption_key, *self.state_keys, *self.extra_keys]
        return list(dict.fromkeys(keys))

    def transitions(
        self, before: dict[str, np.ndarray] | None, after: dict[str, np.ndarray]
    ) -> list[str]:
        """Per env, what its last step did in goal words ("" when nothing)."""
        if self.name == "crafter":
            return [str(text) for text in after["transition_caption"]]
        from llmrl.recipes.ellm.housekeep import transition_caption

        if before is None:
            return [""] * len(after["known_house"])
        return [
            transition_caption(str(old), str(new))
            for old, new in zip(before["known_house"], after["known_house"], strict=True)
        ]

    def progress(self, observations: dict[str, np.ndarray], task: str) -> np.ndarray:
        """Per env, the task's progress counter (its increase is the task reward)."""
        if self.name == "crafter":
            from llmrl.simulator.envs.crafter.vocabulary import ACHIEVEMENTS

            index = ACHIEVEMENTS.index(self.tasks[task])
            return np.asarray(observations["achievements"])[:, index].astype(np.float64)
        return np.asarray(observations[self.tasks[task]], np.float64).reshape(-1)

    def figures(self, observations: dict[str, np.ndarray], i: int) -> dict[str, Any]:
        """An episode's figures from its last observation: `unlocked` is Crafter's distinct
        achievements, Housekeep's objects put right (correctly placed minus at the start)."""
        if self.name == "crafter":
            achievements = np.asarray(observations["achievements"][i]).astype(int)
            return {"achievements": achievements.tolist(), "unlocked": int(achievements.sum())}
        values = {key: float(observations[key][i]) for key in HOUSEKEEP_FIGURES}
        rearranged = values["correctly_placed"] - values["correct_at_start"]
        return {**values, "unlocked": int(rearranged)}


CRAFTER = EnvProfile(
    name="crafter",
    agent_keys=AGENT_KEYS,
    embed_keys=("local_map",),
    caption_key="caption",
    state_keys=AGENT_KEYS,
    extra_keys=("transition_caption",),
    suggesters={"ellm": "", "oracle": "oracle", "all-goals": "all-goals"},
    tasks=CRAFTER_TASKS,
    default_task="place crafting table",
)
# Housekeep: the agent reads what it knows as numbers (the env's `slots`...); suggestions are
# asked for the known house (its JSON: the same knowledge, the same suggestions); the oracle
# reads the privileged true placements, which the agent never sees
HOUSEKEEP = EnvProfile(
    name="housekeep",
    agent_keys=("slots", "object_receptacles", "receptacle_rooms"),
    embed_keys=(),
    caption_key="known_house",
    state_keys=("known_house", "correct_receptacles"),
    extra_keys=HOUSEKEEP_FIGURES,
    suggesters={"ellm": "housekeep-llm", "oracle": "housekeep-oracle"},
    tasks={"tidy": "correctly_placed"},
    default_task="tidy",
)
PROFILES = {"crafter": CRAFTER, "housekeep": HOUSEKEEP}


def profile_for_env(env: str) -> EnvProfile:
    """The profile of a registered env id, from its tags (before any env is made)."""
    from llmrl.common.registry import registry

    tags = registry.entry("env", env).metadata.get("tags") or ()
    return HOUSEKEEP if "housekeep" in tags else CRAFTER


def profile_of(observation_space: Any, env: str = "env") -> EnvProfile:
    """The profile whose entries the env has (CrafterText-like first)."""
    for profile in PROFILES.values():
        if all(key in observation_space.spaces for key in profile.world_keys):
            return profile
    needs = "; ".join(f"{p.name}: {', '.join(p.world_keys)}" for p in PROFILES.values())
    raise ValueError(f"env: {env} lacks the observations ELLM needs ({needs})")


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
        profile: EnvProfile = CRAFTER,
    ) -> None:
        self.name, self.profile = name, profile
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
            [str(observations[self.profile.caption_key][i]) for i in chosen],
            [self.rewards[i].achieved for i in chosen],
            states=[{key: observations[key][i] for key in self.profile.state_keys} for i in chosen],
        )
        for i, answer in zip(chosen, answers, strict=True):
            self.suggestions[i] = list(answer)
        self.seconds["suggest"] += time.perf_counter() - started

    def start(self, observations: dict[str, np.ndarray], envs: np.ndarray) -> None:
        for i in np.flatnonzero(envs):
            self.rewards[i].reset()
        self._suggest(observations, envs)

    def step(
        self, observations: dict[str, np.ndarray], envs: np.ndarray, transitions: list[str]
    ) -> np.ndarray:
        rewards = np.zeros(len(envs), np.float32)
        started = time.perf_counter()
        for i in np.flatnonzero(envs):
            transition = transitions[i]
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
            captions = [str(c) for c in observations[self.profile.caption_key]]
            extra["caption_embedding"] = np.asarray(self.embed(captions), np.float32)
        self.seconds["embed"] += time.perf_counter() - started
        return extra

    def counters(self) -> dict[str, float]:
        counters = {key: float(value) for key, value in self.suggester.counters().items()}
        counters["rewarded_goals"] = float(self.paid)
        return counters


class NoveltySource:
    """A novelty reward (RND, kNN, none) over the agent's numeric observation."""

    def __init__(self, reward: Any, keys: Sequence[str] = AGENT_KEYS) -> None:
        self.reward, self.name, self.keys = reward, reward.name, tuple(keys)
        self.seconds = {"reward": 0.0}

    def start(self, observations: dict[str, np.ndarray], envs: np.ndarray) -> None:
        pass

    def step(
        self, observations: dict[str, np.ndarray], envs: np.ndarray, transitions: list[str]
    ) -> np.ndarray:
        started = time.perf_counter()
        numeric = {key: observations[key] for key in self.keys if key in observations}
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
    vector of CrafterText or Housekeep envs (`profile`; see module docstring)."""

    def __init__(
        self,
        env: gym.vector.VectorEnv,
        source: Any,
        *,
        extrinsic_scale: float = 0.0,
        task: str | None = None,
        embedding_dim: int = 0,
        profile: EnvProfile = CRAFTER,
    ) -> None:
        super().__init__(env)
        self.source, self.profile = source, profile
        self.extrinsic_scale, self.task = extrinsic_scale, task
        if task is not None and task not in profile.tasks:
            raise ValueError(
                f"task: {task!r} is no {profile.name} task; tasks: {', '.join(profile.tasks)}"
            )
        inner = env.single_observation_space
        missing = [key for key in profile.world_keys if key not in inner.spaces]
        if missing:
            raise ValueError(
                f"env: observations lack {', '.join(missing)}; ELLM on {profile.name} needs "
                f"{', '.join(profile.world_keys)}"
            )
        entries = {key: inner[key] for key in profile.agent_keys}
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
        self.previous_progress = np.zeros(n)
        self.previous: dict[str, np.ndarray] | None = None  # the last observations (captions)
        self.returns = {
            "intrinsic": np.zeros(n),
            "extrinsic": np.zeros(n),
            "task": np.zeros(n),
        }
        self.lengths = np.zeros(n, dtype=np.int64)
        self.seconds = {"env": 0.0}

    def _agent_observations(self, observations: dict[str, np.ndarray]) -> dict[str, np.ndarray]:
        agent = {key: observations[key] for key in self.profile.agent_keys}
        agent.update(self.source.extra_observations(observations))
        return agent

    def _progress(self, observations: dict[str, np.ndarray]) -> np.ndarray:
        if self.task is None:
            return np.zeros(self.num_envs)
        return self.profile.progress(observations, self.task)

    def _remember(
        self, observations: dict[str, np.ndarray], envs: np.ndarray | None = None
    ) -> None:
        """Keep the text of the last observations (Housekeep's transitions compare them)."""
        if self.previous is None or envs is None:
            self.previous = {k: np.array(v) for k, v in observations.items()}
            return
        for key, value in observations.items():
            # np.where, not assignment into rows: text entries are fixed-width `<U` arrays and
            # a new episode's longer text would be cut to the old width
            rows = envs.reshape(-1, *([1] * (np.ndim(value) - 1)))
            self.previous[key] = np.where(rows, value, self.previous[key])

    def reset(
        self, *, seed: int | list[int] | None = None, options: dict[str, Any] | None = None
    ) -> tuple[dict[str, np.ndarray], dict[str, Any]]:
        observations, info = self.env.reset(seed=seed, options=options)
        everyone = np.ones(self.num_envs, dtype=bool)
        self.source.start(observations, everyone)
        self.previous_progress[:] = self._progress(observations)
        self._remember(observations)
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
        transitions = self.profile.transitions(self.previous, observations)
        transitions = [text if ok else "" for text, ok in zip(transitions, stepped, strict=True)]
        intrinsic = np.where(stepped, self.source.step(observations, stepped, transitions), 0.0)
        progress = self._progress(observations)
        task = np.where(stepped, progress - self.previous_progress, 0.0)
        self.previous_progress[:] = progress
        self._remember(observations)
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
                    **self.profile.figures(observations, int(i)),
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
        self.previous_progress[ended] = self._progress(observations)[ended]
        self._remember(observations, ended)
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
