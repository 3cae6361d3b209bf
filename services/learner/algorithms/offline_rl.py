"""Offline RL through d3rlpy: BC, CQL, TD3+BC, IQL and AWAC on a fixed dataset (family
`offline-rl`).

Each is registered by its field name (`bc`, `cql`, `td3+bc`, `iql`, `awac`) and learns from a
dataset (`source`): an `llmrl.common.offline_dataset.OfflineDataset` (anything with
`to_mdp_dataset(with_instruction_embeddings=...)`) or a d3rlpy `MDPDataset`. Discrete or
continuous actions are read off the dataset: discrete ones get d3rlpy's `DiscreteBC` /
`DiscreteCQL` (KALM's CLEVR-Robot setting: CQL with alpha 10), continuous ones `BC`, `CQL`,
`TD3PlusBC`, `IQL`, `AWAC`; `td3+bc`, `iql` and `awac` need continuous actions.

The policy sees the observation and, when `instruction_embeddings` (one row per episode of the
dataset) is given, the sentence embedding of the episode's instruction concatenated after it:
KALM's language-conditioned policy. Every network is a 256-256 MLP (`hidden_units`).

The loop below reads top to bottom: build the d3rlpy config, iterate d3rlpy's `fitter` one
epoch at a time (its own logger silenced), write each epoch's mean losses as TensorBoard
`losses/<name>` and `charts/SPS`, report progress per gradient step, and save the learnable
(`policy.d3`, d3rlpy's own file, config included) as a checkpoint version. `load` gives an
`OfflinePolicy` that maps (observation, instruction embedding) to an action.
"""

from __future__ import annotations

import dataclasses
import functools
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Annotated, Any

import numpy as np
from pydantic import Field, field_validator

from llmrl.common import trusted
from llmrl.common.numerics import adam_options
from llmrl.common.registry import registry
from llmrl.learner.algorithms.base import (
    Algorithm,
    AlgorithmSettings,
    Progress,
    validate_settings,
)
from llmrl.learner.versions import Checkpoint, Versions, as_versions, find_checkpoint

FAMILY = "offline-rl"
POLICY_FILE = "policy.d3"
DISCRETE_ONLY: tuple[str, ...] = ()
CONTINUOUS_ONLY = ("td3+bc", "iql", "awac")
ALGORITHMS = ("bc", "cql", "td3+bc", "iql", "awac")


PositiveInt = Annotated[int, Field(gt=0)]


class OfflineRLConfig(AlgorithmSettings):
    """Every setting of the offline RL algorithms, with its description and bounds (a bad or
    unknown one is a ValueError naming it: `validate_settings`)."""

    steps: int = Field(10_000, gt=0, description="gradient steps")
    steps_per_epoch: int = Field(1_000, gt=0, description="steps between TensorBoard points")
    batch_size: int = Field(256, gt=0, description="transitions per gradient step")
    learning_rate: float = Field(
        3e-4, gt=0, description="learning rate of every optimizer of the algorithm"
    )
    # a list in JSON: the tuple alone is lax, its widths strict integers
    hidden_units: tuple[PositiveInt, ...] = Field(
        (256, 256), strict=False, description="the MLPs' hidden widths (a list)"
    )
    alpha: float | None = Field(
        None,
        ge=0,
        description="discrete CQL's conservative weight (None: KALM's 10); TD3+BC's (None: 2.5)",
    )
    gamma: float = Field(0.99, ge=0, le=1, description="discount factor, in [0, 1]")
    seed: int = Field(0, ge=0, description="seed of d3rlpy (torch, numpy) and the batches")
    action_size: int | None = Field(
        None,
        gt=0,
        description="discrete actions (None: the dataset's largest id + 1; must exceed every id)",
    )
    tensorboard_dir: str | None = Field(None, description="TensorBoard directory (None: none)")

    @field_validator("hidden_units")
    @classmethod
    def _at_least_one_width(cls, value: tuple[int, ...]) -> tuple[int, ...]:
        if not value:
            raise ValueError("expected at least one width")
        return value


SETTINGS = tuple(OfflineRLConfig.model_fields)


@functools.cache
def _d3rlpy() -> Any:
    """d3rlpy, imported once (heavy: torch, gym) when training or loading; its structlog
    output quietened once, so a caller's own structlog configuration made later stands."""
    import d3rlpy

    _quiet_structlog()
    return d3rlpy


def _quiet_structlog() -> None:
    """d3rlpy logs every build and epoch through structlog at info level: keep warnings only
    (the project itself does not use structlog)."""
    import logging

    import structlog

    structlog.configure(wrapper_class=structlog.make_filtering_bound_logger(logging.WARNING))


def check_action_size(dataset: Any, action_size: int | None) -> None:
    """A discrete `action_size` must exceed every action id of the dataset (d3rlpy would fail
    with an index error in the middle of training otherwise)."""
    if action_size is None or not getattr(dataset, "discrete", False):
        return
    largest = int(np.max(dataset.actions)) if len(dataset.actions) else -1
    if largest >= action_size:
        raise ValueError(
            f"action_size: {action_size} is too small for this dataset, whose actions go up to "
            f"{largest} (needs at least {largest + 1})"
        )


@functools.cache
def _fused_adam_factory() -> type:
    """d3rlpy's Adam factory with torch's fused kernel, for `LLMRL_ADAM=fused` (d3rlpy's own
    builds `torch.optim.Adam` with torch's default kernel, and takes no choice of it).
    Registered with d3rlpy under its own name, so that a saved learnable naming it loads."""
    import torch

    d3rlpy = _d3rlpy()

    @dataclasses.dataclass()
    class FusedAdamFactory(d3rlpy.optimizers.AdamFactory):
        def create_optimizer(self, named_modules: Any, lr: float) -> Any:
            built = super().create_optimizer(named_modules, lr)  # d3rlpy's choice of params
            params = [param for group in built.param_groups for param in group["params"]]
            return torch.optim.Adam(
                params,
                lr=lr,
                betas=self.betas,
                eps=self.eps,
                weight_decay=self.weight_decay,
                amsgrad=self.amsgrad,
                fused=True,
            )

        @staticmethod
        def get_type() -> str:
            return "llmrl_fused_adam"

    d3rlpy.optimizers.register_optimizer_factory(FusedAdamFactory)
    return FusedAdamFactory


def with_adam_kernel(config: Any) -> Any:
    """`config` with the process's Adam kernel in each of its optimiser factories that is
    d3rlpy's plain Adam (its settings kept); as given under torch's own kernel."""
    if not adam_options():
        return config
    adam, fused = _d3rlpy().optimizers.AdamFactory, _fused_adam_factory()
    replaced = {
        field.name: fused(**{f.name: getattr(value, f.name) for f in dataclasses.fields(value)})
        for field in dataclasses.fields(config)
        if field.name.endswith("optim_factory")
        and type(value := getattr(config, field.name)) is adam
    }
    return dataclasses.replace(config, **replaced)


def make_config(name: str, discrete: bool, settings: dict[str, Any]) -> Any:
    """The d3rlpy algorithm config of `name` for discrete or continuous actions."""
    d3rlpy = _d3rlpy()
    algos = d3rlpy.algos
    encoder = d3rlpy.models.encoders.VectorEncoderFactory(
        hidden_units=list(settings["hidden_units"])
    )
    lr, batch, gamma, alpha = (
        settings["learning_rate"],
        settings["batch_size"],
        settings["gamma"],
        settings["alpha"],
    )
    if discrete:
        if name in CONTINUOUS_ONLY:
            raise ValueError(
                f"{name}: needs continuous (Box) actions; this dataset's actions are discrete "
                f"(use bc or cql)"
            )
        if name == "bc":
            return algos.DiscreteBCConfig(
                batch_size=batch, learning_rate=lr, encoder_factory=encoder, gamma=gamma
            )
        return algos.DiscreteCQLConfig(
            batch_size=batch,
            learning_rate=lr,
            encoder_factory=encoder,
            gamma=gamma,
            alpha=10.0 if alpha is None else float(alpha),
        )
    two = {"actor_encoder_factory": encoder, "critic_encoder_factory": encoder}
    rates = {"actor_learning_rate": lr, "critic_learning_rate": lr}
    common = {"batch_size": batch, "gamma": gamma}
    if name == "bc":
        return algos.BCConfig(learning_rate=lr, encoder_factory=encoder, **common)
    if name == "cql":
        return algos.CQLConfig(**common, **two, **rates)
    if name == "td3+bc":
        return algos.TD3PlusBCConfig(
            **common, **two, **rates, alpha=2.5 if alpha is None else float(alpha)
        )
    if name == "iql":
        return algos.IQLConfig(**common, **two, **rates, value_encoder_factory=encoder)
    if name == "awac":
        return algos.AWACConfig(**common, **two, **rates)
    raise ValueError(f"unknown offline algorithm {name!r}; choose one of {', '.join(ALGORITHMS)}")


def as_mdp_dataset(
    source: Any, instruction_embeddings: np.ndarray | None, action_size: int | None
) -> Any:
    """A d3rlpy MDPDataset from an OfflineDataset (with the embeddings) or an MDPDataset."""
    d3rlpy = _d3rlpy()
    if isinstance(source, d3rlpy.dataset.ReplayBufferBase):
        if instruction_embeddings is not None:
            raise ValueError("instruction_embeddings: only with an OfflineDataset source")
        return source
    if not hasattr(source, "to_mdp_dataset"):
        raise TypeError(
            f"source: expected an OfflineDataset or a d3rlpy MDPDataset, got {type(source)}"
        )
    if instruction_embeddings is not None:
        episodes = len(source.instructions)
        if instruction_embeddings.ndim != 2 or len(instruction_embeddings) != episodes:
            raise ValueError(
                f"instruction_embeddings: expected shape ({episodes}, D), one row per episode, "
                f"got {instruction_embeddings.shape}"
            )
    if getattr(source, "discrete", False):
        check_action_size(source, action_size)
        return source.to_mdp_dataset(
            with_instruction_embeddings=instruction_embeddings, action_size=action_size
        )
    return source.to_mdp_dataset(with_instruction_embeddings=instruction_embeddings)


def is_discrete(dataset: Any) -> bool:
    return dataset.dataset_info.action_space == _d3rlpy().constants.ActionSpace.DISCRETE


class OfflineRLAlgorithm(Algorithm):
    """One d3rlpy algorithm on a dataset. Settings: `OfflineRLConfig`'s fields;
    `instruction_embeddings` (E, D) is passed beside them."""

    settings_model = OfflineRLConfig

    learns_from = "dataset"
    family = FAMILY

    def __init__(self, name: str) -> None:
        self.name = name

    def train(
        self,
        source: Any,
        checkpoints: Versions | str | Path,
        *,
        version: str | int | None = None,
        on_progress: Progress | None = None,
        instruction_embeddings: np.ndarray | None = None,
        **settings: Any,
    ) -> Checkpoint:
        cfg = validate_settings(self.name, OfflineRLConfig, settings).model_dump()
        d3rlpy = _d3rlpy()
        d3rlpy.seed(int(cfg["seed"]))
        dataset = as_mdp_dataset(source, instruction_embeddings, cfg["action_size"])
        discrete = is_discrete(dataset)
        algo = with_adam_kernel(make_config(self.name, discrete, cfg)).create(device="cpu")

        writer = None
        if cfg["tensorboard_dir"]:
            from torch.utils.tensorboard import SummaryWriter

            writer = SummaryWriter(str(cfg["tensorboard_dir"]))
        steps, per_epoch = (
            int(cfg["steps"]),
            max(1, min(int(cfg["steps_per_epoch"]), int(cfg["steps"]))),
        )
        done, started = 0, time.perf_counter()
        last_losses: dict[str, float] = {}

        def count_step(_algo: Any, _epoch: int, total_step: int) -> None:
            nonlocal done
            if on_progress is not None and total_step > done:
                on_progress(total_step - done)
            done = total_step

        for _epoch, metrics in algo.fitter(
            dataset,
            n_steps=steps,
            n_steps_per_epoch=per_epoch,
            logger_adapter=d3rlpy.logging.NoopAdapterFactory(),
            show_progress=False,
            save_interval=10**9,
            callback=count_step,
        ):
            last_losses = {k: float(v) for k, v in metrics.items() if "loss" in k}
            if writer is not None:
                for key, value in last_losses.items():
                    writer.add_scalar(f"losses/{key}", value, done)
                elapsed = max(time.perf_counter() - started, 1e-9)
                writer.add_scalar("charts/SPS", done / elapsed, done)
        if writer is not None:
            writer.close()

        observation_dim = int(np.prod(dataset.dataset_info.observation_signature.shape[0]))
        result = {
            "steps": done,
            "seconds": time.perf_counter() - started,
            "transitions": int(dataset.transition_count),
            "discrete": discrete,
            "action_size": int(dataset.dataset_info.action_size),
            "observation_dim": observation_dim,
            "embedding_dim": 0
            if instruction_embeddings is None
            else int(instruction_embeddings.shape[1]),
            "losses": last_losses,
        }
        saved_settings = {k: v for k, v in cfg.items() if k != "tensorboard_dir"}
        return as_versions(checkpoints).save(
            lambda directory: algo.save(str(directory / POLICY_FILE)),
            self.name,
            version,
            config=saved_settings,
            result=result,
        )

    def load(self, checkpoint: Checkpoint | str | Path) -> OfflinePolicy:
        found = find_checkpoint(checkpoint)
        self.check_written_by_me(found)
        # d3rlpy's file is a pickle: loaded from the bytes whose digest was checked
        saved = trusted.open_verified(found.path / POLICY_FILE)
        return OfflinePolicy(_load_learnable(saved), found)


def _load_learnable(saved: Any) -> Any:
    """`d3rlpy.load_learnable` of the verified bytes `saved`: d3rlpy reads only a file name,
    so they are copied to a file in a folder of this process's own (mode 700), never reread
    from where they were checked."""
    import shutil
    import tempfile

    with tempfile.TemporaryDirectory(prefix="llmrl-d3-") as folder:
        copy = Path(folder) / POLICY_FILE
        with saved, copy.open("xb") as handle:
            shutil.copyfileobj(saved, handle)
        _fused_adam_factory()  # a policy trained under LLMRL_ADAM=fused names it: registered
        return _d3rlpy().load_learnable(str(copy), device="cpu")


@dataclass
class OfflinePolicy:
    """A trained offline-RL policy: `act(observations, embeddings)` for a batch."""

    learnable: Any
    checkpoint: Checkpoint

    @property
    def discrete(self) -> bool:
        return bool(self.checkpoint.result.get("discrete", True))

    @property
    def embedding_dim(self) -> int:
        return int(self.checkpoint.result.get("embedding_dim", 0))

    def act(self, observations: np.ndarray, embeddings: np.ndarray | None = None) -> np.ndarray:
        """Greedy actions for a batch of observations (N, obs_dim) and, for an
        instruction-conditioned policy, their instructions' embeddings (N, D)."""
        x = np.asarray(observations, dtype=np.float32)
        if x.ndim == 1:
            x = x[None]
        if self.embedding_dim:
            if embeddings is None:
                raise ValueError("embeddings: this policy was trained with instruction embeddings")
            e = np.asarray(embeddings, dtype=np.float32).reshape(len(x), -1)
            x = np.concatenate([x, e], axis=1)
        return self.learnable.predict(x)


for _name, _description in (
    ("bc", "behaviour cloning (d3rlpy BC / DiscreteBC) on an offline dataset"),
    ("cql", "conservative Q-learning (d3rlpy CQL / DiscreteCQL, alpha 10) on an offline dataset"),
    ("td3+bc", "TD3+BC (d3rlpy) on an offline dataset with continuous actions"),
    ("iql", "implicit Q-learning (d3rlpy IQL) on an offline dataset with continuous actions"),
    ("awac", "AWAC (d3rlpy) on an offline dataset with continuous actions"),
):
    registry.register_algorithm(
        _name,
        _description,
        family=FAMILY,
        learns_from="dataset",
        requires=("d3rlpy",),
        extra="offline",
    )(OfflineRLAlgorithm(_name))
