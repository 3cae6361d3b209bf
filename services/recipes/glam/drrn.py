"""GLAM's DRRN baseline: the learner's `dqn` (SB3 DQN) with the DRRN Q-network
(`drrn_policy.py`) on the text the LLM reads.

The state is GLAM's prompt without its first line (the action phrases are scored as actions,
not read as state): the goal, then the last three observations and two actions, cut to the
most recent words when long; the actions are the env's phrases. The original's settings where
it has them (discount 0.9, batch 64, embedding and GRU sizes 128, gradient norm 5, Adam lr
1e-4, reward x 20 as for LLM-PPO); the replay holds the whole budget, and one gradient step
follows each step of all envs (the original made far fewer: one per rollout).
"""

from __future__ import annotations

import functools
import threading
from collections.abc import Callable, Sequence
from dataclasses import asdict
from pathlib import Path
from typing import Any

import numpy as np
from gymnasium import spaces

from llmrl.agents import Decision, EpisodeDriver
from llmrl.recipes.glam.driver import env_phrases, followed_history
from llmrl.recipes.glam.drrn_policy import DrrnLayout, encode, load_drrn, q_values
from llmrl.recipes.glam.prompt import PromptHistory
from llmrl.simulator.sb3_vec_env import BatchVecEnv
from llmrl.simulator.world import STEP_ENTRIES, episode_ends

TEXT_KEYS = ("text", "mission", "action_phrases")
REWARD_SCALE = 20.0  # GLAM's reward shaping, the same as LLM-PPO's default


def state_row(layout: DrrnLayout, history: PromptHistory) -> np.ndarray:
    """DRRN's observation of one env: the goal first, then the history (module docstring)."""
    goal, _, rest = history.prompt().partition("\n")[2].partition("\n")
    return encode(layout, goal, rest, history.phrases)


def phrases_of(value: Any) -> tuple[str, ...]:
    return env_phrases({"action_phrases": value})


class DrrnVecEnv(BatchVecEnv):
    """An SB3 VecEnv over a BabyAI-Text world whose observations are DRRN rows: each env
    keeps its episode's prompt history (same-step autoreset, as `WorldVecEnv`)."""

    def __init__(self, world: Any, layout: DrrnLayout, reward_scale: float = REWARD_SCALE):
        self.world, self.layout, self.reward_scale = world, layout, reward_scale
        self.histories: list[PromptHistory] = []
        # an env without `action_phrases` has BabyAI-Text's six (`env_phrases`)
        self._text_keys = [k for k in TEXT_KEYS if k in world.observation_space.spaces]
        self._requested = [*self._text_keys, *STEP_ENTRIES]
        self._actions = np.zeros(world.num_envs, np.int64)
        if not isinstance(world.action_space, spaces.Discrete):
            raise ValueError(f"env: DRRN needs discrete actions, got {world.action_space}")
        super().__init__(world.num_envs, layout.observation_space(), world.action_space)

    def _start(self, i: int, result: dict[str, np.ndarray]) -> None:
        phrases = result["action_phrases"][i] if "action_phrases" in result else None
        history = PromptHistory(phrases_of(phrases))
        history.start(str(result["mission"][i]), str(result["text"][i]))
        if i < len(self.histories):
            self.histories[i] = history
        else:
            self.histories.append(history)

    def _rows(self) -> np.ndarray:
        return np.stack([state_row(self.layout, h) for h in self.histories])

    def reset(self) -> np.ndarray:
        result = self.world.reset(seed=self._reset_seed(), observations=self._requested)
        self.histories = []
        for i in range(self.num_envs):
            self._start(i, result)
        return self._rows()

    def step_async(self, actions: np.ndarray) -> None:
        self._actions = np.asarray(actions, np.int64).reshape(self.num_envs)

    def step_wait(self) -> tuple[np.ndarray, np.ndarray, np.ndarray, list[dict[str, Any]]]:
        result = self.world.step(action=self._actions, observations=self._requested)
        terminated, truncated = episode_ends(result)
        dones = terminated | truncated
        for i, history in enumerate(self.histories):
            history.advance(history.phrases[int(self._actions[i])], str(result["text"][i]))
        rows = self._rows()
        infos: list[dict[str, Any]] = [{} for _ in range(self.num_envs)]
        if dones.any():
            restarted = self.world.step(observations=self._text_keys, active=dones)
            for i in np.flatnonzero(dones):
                infos[i]["terminal_observation"] = rows[i].copy()
                infos[i]["TimeLimit.truncated"] = bool(truncated[i])
                self._start(i, restarted)
                rows[i] = state_row(self.layout, self.histories[i])
        rewards = result["reward"].astype(np.float32) * np.float32(self.reward_scale)
        return rows, rewards, dones, infos

    def close(self) -> None:
        self.world.close()


def train_drrn(
    env: str,
    out_dir: Path,
    *,
    steps: int,
    num_envs: int,
    num_steps: int,
    learning_rate: float,
    eval_every: int,
    seed: int,
    layout: DrrnLayout | None = None,
    batch_size: int = 64,
    learning_starts: int | None = None,
    simulator: str | None = None,
    tensorboard_dir: str | None = None,
    on_progress: Callable[[int], None] | None = None,
) -> dict[str, Any]:
    """DRRN by the learner's `dqn` for `steps` env steps. A version of the line `out_dir`
    every `eval_every` "updates" of `num_envs x num_steps` env steps (the PPO methods'
    unit, so the learning curves share their x) and at the end: `points` (model file, update,
    env steps)."""
    from stable_baselines3.common.vec_env import VecMonitor

    from llmrl.recipes.glam.drrn_policy import DrrnPolicy
    from llmrl.recipes.glam.training import learn_in_updates
    from llmrl.simulator.client import make_world

    layout = layout or DrrnLayout()
    per_update = num_envs * num_steps
    world = make_world(env, num_envs=num_envs, seed=seed * 10_000 + 7_000, address=simulator)
    venv = VecMonitor(DrrnVecEnv(world, layout))
    try:
        return learn_in_updates(
            "dqn",
            venv,
            out_dir,
            steps=steps,
            per_update=per_update,
            eval_every=eval_every,
            seed=seed,
            policy=DrrnPolicy,
            tensorboard_dir=tensorboard_dir,
            on_progress=on_progress,
            learning_rate=learning_rate,
            buffer_size=max(steps, batch_size),
            learning_starts=min(steps // 4, 500) if learning_starts is None else learning_starts,
            batch_size=batch_size,
            gamma=0.9,
            train_freq=1,
            gradient_steps=1,  # one per step of all envs (a GRU step costs ~0.1 s on a CPU)
            target_update_interval=max(per_update, num_envs),
            exploration_fraction=0.5,
            exploration_final_eps=0.05,
            max_grad_norm=5.0,
            policy_kwargs={"drrn": asdict(layout)},
        )
    finally:
        venv.close()


def sample_or_argmax(q: Sequence[float], greedy: bool, rng: np.random.Generator) -> int:
    """DRRN's action: the best, or a draw from the softmax of the Q-values (the original's
    tests sample so)."""
    values = np.asarray(q, np.float64)
    if greedy:
        return int(np.argmax(values))
    p = np.exp(values - values.max())
    return int(rng.choice(len(p), p=p / p.sum()))


def cached_drrn(path: str) -> Any:
    """The DQN saved at `path`, loaded once per process and file version (an evaluation
    plays many episodes of one model)."""
    if not Path(path).is_file():
        raise FileNotFoundError(f"policy.model: no DRRN model at {path}")
    return _load(path, Path(path).stat().st_mtime_ns)


@functools.lru_cache(maxsize=4)
def _load(path: str, version: int) -> Any:
    del version  # keys the cache only
    return load_drrn(path)


_SCORING = threading.Lock()  # one model may serve episodes on several threads


class DrrnDriver(EpisodeDriver):
    """DRRN's policy on GLAM's text: the episode's prompt history, the env's phrases."""

    observations = ("text", "mission")
    optional_observations = ("action_phrases", "success")

    def __init__(self, model: Any, greedy: bool, seed: int) -> None:
        self.model, self.greedy = model, greedy
        self.layout = DrrnLayout(**model.policy.drrn)
        self.rng = np.random.default_rng(seed)
        self.history: PromptHistory | None = None
        self.last_phrase = ""

    def reset(self) -> None:
        self.history = None

    def act(self, observation: dict[str, Any], t: int) -> Decision:
        self.history, phrases = followed_history(self.history, observation, t, self.last_phrase)
        with _SCORING:
            q = q_values(self.model, state_row(self.layout, self.history))
        index = sample_or_argmax(q, self.greedy, self.rng)
        self.last_phrase = phrases[index]
        return Decision(action=index)
