"""LLM-PPO: PPO on an LLM policy over text actions (GLAM, Carta et al., ICML 2023).

Registered as the algorithm `llm-ppo`: it learns from an env (`source`: a registered env id
with `text`/`mission` observations and text skills, e.g. `BabyAIText-GoToLocal`, stepped as
`num_envs` envs of one world, in-process or at `address`; or a world already made), and
saves checkpoint versions holding a LoRA adapter (the gateway serves a line made by
`adapter_versions(model, adapter)` as `<model>:<adapter>@<version>`) or, with `lora=False`,
the whole model, plus the value head (`heads.pt`), the optimizer (`optimizer.pt`) and where
training stood (`state.json`).

It reads top to bottom like CleanRL's ppo.py. At each step every env's GLAM prompt
(`llmrl.recipes.glam.prompt`) is scored against the action phrases in one batched,
KV-shared forward (`llmrl.learner.llm.scorer`); the policy is the softmax of the scores, the
value GLAM's MLP head on the last prompt token's hidden state. After `num_steps` steps:
GAE, then `update_epochs` epochs of minibatches with the clipped policy loss, the clipped
value loss and the entropy bonus, gradients clipped. With LoRA on the top `lora_layers`
only (`cache_frozen`), the rollout keeps each sample's hidden states entering the first
trained layer and the epochs run only the layers above (the same gradients, a fraction of
the forward). TensorBoard gets CleanRL's `charts/` (plus the rollout/update seconds) and
`losses/` scalars. Every `checkpoint_every` updates a version is saved; a run that finds
versions in its line continues from the latest one (`resume`), with fresh episodes.

    llm_ppo = registry.get_algorithm("llm-ppo")
    checkpoint = llm_ppo.train("BabyAIText-GoToLocalS5N2",
                               adapter_versions("smollm2", "glam"), base_model="smollm2")
"""

from __future__ import annotations

import json
import logging
import time
from collections.abc import Callable
from pathlib import Path
from typing import Annotated, Any, Literal

import numpy as np
from pydantic import Field, field_validator

from llmrl.common.bounds import (
    Coefficient,
    Epochs,
    Frames,
    Hidden,
    LearningRate,
    LlmBatch,
    LoraRank,
    RolloutSteps,
    Updates,
    limit,
)
from llmrl.common.devices import Device, device_field
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
from llmrl.learner.llm.scorer import Reduction
from llmrl.learner.versions import Checkpoint, Versions, as_versions, find_checkpoint
from llmrl.recipes.glam.prompt import PromptHistory, action_phrases

log = logging.getLogger("llmrl.learner.llm_ppo")
LLM_PPO = "llm-ppo"
OPTIMIZER_FILE = "optimizer.pt"
STATE_FILE = "state.json"
GRAD_NORMS = ("grad_norm", "policy_grad_norm", "value_grad_norm")  # logged per update


Init = Literal["pretrained", "random"]


class LlmPpoSettings(AlgorithmSettings):
    """LLM-PPO's hyperparameters: the one declaration of each, with its description and
    bounds. A GLAM config (`ppo: {...}`, `ppo.<key>=...`), its training job and the algorithm
    all carry this object whole. Defaults: GLAM's code's where they fit a CPU (Adam eps 1e-5,
    gamma 0.99, lambda 0.99, clip 0.2 with a clipped value loss, entropy 0.01, value 0.5, grad
    norm 0.5, 4 epochs, minibatch 64, 40 steps, reward x 20), with 16 envs (the paper's 32
    halved for a 2-core CPU) and LoRA on the top 2 layers (every GLAM figure's setting)."""

    num_envs: int = Field(16, gt=0, le=256, description="envs stepped together in one world")
    num_steps: RolloutSteps = Field(40, gt=0, description="steps per env per rollout")
    learning_rate: LearningRate = Field(
        1e-4,
        gt=0,
        description="Adam learning rate (the paper: 1e-6 for full fine-tuning of 780M; LoRA "
        "wants more)",
    )
    anneal_lr: bool = Field(False, description="anneal the learning rate linearly to 0")
    adam_eps: float = Field(1e-5, gt=0, le=1, description="Adam epsilon")
    gamma: float = Field(0.99, gt=0, le=1, description="discount factor")
    gae_lambda: float = Field(0.99, ge=0, le=1, description="GAE lambda")
    update_epochs: Epochs = Field(4, gt=0, description="epochs over each rollout")
    minibatch_size: LlmBatch = Field(64, gt=0, description="samples per gradient step")
    microbatch_size: Annotated[int | None, limit("llm_batch")] = Field(
        None,
        gt=0,
        description="samples per forward/backward within a minibatch, gradients accumulated "
        "(None: the whole minibatch at once; NPAE and full fine-tuning: 8); full fine-tuning "
        "keeps every layer's activations for the backward, so a 64-sample minibatch of a 135M "
        "model needs tens of GB: 8 fits in a few",
    )
    norm_adv: bool = Field(True, description="normalise advantages per minibatch")
    clip_coef: Coefficient = Field(0.2, gt=0, description="policy ratio clip")
    clip_vloss: bool = Field(True, description="clip the value loss as the policy's")
    ent_coef: Coefficient = Field(0.01, ge=0, description="entropy bonus coefficient")
    vf_coef: Coefficient = Field(0.5, ge=0, description="value loss coefficient")
    max_grad_norm: Coefficient = Field(0.5, gt=0, description="gradient norm clip")
    target_kl: Annotated[float | None, limit("coefficient")] = Field(
        None, gt=0, description="stop the update's epochs past this approx KL"
    )
    grad_diagnostics: bool = Field(
        False,
        description="also log the gradient norms of the policy and the value losses on the "
        "shared weights (LoRA or LLM) separately (losses/policy_grad_norm, "
        "losses/value_grad_norm): one more backward per microbatch",
    )
    reward_scale: Coefficient = Field(
        20.0, gt=0, description="reward multiplier (the paper: 20 x BabyAI's)"
    )
    reduction: Reduction = Field(
        "sum", description="candidate score: sum or mean of its token log-probs"
    )
    lora_r: LoraRank = Field(
        16,
        gt=0,
        description="LoRA rank (alpha = 2 x rank unless lora_alpha is set, so the update's "
        "scale stays the same across ranks)",
    )
    lora_alpha: Annotated[int | None, limit("coefficient")] = Field(
        None, gt=0, description="LoRA alpha (None: 2 x rank)"
    )
    lora_layers: Annotated[int | None, limit("layers")] = Field(
        2,
        gt=0,
        description="adapt only the top N decoder layers; the frozen layers below run once per "
        "sample, in the rollout. None: all layers, whose activations a whole minibatch keeps "
        "for the backward (~16 GB for 32 samples of SmolLM2-135M): set microbatch_size with it",
    )
    cache_frozen: bool = Field(
        True,
        description="with lora_layers: keep the frozen lower layers' hidden states from the "
        "rollout and run only the top layers in the PPO epochs (~0.4 MB a sample for SmolLM2)",
    )
    value_hidden: Hidden = Field(
        1024, gt=0, description="width of the value head's two hidden layers"
    )
    device: Device = device_field("trains")

    @property
    def batch_size(self) -> int:
        return self.num_envs * self.num_steps


class LlmPpoTraining(AlgorithmSettings):
    """What one LLM-PPO training is, beside the model and the world it runs on: its budget,
    its hyperparameters (`ppo`), what it trains, its checkpoints, seed and logs. GLAM's
    training job carries these keys as they are declared here."""

    total_timesteps: Frames = Field(
        5120, gt=0, description="env steps to train for (all envs together)"
    )
    ppo: LlmPpoSettings = Field(
        default_factory=LlmPpoSettings, description="LLM-PPO's hyperparameters"
    )
    lora: bool = Field(True, description="train a LoRA (False: fine-tune every weight)")
    init: Init = Field(
        "pretrained",
        description="the LLM's weights: pretrained, or random (NPAE: the architecture only)",
    )
    checkpoint_every: Updates = Field(1, gt=0, description="save a version every this many updates")
    seed: int = Field(0, ge=0, description="seed of the world, the sampling and the initialisation")
    tensorboard_dir: str | None = Field(None, description="TensorBoard directory (None: none)")

    def training(self) -> dict[str, Any]:
        """These keys' values (of a job, or of any model that extends this one)."""
        return {name: getattr(self, name) for name in LlmPpoTraining.model_fields}


class LlmPpoConfig(LlmPpoTraining):
    """Every setting of `llm-ppo` (a bad or unknown one is a ValueError naming it:
    `validate_settings`): the training's (`LlmPpoTraining`), and the model, world and
    process it runs with."""

    base_model: str = Field(description="local HF model directory or gateway model name")
    action_set: str = Field("babyai", description="the action phrases (llmrl.recipes.glam.prompt)")
    bf16: bool | None = Field(
        None,
        description="bf16 autocast (None: the process's precision, $LLMRL_PRECISION: "
        "float32 unless set)",
    )
    resume: bool = Field(True, description="continue from the line's latest version, if any")
    address: str | None = Field(None, description="simulator address (None: an in-process world)")
    torch_threads: int | None = Field(
        None, gt=0, description="torch CPU threads (None: torch's default)"
    )

    @field_validator("action_set")
    @classmethod
    def _known_action_set(cls, value: str) -> str:
        action_phrases(value)  # a ValueError names the key and the known sets
        return value

    @property
    def num_updates(self) -> int:
        return max(1, self.total_timesteps // self.ppo.batch_size)


# -- the loop ------------------------------------------------------------------------------
def train_llm_ppo(
    source: Any,
    line: Versions,
    config: LlmPpoConfig,
    version: str | int | None = None,
    on_progress: Progress | None = None,
) -> Checkpoint:
    import torch
    from stable_baselines3.common.utils import explained_variance

    from llmrl.learner.llm.model import LlmPolicyModel
    from llmrl.learner.llm.scorer import score_candidates, score_from_frozen
    from llmrl.simulator.client import make_world
    from llmrl.simulator.world import episode_ends

    # 1. where we start: a fresh model, or the line's latest version
    if config.torch_threads:
        torch.set_num_threads(config.torch_threads)
    torch.manual_seed(config.seed)
    previous = resumable_version(line, LLM_PPO, STATE_FILE) if config.resume else None
    start_update = int(previous.result.get("update", 0)) if previous else 0
    global_step = int(previous.result.get("global_step", 0)) if previous else 0
    if previous is not None and start_update >= config.num_updates:
        log.info("llm-ppo: %s already reached update %d", previous.path, start_update)
        return previous
    policy = LlmPolicyModel.load(
        config.base_model,
        lora=config.lora,
        lora_r=config.ppo.lora_r,
        lora_alpha=config.ppo.lora_alpha,
        lora_layers=config.ppo.lora_layers,
        value_hidden=config.ppo.value_hidden,
        bf16=config.bf16,
        init_from=previous.path if previous else None,
        random_init=config.init == "random",
        device=config.ppo.device,
    )
    policy.train()
    # `on_progress(0)`: no step done, but a cancel lands here (before the first update too);
    # loading a model and an update of big minibatches take minutes on a CPU
    cancel_point = on_progress or (lambda _n: None)
    cancel_point(0)
    params = policy.parameters()
    optimizer = torch.optim.Adam(
        params, lr=config.ppo.learning_rate, eps=config.ppo.adam_eps, **adam_options()
    )
    if previous is not None:
        saved = torch.load(previous.path / OPTIMIZER_FILE, map_location="cpu", weights_only=True)
        optimizer.load_state_dict(saved)  # its state moves to the parameters' device
    phrases = action_phrases(config.action_set)
    candidates = [policy.encode(" " + phrase) for phrase in phrases]
    value_head = policy.heads["value"]
    # LoRA on the top layers only: the rollout keeps what enters them, the epochs start there
    cached = config.ppo.cache_frozen and config.lora and policy.frozen_layers > 0
    generator = torch.Generator().manual_seed(config.seed + start_update)
    writer = tensorboard_writer(config.tensorboard_dir)

    # 2. the world: N envs, each with its prompt history
    if isinstance(source, str):
        check_env(source)
        world = make_world(source, config.ppo.num_envs, config.seed, config.address)
        owns_world = True
    else:
        world, owns_world = source, False
        if world.num_envs != config.ppo.num_envs:
            raise ValueError(f"num_envs: {config.ppo.num_envs}, but the world has {world.num_envs}")
    wanted = ["text", "mission", "reward", "discount", "step_type"]
    N, T = config.ppo.num_envs, config.ppo.num_steps
    histories = [PromptHistory(phrases) for _ in range(N)]
    first = world.reset(seed=config.seed + start_update * N, observations=wanted)
    for i, history in enumerate(histories):
        history.start(str(first["mission"][i]), str(first["text"][i]))
    next_done = torch.zeros(N)
    episode_return, episode_length = np.zeros(N), np.zeros(N, dtype=int)
    finished: list[tuple[float, int, bool]] = []  # (return, length, success) this update

    def act(prompts: list[list[int]], keep_frozen: bool = False) -> tuple[Any, Any, Any]:
        """(action scores [B, K], values [B], frozen states or None) of prompts, with
        gradients when enabled; on the model's device, in fp32."""
        scored = score_candidates(policy, prompts, candidates, config.ppo.reduction, keep_frozen)
        value = value_head(scored.hidden).squeeze(-1)
        return scored.scores.float(), value.float(), scored.frozen

    def act_again(samples: list[Any]) -> tuple[Any, Any]:
        """(scores, values) of rollout samples (prompts, or their frozen states), with
        gradients: the update's forward."""
        if cached:
            scored = score_from_frozen(policy, samples, candidates, config.ppo.reduction)
            return scored.scores.float(), value_head(scored.hidden).squeeze(-1).float()
        return act(samples)[:2]

    # per step, per env: what the update scores again (token ids, or frozen hidden states)
    samples: list[list[Any]] = [[] for _ in range(T)]
    actions = torch.zeros((T, N), dtype=torch.long)
    logprobs, rewards = torch.zeros((T, N)), torch.zeros((T, N))
    dones, values = torch.zeros((T, N)), torch.zeros((T, N))
    started = time.perf_counter()
    steps_at_start = global_step
    rollout_seconds = update_seconds = 0.0  # wall clock, and this process's CPU time:
    rollout_cpu = update_cpu = 0.0  # (less sensitive to other processes' load)
    checkpoint = previous
    try:
        for update in range(start_update + 1, config.num_updates + 1):
            if config.ppo.anneal_lr:
                fraction = 1.0 - (update - 1.0) / config.num_updates
                optimizer.param_groups[0]["lr"] = fraction * config.ppo.learning_rate
            finished.clear()
            rollout_started, rollout_cpu_started = time.perf_counter(), time.process_time()

            # 3. rollout: T steps of N envs, one batched scoring per step
            for step in range(T):
                cancel_point(0)
                global_step += N
                prompts = [policy.encode(history.prompt()) for history in histories]
                dones[step] = next_done
                with torch.no_grad():
                    scores, value, frozen = act(prompts, keep_frozen=cached)
                    scores, value = scores.cpu(), value.cpu()  # the rollout's buffers: CPU
                    samples[step] = frozen if cached else prompts
                    distribution = torch.distributions.Categorical(logits=scores)
                    action = torch.multinomial(distribution.probs, 1, generator=generator)[:, 0]
                actions[step], values[step] = action, value
                logprobs[step] = distribution.log_prob(action)
                taken = [phrases[int(a)] for a in action]
                result = world.step(skill=taken, observations=wanted)
                terminated, truncated = episode_ends(result)
                reward = result["reward"].astype(np.float64)
                rewards[step] = torch.as_tensor(
                    reward * config.ppo.reward_scale, dtype=torch.float32
                )
                episode_return += reward
                episode_length += 1
                ended = terminated | truncated
                for i in range(N):
                    histories[i].advance(taken[i], str(result["text"][i]))
                if ended.any():  # start the finished envs' next episodes; the others wait
                    restarted = world.step(observations=wanted, active=ended)
                    for i in np.flatnonzero(ended):
                        success = bool(terminated[i]) and episode_return[i] > 0
                        finished.append((float(episode_return[i]), int(episode_length[i]), success))
                        histories[i].start(str(restarted["mission"][i]), str(restarted["text"][i]))
                        episode_return[i], episode_length[i] = 0.0, 0
                # as CleanRL: a time-limit cut is treated as an end (no bootstrap)
                next_done = torch.as_tensor(ended, dtype=torch.float32)

            # 4. GAE
            with torch.no_grad():
                next_prompts = [policy.encode(history.prompt()) for history in histories]
                _, next_value, _ = act(next_prompts)
            advantages, returns = gae(
                rewards, values, dones, next_value.cpu(), next_done, config.ppo
            )
            rollout_seconds += time.perf_counter() - rollout_started
            rollout_cpu += time.process_time() - rollout_cpu_started
            update_started, update_cpu_started = time.perf_counter(), time.process_time()

            # 5. PPO: epochs of minibatches over the flattened rollout
            b_samples = [sample for row in samples for sample in row]
            b_actions, b_logprobs = actions.reshape(-1), logprobs.reshape(-1)
            b_advantages, b_returns = advantages.reshape(-1), returns.reshape(-1)
            b_values = values.reshape(-1)
            order = np.random.default_rng(config.seed + update).permutation
            clipfracs: list[float] = []
            grad_norms: dict[str, list[float]] = {}  # per minibatch, before clipping
            stats: dict[str, float] = {}
            for _epoch in range(config.ppo.update_epochs):
                indices = order(config.ppo.batch_size)
                for start in range(0, config.ppo.batch_size, config.ppo.minibatch_size):
                    cancel_point(0)
                    mb = torch.as_tensor(indices[start : start + config.ppo.minibatch_size])
                    stats = ppo_minibatch_step(
                        act_again,
                        [b_samples[i] for i in mb],
                        b_actions[mb],
                        b_logprobs[mb],
                        b_advantages[mb],
                        b_returns[mb],
                        b_values[mb],
                        config.ppo,
                        optimizer,
                        params,
                    )
                    clipfracs.append(stats["clipfrac"])
                    for name in GRAD_NORMS:
                        if name in stats:
                            grad_norms.setdefault(name, []).append(stats[name])
                if config.ppo.target_kl is not None and stats["approx_kl"] > config.ppo.target_kl:
                    break

            update_seconds += time.perf_counter() - update_started
            update_cpu += time.process_time() - update_cpu_started

            # 6. charts and losses
            sps = (global_step - steps_at_start) / max(time.perf_counter() - started, 1e-9)
            success_rate = float(np.mean([s for *_, s in finished])) if finished else None
            if writer is not None:
                writer.add_scalar(
                    "charts/learning_rate", optimizer.param_groups[0]["lr"], global_step
                )
                for name in ("policy_loss", "value_loss", "entropy", "approx_kl", "old_approx_kl"):
                    writer.add_scalar(f"losses/{name}", stats[name], global_step)
                writer.add_scalar("losses/clipfrac", float(np.mean(clipfracs)), global_step)
                # how much of the returns' spread the rollout's values account for
                writer.add_scalar(
                    "losses/explained_variance",
                    explained_variance(b_values.numpy(), b_returns.numpy()),
                    global_step,
                )
                for name, norms in grad_norms.items():  # the update's mean over minibatches
                    writer.add_scalar(f"losses/{name}", float(np.mean(norms)), global_step)
                writer.add_scalar("charts/SPS", sps, global_step)
                writer.add_scalar("charts/rollout_seconds", rollout_seconds, global_step)
                writer.add_scalar("charts/update_seconds", update_seconds, global_step)
                for episodic_return, length, success in finished:
                    writer.add_scalar("charts/episodic_return", episodic_return, global_step)
                    writer.add_scalar("charts/episodic_length", length, global_step)
                    writer.add_scalar("charts/success", float(success), global_step)
            log.info(
                "llm-ppo update %d/%d step %d: success %s, SPS %.2f, loss %.4f",
                update,
                config.num_updates,
                global_step,
                success_rate,
                sps,
                stats["loss"],
            )
            if on_progress is not None:
                on_progress(config.ppo.batch_size)

            # 7. a checkpoint version every `checkpoint_every` updates, and at the end
            last = update == config.num_updates
            if update % config.checkpoint_every == 0 or last:
                result = {
                    "update": update,
                    "global_step": global_step,
                    "episodes": len(finished),
                    "success_rate": success_rate,
                    "mean_return": float(np.mean([r for r, *_ in finished])) if finished else None,
                    "resumed_from": start_update,
                    "sps": sps,  # this run's (since it started or resumed)
                    "rollout_seconds": rollout_seconds,
                    "update_seconds": update_seconds,
                    "rollout_cpu_seconds": rollout_cpu,
                    "update_cpu_seconds": update_cpu,
                    **{f"last_{k}": v for k, v in stats.items()},
                }
                target = version if last and version is not None else None
                checkpoint = _save(line, policy, optimizer, config, result, target)
    finally:
        if writer is not None:
            writer.close()
        if owns_world:
            world.close()
    assert checkpoint is not None
    return checkpoint


def gae(
    rewards: Any, values: Any, dones: Any, next_value: Any, next_done: Any, ppo: LlmPpoSettings
) -> tuple[Any, Any]:
    """(advantages, returns) [T, N] by generalised advantage estimation; `dones[t]`: the
    env's episode started at step t (the previous one ended)."""
    import torch

    steps = rewards.shape[0]
    advantages = torch.zeros_like(rewards)
    last_gae = torch.zeros_like(next_value)
    for t in reversed(range(steps)):
        if t == steps - 1:
            not_done, following = 1.0 - next_done, next_value
        else:
            not_done, following = 1.0 - dones[t + 1], values[t + 1]
        delta = rewards[t] + ppo.gamma * following * not_done - values[t]
        last_gae = delta + ppo.gamma * ppo.gae_lambda * not_done * last_gae
        advantages[t] = last_gae
    return advantages, advantages + values


def ppo_minibatch_step(
    score: Callable[[list[Any]], tuple[Any, Any]],
    samples: list[Any],
    actions: Any,
    old_logprobs: Any,
    advantages: Any,
    returns: Any,
    old_values: Any,
    ppo: LlmPpoSettings,
    optimizer: Any,
    params: list[Any],
) -> dict[str, float]:
    """One gradient step of PPO's clipped objective on a minibatch; its statistics (with the
    gradient's norm before clipping, and with `ppo.grad_diagnostics` the policy and value
    terms' norms on the weights both reach). `score(samples)` gives the samples' (scores,
    values) with gradients; it runs on chunks of `ppo.microbatch_size` samples whose
    gradients add up to the minibatch's."""
    import torch

    if ppo.norm_adv and len(advantages) > 1:  # over the whole minibatch, as unchunked
        advantages = (advantages - advantages.mean()) / (advantages.std() + 1e-8)
    size = len(samples)
    chunk = ppo.microbatch_size or size
    optimizer.zero_grad(set_to_none=True)
    stats: dict[str, float] = {}
    # with diagnostics: each term's gradient summed over the chunks, per parameter
    term_grads: dict[str, list[Any]] = {}
    for start in range(0, size, chunk):
        part = slice(start, start + chunk)
        loss, part_stats, terms = ppo_loss(
            score(samples[part]),
            actions[part],
            old_logprobs[part],
            advantages[part],
            returns[part],
            old_values[part],
            ppo,
        )
        weight = len(samples[part]) / size  # every statistic is a mean over samples
        if ppo.grad_diagnostics:
            for i, (name, term) in enumerate(terms.items()):
                grads = torch.autograd.grad(
                    term * weight, params, retain_graph=i < len(terms) - 1, allow_unused=True
                )
                summed = term_grads.setdefault(name, [None] * len(params))
                for j, grad in enumerate(grads):
                    if grad is not None:
                        summed[j] = grad if summed[j] is None else summed[j] + grad
        else:
            (loss * weight).backward()
        for name, value in part_stats.items():
            stats[name] = stats.get(name, 0.0) + value * weight
    if term_grads:
        stats.update(_apply_term_grads(params, term_grads))
    stats["grad_norm"] = float(torch.nn.utils.clip_grad_norm_(params, ppo.max_grad_norm))
    optimizer.step()
    return stats


def _apply_term_grads(params: list[Any], term_grads: dict[str, list[Any]]) -> dict[str, float]:
    """Sets each parameter's gradient to the sum of the terms' (what one backward of the whole
    loss would leave), and returns each term's gradient norm on the weights the policy term
    reaches (the LLM or its LoRA, not the value head)."""
    import torch

    policy, value = term_grads["policy"], term_grads["value"]
    for param, *grads in zip(params, policy, value, strict=True):
        present = [g for g in grads if g is not None]
        param.grad = sum(present[1:], present[0]) if present else None
    shared = [j for j, grad in enumerate(policy) if grad is not None]

    def norm(grads: list[Any]) -> float:
        found = [grads[j].norm() for j in shared if grads[j] is not None]
        return float(torch.stack(found).norm()) if found else 0.0

    return {"policy_grad_norm": norm(policy), "value_grad_norm": norm(value)}


def ppo_loss(
    scored: tuple[Any, Any],
    actions: Any,
    old_logprobs: Any,
    advantages: Any,
    returns: Any,
    old_values: Any,
    ppo: LlmPpoSettings,
) -> tuple[Any, dict[str, float], dict[str, Any]]:
    """PPO's loss on samples (advantages already normalised), its statistics, and its two
    terms: policy (clipped objective and entropy bonus) and value (weighted)."""
    import torch

    scores, new_values = scored
    # the rollout's tensors (CPU) join the scores on the model's device
    device = scores.device
    actions, old_logprobs = actions.to(device), old_logprobs.to(device)
    advantages, returns, old_values = (
        advantages.to(device),
        returns.to(device),
        old_values.to(device),
    )
    distribution = torch.distributions.Categorical(logits=scores)
    new_logprobs = distribution.log_prob(actions)
    entropy = distribution.entropy()
    log_ratio = new_logprobs - old_logprobs
    ratio = log_ratio.exp()
    with torch.no_grad():
        old_approx_kl = (-log_ratio).mean()
        approx_kl = ((ratio - 1) - log_ratio).mean()
        clipfrac = ((ratio - 1.0).abs() > ppo.clip_coef).float().mean()
    # clipped policy loss
    pg_loss = torch.max(
        -advantages * ratio,
        -advantages * torch.clamp(ratio, 1 - ppo.clip_coef, 1 + ppo.clip_coef),
    ).mean()
    # value loss, clipped around the rollout's values
    if ppo.clip_vloss:
        unclipped = (new_values - returns) ** 2
        clipped = old_values + torch.clamp(new_values - old_values, -ppo.clip_coef, ppo.clip_coef)
        v_loss = 0.5 * torch.max(unclipped, (clipped - returns) ** 2).mean()
    else:
        v_loss = 0.5 * ((new_values - returns) ** 2).mean()
    entropy_loss = entropy.mean()
    terms = {"policy": pg_loss - ppo.ent_coef * entropy_loss, "value": v_loss * ppo.vf_coef}
    loss = terms["policy"] + terms["value"]
    stats = {
        "loss": float(loss.detach()),
        "policy_loss": float(pg_loss.detach()),
        "value_loss": float(v_loss.detach()),
        "entropy": float(entropy_loss.detach()),
        "old_approx_kl": float(old_approx_kl),
        "approx_kl": float(approx_kl),
        "clipfrac": float(clipfrac),
    }
    return loss, stats, terms


def _save(
    line: Versions,
    policy: Any,
    optimizer: Any,
    config: LlmPpoConfig,
    result: dict[str, Any],
    version: str | int | None,
) -> Checkpoint:
    import torch

    def write(directory: Path) -> None:
        policy.save(directory)
        torch.save(optimizer.state_dict(), directory / OPTIMIZER_FILE)
        (directory / STATE_FILE).write_text(json.dumps(result, indent=2) + "\n")

    return line.save(write, LLM_PPO, version, config=config.model_dump(), result=result)


# -- the registered algorithm ----------------------------------------------------------------
class LlmPpo(Algorithm):
    """PPO on an LLM policy. Settings: `LlmPpoConfig`'s fields; `base_model` is required.
    `source`: an env id (a world of `num_envs` is made) or a world."""

    settings_model = LlmPpoConfig

    name = LLM_PPO
    family = "llm-ppo"
    learns_from = "env"

    def train(
        self,
        source: Any,
        checkpoints: Versions | str | Path,
        *,
        version: str | int | None = None,
        on_progress: Progress | None = None,
        **settings: Any,
    ) -> Checkpoint:
        config = validate_settings(LLM_PPO, LlmPpoConfig, settings)
        if isinstance(source, str):
            check_env(source)
        return train_llm_ppo(source, as_versions(checkpoints), config, version, on_progress)

    def load(self, checkpoint: Checkpoint | str | Path) -> Any:
        """The `LlmPolicyModel` of a checkpoint (model with adapter, value head), in eval mode."""
        from llmrl.learner.llm.model import LlmPolicyModel

        found = find_checkpoint(checkpoint)
        self.check_written_by_me(found)
        config = found.config
        policy = LlmPolicyModel.load(
            config["base_model"],
            lora=bool(config.get("lora", True)),
            value_hidden=int(config.get("ppo", {}).get("value_hidden", 1024)),
            bf16=config.get("bf16"),
            init_from=found.path,
            device="auto",  # where this process runs, whatever device trained it
        )
        return policy.train(False)


registry.register_algorithm(
    LLM_PPO, "PPO on an LLM policy over text actions (GLAM)", family="llm-ppo", learns_from="env"
)(LlmPpo())
