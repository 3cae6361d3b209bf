"""DQN as ELLM's (Du et al., ICML 2023): double, dueling, n-step returns, Huber loss.

Registered as the algorithm `dqn-ellm`. The project's own file rather than Stable-Baselines3's
DQN, which has neither double Q-learning, nor dueling heads, nor n-step returns, all three of
which ELLM's agent uses. It reads top to bottom like CleanRL's dqn.py.

It learns from a vector of N envs (`source`): a gymnasium `VectorEnv` with Dict observations
and NEXT_STEP autoreset (`llmrl.simulator.vector.WorldVectorEnv` over a world, in-process or
remote, possibly wrapped by an intrinsic-reward wrapper), or a registered env id (a world of
`num_envs` is made, at `address` when given). Every observation entry is an input: entries
named in `embed_keys` (crafter's `local_map` of semantic ids) go through a learned embedding
per cell, the others (inventory, achievements, goal embeddings) are flattened and scaled by
their bound. Actions are the env's own `Discrete` ones (for Crafter its 17 actions, not
ELLM's 7 verbs x 19 nouns).

Defaults are ELLM's: Adam 6.25e-5, batch 64, 3-step returns, a gradient step every 4 frames,
the target network copied every 8,000 frames, epsilon 1 -> 0.01. Frames are env steps summed
over the N envs. TensorBoard gets `charts/` (episodic return and length, epsilon, SPS) and
`losses/` (td_loss, q_values). A checkpoint version is saved every `checkpoint_every` frames
(network, target, optimizer, replay buffer, random states, and the wrapper's own state when it
has `state_dict`/`load_state_dict`); a run that finds versions in its line continues from the
latest (`resume`), with fresh episodes.

    dqn = registry.get_algorithm("dqn-ellm")
    checkpoint = dqn.train(vector_env, Versions(out / "dqn"), total_timesteps=100_000)
    policy = dqn.load(checkpoint)            # policy.act(observations) -> actions
"""

from __future__ import annotations

import json
import logging
import time
from collections import deque
from collections.abc import Callable
from pathlib import Path
from typing import Any

import numpy as np
from pydantic import Field

from llmrl.common.bounds import Batch, BufferSize, Coefficient, Frames, Hidden, LearningRate
from llmrl.common.numerics import adam_options
from llmrl.common.registry import registry
from llmrl.learner.algorithms.base import (
    Algorithm,
    AlgorithmSettings,
    Progress,
    check_env,
    resumable_version,
    tensorboard_writer,
    validate_settings,
)
from llmrl.learner.versions import Checkpoint, Versions, as_versions, find_checkpoint

log = logging.getLogger("llmrl.recipes.ellm.dqn")
DQN_ELLM = "dqn-ellm"
MODEL_FILE = "q_network.pt"
TRAINING_FILE = "training.pt"  # target network, optimizer, random states, wrapper state
BUFFER_FILE = "replay.npz"
STATE_FILE = "state.json"
SPACE_FILE = "observation_space.json"
StepHook = Callable[[int, dict[str, Any]], None]  # on_step(frames, infos) after each step


class DqnEllmConfig(AlgorithmSettings):
    """Every setting, with its description and bounds (a bad or unknown one is a ValueError
    naming it: `validate_settings`). Defaults: ELLM's."""

    total_timesteps: Frames = Field(
        100_000, gt=0, description="frames to train for (env steps, all envs)"
    )
    num_envs: int = Field(8, gt=0, description="envs stepped together (when `source` is an env id)")
    learning_rate: LearningRate = Field(
        6.25e-5, gt=0, description="Adam learning rate (ELLM: 6.25e-5)"
    )
    adam_eps: float = Field(1.5e-4, gt=0, description="Adam epsilon")
    buffer_size: BufferSize = Field(
        100_000, gt=0, description="replay buffer capacity in transitions"
    )
    batch_size: Batch = Field(64, gt=0, description="transitions per gradient step (ELLM: 64)")
    gamma: float = Field(0.99, ge=0, le=1, description="discount factor")
    n_step: int = Field(
        3, gt=0, description="steps summed in each return before bootstrapping (ELLM: 3)"
    )
    train_frequency: Frames = Field(4, gt=0, description="frames per gradient step (ELLM: 4)")
    target_network_frequency: Frames = Field(
        8000, gt=0, description="frames between target copies (ELLM: 8k)"
    )
    learning_starts: Frames = Field(5000, ge=0, description="frames of random play before learning")
    start_e: float = Field(1.0, ge=0, le=1, description="initial exploration epsilon")
    end_e: float = Field(0.01, ge=0, le=1, description="final exploration epsilon")
    exploration_fraction: float = Field(
        0.5,
        ge=0,
        le=1,
        description="fraction of total_timesteps over which epsilon decays linearly",
    )
    double: bool = Field(
        True, description="double Q-learning: the online net picks the next action"
    )
    dueling: bool = Field(True, description="dueling heads: value + advantage - mean advantage")
    max_grad_norm: Coefficient = Field(10.0, gt=0, description="gradient norm clip")
    hidden: Hidden = Field(256, gt=0, description="width of the two hidden layers")
    embedding_dim: Hidden = Field(8, gt=0, description="width of each embedded cell (embed_keys)")
    embed_keys: tuple[str, ...] = Field(
        ("local_map",),
        strict=False,  # a JSON list; its items stay strings
        description="integer observation entries embedded per cell (semantic ids)",
    )
    keys: tuple[str, ...] | None = Field(
        None,
        strict=False,
        description="observation entries of a world made from an env id (None: every numeric one)",
    )
    checkpoint_every: Frames = Field(50_000, gt=0, description="frames between checkpoint versions")
    save_buffer: bool = Field(
        True, description="keep the replay buffer in checkpoints (exact resume)"
    )
    resume: bool = Field(True, description="continue from the line's latest version, if any")
    seed: int = Field(0, ge=0, description="seed of the world, exploration and initialisation")
    address: str | None = Field(None, description="simulator address (None: an in-process world)")
    tensorboard_dir: str | None = Field(None, description="TensorBoard directory (None: none)")
    torch_threads: int | None = Field(
        None, gt=0, description="torch CPU threads (None: torch's default)"
    )


def setting_help() -> dict[str, str]:
    """Each setting's help text (`--help` of whoever exposes them)."""
    return {name: info.description or "" for name, info in DqnEllmConfig.model_fields.items()}


# -- observations: what the network reads -----------------------------------------------------
def describe_space(space: Any, embed_keys: tuple[str, ...]) -> dict[str, dict[str, Any]]:
    """Each entry of a Dict observation space as the network sees it (saved in checkpoints,
    so a loaded policy rebuilds the same network): shape, dtype, and either the number of ids
    (embedded entries) or the scale (1 / upper bound, 1 when unbounded)."""
    from gymnasium import spaces

    if not isinstance(space, spaces.Dict):
        raise ValueError(f"observations: expected a Dict space, got {type(space).__name__}")
    described = {}
    for key, sub in space.spaces.items():
        if isinstance(sub, spaces.Discrete):
            shape, dtype, high = (), "int64", float(sub.start + sub.n - 1)
        elif isinstance(sub, spaces.Box):
            shape, dtype = tuple(sub.shape), str(sub.dtype)
            finite = np.isfinite(sub.high)
            high = float(sub.high[finite].max()) if finite.any() else 0.0
        else:
            raise ValueError(
                f"observations: entry {key!r} is {type(sub).__name__}; DQN reads numeric "
                "entries only (drop text entries, e.g. with an intrinsic-reward wrapper)"
            )
        entry: dict[str, Any] = {"shape": list(shape), "dtype": dtype}
        if key in embed_keys:
            entry["ids"] = int(high) + 1
        else:
            entry["scale"] = 1.0 / high if high > 0 else 1.0
        described[key] = entry
    missing = [key for key in embed_keys if key not in described]
    if len(missing) == len(embed_keys) and embed_keys:
        log.info("dqn-ellm: no entry to embed among %s; all entries are flattened", embed_keys)
    return described


def q_network(described: dict[str, dict[str, Any]], num_actions: int, config: DqnEllmConfig):
    """The Q-network: per-entry encoders, two hidden layers, dueling or plain heads."""
    import torch
    from torch import nn

    class QNetwork(nn.Module):
        def __init__(self) -> None:
            super().__init__()
            self.keys = sorted(described)
            self.embeddings = nn.ModuleDict()
            width = 0
            for key in self.keys:
                entry = described[key]
                size = int(np.prod(entry["shape"], dtype=np.int64))
                if "ids" in entry:
                    self.embeddings[key] = nn.Embedding(entry["ids"], config.embedding_dim)
                    width += size * config.embedding_dim
                else:
                    width += size
            self.trunk = nn.Sequential(
                nn.Linear(width, config.hidden),
                nn.ReLU(),
                nn.Linear(config.hidden, config.hidden),
                nn.ReLU(),
            )
            self.advantage = nn.Linear(config.hidden, num_actions)
            self.value = nn.Linear(config.hidden, 1) if config.dueling else None

        def forward(self, observations: dict[str, Any]) -> Any:
            parts = []
            for key in self.keys:
                x = observations[key]
                if key in self.embeddings:
                    ids = x.long().clamp(0, self.embeddings[key].num_embeddings - 1)
                    parts.append(self.embeddings[key](ids).flatten(1))
                else:
                    parts.append(x.float().flatten(1) * described[key]["scale"])
            hidden = self.trunk(torch.cat(parts, dim=1))
            advantage = self.advantage(hidden)
            if self.value is None:
                return advantage
            return self.value(hidden) + advantage - advantage.mean(dim=1, keepdim=True)

    return QNetwork()


def as_tensors(observations: dict[str, np.ndarray], keys: list[str]) -> dict[str, Any]:
    import torch

    return {key: torch.as_tensor(np.asarray(observations[key])) for key in keys}


# -- the replay buffer of n-step transitions ---------------------------------------------------
class ReplayBuffer:
    """A ring buffer of (observation, action, n-step return, next observation, bootstrap),
    where `bootstrap` is gamma^k for a return over k steps, 0 after a termination. Float
    entries are kept as float16 (goal embeddings would otherwise dominate the memory)."""

    def __init__(self, described: dict[str, dict[str, Any]], capacity: int) -> None:
        self.capacity, self.position, self.full = capacity, 0, False
        self.observations: dict[str, np.ndarray] = {}
        self.next_observations: dict[str, np.ndarray] = {}
        for key, entry in described.items():
            dtype = np.float16 if entry["dtype"].startswith("float") else np.dtype(entry["dtype"])
            shape = (capacity, *entry["shape"])
            self.observations[key] = np.zeros(shape, dtype)
            self.next_observations[key] = np.zeros(shape, dtype)
        self.actions = np.zeros(capacity, np.int64)
        self.returns = np.zeros(capacity, np.float32)
        self.bootstraps = np.zeros(capacity, np.float32)

    def __len__(self) -> int:
        return self.capacity if self.full else self.position

    def add(
        self,
        observation: dict[str, np.ndarray],
        action: int,
        n_step_return: float,
        next_observation: dict[str, np.ndarray],
        bootstrap: float,
    ) -> None:
        i = self.position
        for key in self.observations:
            self.observations[key][i] = observation[key]
            self.next_observations[key][i] = next_observation[key]
        self.actions[i], self.returns[i], self.bootstraps[i] = action, n_step_return, bootstrap
        self.position = (i + 1) % self.capacity
        self.full = self.full or self.position == 0

    def sample(self, rng: np.random.Generator, batch_size: int) -> dict[str, Any]:
        index = rng.integers(0, len(self), size=batch_size)
        return {
            "observations": {k: v[index] for k, v in self.observations.items()},
            "next_observations": {k: v[index] for k, v in self.next_observations.items()},
            "actions": self.actions[index],
            "returns": self.returns[index],
            "bootstraps": self.bootstraps[index],
        }

    def save(self, path: Path) -> None:
        arrays = {f"obs.{k}": v for k, v in self.observations.items()}
        arrays.update({f"next.{k}": v for k, v in self.next_observations.items()})
        meta = np.array([self.position, int(self.full)], np.int64)
        np.savez(
            path,
            actions=self.actions,
            returns=self.returns,
            bootstraps=self.bootstraps,
            meta=meta,
            **arrays,
        )

    def load(self, path: Path) -> None:
        with np.load(path, allow_pickle=False) as data:
            for key in self.observations:
                self.observations[key][...] = data[f"obs.{key}"]
                self.next_observations[key][...] = data[f"next.{key}"]
            self.actions[...] = data["actions"]
            self.returns[...] = data["returns"]
            self.bootstraps[...] = data["bootstraps"]
            self.position, full = (int(x) for x in data["meta"])
            self.full = bool(full)


def row(observations: dict[str, np.ndarray], i: int) -> dict[str, np.ndarray]:
    return {key: np.array(value[i]) for key, value in observations.items()}


def flush_n_step(
    pending: deque,
    next_observation: dict[str, np.ndarray],
    gamma: float,
    terminated: bool,
    buffer: ReplayBuffer,
) -> None:
    """Every transition still pending at an episode's end, each with the return of the steps
    left; bootstrapped from the final observation after a time-limit cut, not after an end."""
    while pending:
        n_step_return = sum(gamma**k * r for k, (_, _, r) in enumerate(pending))
        bootstrap = 0.0 if terminated else gamma ** len(pending)
        observation, action, _ = pending.popleft()
        buffer.add(observation, action, n_step_return, next_observation, bootstrap)


def linear_schedule(start_e: float, end_e: float, duration: float, t: int) -> float:
    slope = (end_e - start_e) / max(duration, 1.0)
    return max(slope * t + start_e, end_e) if end_e <= start_e else min(slope * t + start_e, end_e)


# -- the loop ------------------------------------------------------------------------------------
def train_dqn_ellm(
    source: Any,
    line: Versions,
    config: DqnEllmConfig,
    version: str | int | None = None,
    on_progress: Progress | None = None,
    on_step: StepHook | None = None,
    init_from: Checkpoint | None = None,
) -> Checkpoint:
    """Train on `source` (a VectorEnv or an env id); `on_step(frames, infos)` after every
    world step (the wrapper's infos: finished episodes, LLM counters...); `init_from`: start
    a fresh line from another checkpoint's Q-network (fine-tuning a pretrained agent)."""
    import torch
    import torch.nn.functional as F

    # 1. the envs: a vector env, or a world made from an env id
    envs, owns_envs = _vector_env(source, config)
    try:
        N = envs.num_envs
        if getattr(envs.single_action_space, "n", None) is None:
            raise ValueError("dqn-ellm: the env's actions must be Discrete")
        num_actions = int(envs.single_action_space.n)
        described = describe_space(envs.single_observation_space, config.embed_keys)
        keys = sorted(described)

        # 2. where we start: a fresh network, or the line's latest version
        if config.torch_threads:
            torch.set_num_threads(config.torch_threads)
        torch.manual_seed(config.seed)
        q_net = q_network(described, num_actions, config)
        target_net = q_network(described, num_actions, config)
        optimizer = torch.optim.Adam(
            q_net.parameters(), lr=config.learning_rate, eps=config.adam_eps, **adam_options()
        )
        buffer = ReplayBuffer(described, config.buffer_size)
        rng = np.random.default_rng(config.seed)
        previous = resumable_version(line, DQN_ELLM, TRAINING_FILE) if config.resume else None
        state: dict[str, Any] = {"global_step": 0, "gradient_steps": 0, "target_updates": 0}
        if previous is not None:
            state = _restore(previous, q_net, target_net, optimizer, buffer, rng, envs)
            if state["global_step"] >= config.total_timesteps:
                log.info(
                    "dqn-ellm: %s already reached %d frames", previous.path, state["global_step"]
                )
                return previous
        elif init_from is not None:
            q_net.load_state_dict(torch.load(init_from.path / MODEL_FILE, weights_only=True))
        if previous is None:
            target_net.load_state_dict(q_net.state_dict())
        global_step = int(state["global_step"])
        writer = tensorboard_writer(config.tensorboard_dir)

        # 3. play: epsilon-greedy over N envs, n-step transitions into the buffer
        obs, _ = envs.reset(seed=config.seed + global_step)
        pending: list[deque] = [deque() for _ in range(N)]
        resetting = np.zeros(N, dtype=bool)  # NEXT_STEP: the step after an end only resets
        episode_return, episode_length = np.zeros(N), np.zeros(N, dtype=np.int64)
        owed_updates = 0.0
        last_target = global_step - global_step % config.target_network_frequency
        last_save = global_step
        started, steps_at_start = time.perf_counter(), global_step
        exploration_frames = config.exploration_fraction * config.total_timesteps
        td_losses: list[float] = []
        q_values: list[float] = []
        checkpoint = previous
        while global_step < config.total_timesteps:
            epsilon = linear_schedule(config.start_e, config.end_e, exploration_frames, global_step)
            with torch.no_grad():
                greedy = q_net(as_tensors(obs, keys)).argmax(dim=1).numpy()
            explore = rng.random(N) < epsilon
            actions = np.where(explore, rng.integers(0, num_actions, size=N), greedy)
            next_obs, rewards, terminated, truncated, infos = envs.step(actions)
            for i in range(N):
                if resetting[i]:
                    continue  # its action was ignored: no transition
                pending[i].append((row(obs, i), int(actions[i]), float(rewards[i])))
                episode_return[i] += float(rewards[i])
                episode_length[i] += 1
                if terminated[i] or truncated[i]:
                    next_row = row(next_obs, i)
                    flush_n_step(pending[i], next_row, config.gamma, bool(terminated[i]), buffer)
                    if writer is not None:
                        writer.add_scalar("charts/episodic_return", episode_return[i], global_step)
                        writer.add_scalar("charts/episodic_length", episode_length[i], global_step)
                    episode_return[i], episode_length[i] = 0.0, 0
                elif len(pending[i]) == config.n_step:
                    n_step_return = sum(
                        config.gamma**k * r for k, (_, _, r) in enumerate(pending[i])
                    )
                    observation, action, _ = pending[i].popleft()
                    bootstrap = config.gamma**config.n_step
                    buffer.add(observation, action, n_step_return, row(next_obs, i), bootstrap)
            resetting = terminated | truncated
            obs = next_obs
            global_step += N
            if on_step is not None:
                on_step(global_step, infos)
            if on_progress is not None:
                on_progress(N)

            # 4. learn: a gradient step every `train_frequency` frames
            if global_step > config.learning_starts and len(buffer) >= config.batch_size:
                owed_updates += N / config.train_frequency
                while owed_updates >= 1:
                    owed_updates -= 1
                    batch = buffer.sample(rng, config.batch_size)
                    next_obs_t = as_tensors(batch["next_observations"], keys)
                    with torch.no_grad():
                        target_q = target_net(next_obs_t)
                        if config.double:
                            chosen = q_net(next_obs_t).argmax(dim=1, keepdim=True)
                        else:
                            chosen = target_q.argmax(dim=1, keepdim=True)
                        next_value = target_q.gather(1, chosen).squeeze(1)
                        returns = torch.as_tensor(batch["returns"])
                        bootstraps = torch.as_tensor(batch["bootstraps"])
                        td_target = returns + bootstraps * next_value
                    taken = torch.as_tensor(batch["actions"]).unsqueeze(1)
                    q = q_net(as_tensors(batch["observations"], keys)).gather(1, taken).squeeze(1)
                    loss = F.smooth_l1_loss(q, td_target)  # Huber
                    optimizer.zero_grad(set_to_none=True)
                    loss.backward()
                    torch.nn.utils.clip_grad_norm_(q_net.parameters(), config.max_grad_norm)
                    optimizer.step()
                    state["gradient_steps"] += 1
                    td_losses.append(float(loss.detach()))
                    q_values.append(float(q.detach().mean()))

            # 5. the target network: a copy every `target_network_frequency` frames
            if global_step - last_target >= config.target_network_frequency:
                target_net.load_state_dict(q_net.state_dict())
                last_target = global_step - global_step % config.target_network_frequency
                state["target_updates"] += 1

            # 6. charts and losses, about every 1,000 frames
            if writer is not None and (global_step // N) % max(1, 1000 // N) == 0:
                elapsed = max(time.perf_counter() - started, 1e-9)
                writer.add_scalar(
                    "charts/SPS", (global_step - steps_at_start) / elapsed, global_step
                )
                writer.add_scalar("charts/epsilon", epsilon, global_step)
                if td_losses:
                    writer.add_scalar("losses/td_loss", float(np.mean(td_losses)), global_step)
                    writer.add_scalar("losses/q_values", float(np.mean(q_values)), global_step)
                    td_losses.clear()
                    q_values.clear()

            # 7. a checkpoint version every `checkpoint_every` frames, and at the end
            last = global_step >= config.total_timesteps
            if last or global_step - last_save >= config.checkpoint_every:
                last_save = global_step
                state["global_step"] = global_step
                state["epsilon"] = epsilon
                target = version if last and version is not None else None
                checkpoint = _save(
                    line,
                    q_net,
                    target_net,
                    optimizer,
                    buffer,
                    rng,
                    envs,
                    described,
                    config,
                    state,
                    target,
                )
    finally:
        if owns_envs:
            envs.close()
    if writer is not None:
        writer.close()
    assert checkpoint is not None
    return checkpoint


def _vector_env(source: Any, config: DqnEllmConfig) -> tuple[Any, bool]:
    if not isinstance(source, str):
        return source, False
    from llmrl.simulator.client import make_world
    from llmrl.simulator.vector import WorldVectorEnv

    check_env(source)
    world = make_world(source, config.num_envs, config.seed, config.address)
    return WorldVectorEnv(world, keys=config.keys), True


def _save(
    line: Versions,
    q_net: Any,
    target_net: Any,
    optimizer: Any,
    buffer: ReplayBuffer,
    rng: np.random.Generator,
    envs: Any,
    described: dict[str, Any],
    config: DqnEllmConfig,
    state: dict[str, Any],
    version: str | int | None,
) -> Checkpoint:
    import torch

    def write(directory: Path) -> None:
        torch.save(q_net.state_dict(), directory / MODEL_FILE)
        training = {
            "target": target_net.state_dict(),
            "optimizer": optimizer.state_dict(),
            "torch_rng": torch.get_rng_state(),
        }
        if hasattr(envs, "state_dict"):  # an intrinsic reward's own networks and memory
            training["env"] = envs.state_dict()
        torch.save(training, directory / TRAINING_FILE)
        if config.save_buffer:
            buffer.save(directory / BUFFER_FILE)
        (directory / SPACE_FILE).write_text(json.dumps(described, indent=2) + "\n")
        saved = {**state, "rng": rng.bit_generator.state}
        (directory / STATE_FILE).write_text(json.dumps(saved, indent=2) + "\n")

    result = {k: v for k, v in state.items() if isinstance(v, int | float)}
    config_dict = config.model_dump()
    config_dict["num_actions"] = int(envs.single_action_space.n)
    return line.save(write, DQN_ELLM, version, config=config_dict, result=result)


def _restore(
    checkpoint: Checkpoint,
    q_net: Any,
    target_net: Any,
    optimizer: Any,
    buffer: ReplayBuffer,
    rng: np.random.Generator,
    envs: Any,
) -> dict[str, Any]:
    import torch

    q_net.load_state_dict(torch.load(checkpoint.path / MODEL_FILE, weights_only=True))
    training = torch.load(checkpoint.path / TRAINING_FILE, weights_only=True)
    target_net.load_state_dict(training["target"])
    optimizer.load_state_dict(training["optimizer"])
    torch.set_rng_state(training["torch_rng"])
    if "env" in training and hasattr(envs, "load_state_dict"):
        envs.load_state_dict(training["env"])
    if (checkpoint.path / BUFFER_FILE).is_file():
        buffer.load(checkpoint.path / BUFFER_FILE)
    state = json.loads((checkpoint.path / STATE_FILE).read_text())
    rng.bit_generator.state = state.pop("rng")
    log.info("dqn-ellm: resuming %s at %d frames", checkpoint.path, state["global_step"])
    return state


# -- a trained policy ------------------------------------------------------------------------------
class DqnPolicy:
    """A loaded Q-network: `act(observations, epsilon, rng)` for a batch of Dict observations
    (arrays with a leading env dimension; extra entries are ignored)."""

    def __init__(self, q_net: Any, described: dict[str, Any], num_actions: int) -> None:
        self.q_net, self.described, self.num_actions = q_net, described, num_actions
        self.keys = sorted(described)

    def q_values(self, observations: dict[str, Any]) -> np.ndarray:
        import torch

        with torch.no_grad():
            return self.q_net(as_tensors(observations, self.keys)).numpy()

    def act(
        self,
        observations: dict[str, Any],
        epsilon: float = 0.0,
        rng: np.random.Generator | None = None,
    ) -> np.ndarray:
        greedy = self.q_values(observations).argmax(axis=1)
        if epsilon <= 0:
            return greedy
        rng = rng or np.random.default_rng()
        random = rng.integers(0, self.num_actions, size=len(greedy))
        return np.where(rng.random(len(greedy)) < epsilon, random, greedy)


# -- the registered algorithm --------------------------------------------------------------------
class DqnEllm(Algorithm):
    """ELLM's DQN. Settings: `DqnEllmConfig`'s fields (`setting_help()`). `source`: a gymnasium
    VectorEnv (NEXT_STEP autoreset, Dict observations) or an env id. Extra keywords of
    `train`: `on_step(frames, infos)` and `init_from` (a checkpoint whose Q-network starts a
    fresh line: fine-tuning)."""

    name = DQN_ELLM
    family = "dqn-ellm"
    learns_from = "env"
    settings_model = DqnEllmConfig

    def train(
        self,
        source: Any,
        checkpoints: Versions | str | Path,
        *,
        version: str | int | None = None,
        on_progress: Progress | None = None,
        on_step: StepHook | None = None,
        init_from: Checkpoint | str | Path | None = None,
        **settings: Any,
    ) -> Checkpoint:
        config = validate_settings(self.name, DqnEllmConfig, settings)
        start = None
        if init_from is not None:
            start = find_checkpoint(init_from)
            self.check_written_by_me(start)
        return train_dqn_ellm(
            source, as_versions(checkpoints), config, version, on_progress, on_step, start
        )

    def load(self, checkpoint: Checkpoint | str | Path) -> DqnPolicy:
        import torch

        found = find_checkpoint(checkpoint)
        self.check_written_by_me(found)
        described = json.loads((found.path / SPACE_FILE).read_text())
        known = DqnEllmConfig.model_fields
        config = DqnEllmConfig(**{k: v for k, v in found.config.items() if k in known})
        num_actions = int(found.config["num_actions"])
        q_net = q_network(described, num_actions, config)
        q_net.load_state_dict(torch.load(found.path / MODEL_FILE, weights_only=True))
        q_net.eval()
        return DqnPolicy(q_net, described, num_actions)


registry.register_algorithm(
    DQN_ELLM,
    "ELLM's DQN: double, dueling, n-step returns, Huber loss, on a vector of envs",
    family="dqn-ellm",
    learns_from="env",
)(DqnEllm())
