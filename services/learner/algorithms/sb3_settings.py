"""The settings of the SB3 algorithms `ppo`, `a2c` and `dqn`: SB3's own keyword arguments, one
pydantic model per algorithm, with SB3's defaults and descriptions and the ranges SB3 would
only assert on once training runs (or not at all: a NaN learning rate trains NaN weights).

What `train` sets itself (the env, policy, seed, device, logging) is no setting here, nor are
SB3's buffer classes (`rollout_buffer_class`, `replay_buffer_class`: no config can name a
class, and a config's JSON schema cannot describe one). A rate SB3 also takes as a schedule
(a callable of the progress remaining, 1 -> 0) takes one here too (`learning_rate_schedule`).
Defaults repeat SB3's (tests/learner/test_sb3.py compares them with its signatures): only the
keys a caller sets reach SB3.
"""

from __future__ import annotations

from typing import Annotated, Any

from pydantic import Field, ValidatorFunctionWrapHandler, WrapValidator

from llmrl.common.bounds import (
    Batch,
    BufferSize,
    EpisodeSteps,
    Epochs,
    Frames,
    RolloutSteps,
    Updates,
    limit,
)
from llmrl.learner.algorithms.base import AlgorithmSettings


def _number_or_schedule(value: Any, handler: ValidatorFunctionWrapHandler) -> Any:
    return value if callable(value) else handler(value)


OrSchedule = WrapValidator(_number_or_schedule)
Fraction = Annotated[float, Field(ge=0, le=1)]
# rates, coefficients and clips: each bounded by its kind's limit (`llmrl.common.bounds`)
LearningRate = Annotated[float, Field(ge=0), limit("learning_rate")]
NonNegative = Annotated[float, Field(ge=0), limit("coefficient")]
Positive = Annotated[float, Field(gt=0), limit("coefficient")]


class Sb3Settings(AlgorithmSettings):
    """What every SB3 algorithm takes."""

    gamma: Fraction = Field(0.99, description="discount factor")
    max_grad_norm: Positive = Field(0.5, description="gradient norm clip")
    stats_window_size: Annotated[int, limit("episodes")] = Field(
        100, gt=0, description="episodes averaged in rollout/ep_rew_mean and ep_len_mean"
    )
    policy_kwargs: dict[str, Any] | None = Field(
        None, description="the policy's own arguments (net_arch, activation_fn...)"
    )


class OnPolicySettings(Sb3Settings):
    """What PPO and A2C share (each has its own `n_steps` and `normalize_advantage`)."""

    gae_lambda: Fraction = Field(0.95, description="GAE lambda (1: Monte Carlo returns)")
    ent_coef: NonNegative = Field(0.0, description="entropy bonus coefficient")
    vf_coef: NonNegative = Field(0.5, description="value loss coefficient")
    use_sde: bool = Field(False, description="generalised state-dependent exploration (Box)")
    sde_sample_freq: Frames = Field(
        -1, ge=-1, description="steps between gSDE noise samples (-1: at each rollout start)"
    )
    rollout_buffer_kwargs: dict[str, Any] | None = Field(
        None, description="the rollout buffer's own arguments"
    )


class PpoSettings(OnPolicySettings):
    """Stable-Baselines3 PPO's settings."""

    learning_rate: Annotated[LearningRate, OrSchedule] = Field(
        3e-4, description="Adam learning rate, or a schedule of the progress remaining"
    )
    n_steps: RolloutSteps = Field(2048, gt=0, description="steps per env per rollout")
    batch_size: Batch = Field(64, gt=0, description="samples per mini-batch")
    n_epochs: Epochs = Field(10, gt=0, description="epochs over each rollout")
    clip_range: Annotated[Positive, OrSchedule] = Field(
        0.2, description="policy ratio clip, or a schedule"
    )
    clip_range_vf: Annotated[Positive, OrSchedule] | None = Field(
        None, description="value clip around the old values (None: no clipping)"
    )
    normalize_advantage: bool = Field(True, description="normalise advantages per mini-batch")
    target_kl: Positive | None = Field(
        None, description="stop the update's epochs past this approx KL (None: never)"
    )


class A2cSettings(OnPolicySettings):
    """Stable-Baselines3 A2C's settings."""

    learning_rate: Annotated[LearningRate, OrSchedule] = Field(
        7e-4, description="RMSprop (or Adam) learning rate, or a schedule"
    )
    n_steps: RolloutSteps = Field(5, gt=0, description="steps per env per update")
    gae_lambda: Fraction = Field(1.0, description="GAE lambda (1: Monte Carlo returns)")
    rms_prop_eps: Positive = Field(1e-5, description="RMSprop epsilon")
    use_rms_prop: bool = Field(True, description="RMSprop (False: Adam)")
    normalize_advantage: bool = Field(False, description="normalise the advantages")


class DqnSettings(Sb3Settings):
    """Stable-Baselines3 DQN's settings."""

    learning_rate: Annotated[LearningRate, OrSchedule] = Field(
        1e-4, description="Adam learning rate, or a schedule"
    )
    buffer_size: BufferSize = Field(1_000_000, gt=0, description="replay buffer, in transitions")
    learning_starts: Frames = Field(100, ge=0, description="steps of random play before learning")
    batch_size: Batch = Field(32, gt=0, description="transitions per gradient step")
    tau: Fraction = Field(1.0, description="target update coefficient (1: a hard copy)")
    # a count of steps, or (count, "step" | "episode"): a JSON list makes the tuple
    train_freq: Frames | Annotated[tuple[Frames, str], Field(strict=False)] = Field(
        4, description="env steps (or (n, 'episode')) between updates"
    )
    gradient_steps: Updates = Field(
        1, ge=-1, description="gradient steps per update (-1: as many as env steps)"
    )
    replay_buffer_kwargs: dict[str, Any] | None = Field(
        None, description="the replay buffer's own arguments"
    )
    optimize_memory_usage: bool = Field(
        False, description="store each observation once (next observations from the next)"
    )
    n_steps: EpisodeSteps = Field(1, gt=0, description="steps summed in each return (n-step DQN)")
    target_update_interval: Frames = Field(
        10_000, gt=0, description="env steps between target network updates"
    )
    exploration_fraction: Fraction = Field(
        0.1, description="share of the training over which epsilon falls"
    )
    exploration_initial_eps: Fraction = Field(1.0, description="epsilon at the start")
    exploration_final_eps: Fraction = Field(0.05, description="epsilon at the end")
    max_grad_norm: Positive = Field(10.0, description="gradient norm clip")


SETTINGS: dict[str, type[Sb3Settings]] = {
    "ppo": PpoSettings,
    "a2c": A2cSettings,
    "dqn": DqnSettings,
}
