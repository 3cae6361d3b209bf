"""The recipe `kalm`'s config: every key with its description; bad values name the key."""

from __future__ import annotations

from typing import Annotated, Literal

from pydantic import Field, field_validator, model_validator

from llmrl.common.bounds import Batch, Episodes, Seed, SeedOffset, Updates, limit
from llmrl.common.names import ModelName
from llmrl.recipes.config import RecipeConfig
from llmrl.recipes.kalm.training import grounding_setting, offline_setting

ENVS = ("ClevrRobot", "MetaWorld")
LEVELS = ("training", "rephrased", "unseen-easy", "unseen-hard")
IMAGINE_LEVELS = ("rephrased", "unseen-easy", "unseen-hard")
METAWORLD_IMAGINE_LEVELS = ("unseen-easy", "unseen-hard")
IMAGINED_FILTERS = ("valid", "goal", "replay")
DISCRETE_ALGORITHMS = ("bc", "cql")
CONTINUOUS_ALGORITHMS = ("bc", "cql", "td3+bc", "iql", "awac")
DATA_SOURCES = ("scripted", "released")
VARIANTS = ("real", "real+imagined")
CLEVR_ACTIONS = 40  # 5 balls x 8 push directions


def discrete_action_size(env: str) -> int | None:
    """The number of discrete actions of `env` (CLEVR-Robot's pushes); None for Box actions."""
    return CLEVR_ACTIONS if env == "ClevrRobot" else None


class KalmConfig(RecipeConfig):
    env: str = Field(
        "ClevrRobot", description=f"Environment: {' or '.join(ENVS)} (Meta-World: v3 tasks)."
    )
    data: list[str] | None = Field(
        None,
        description="Real data to learn from: scripted (collected by the scripted noisy "
        "pusher / Meta-World experts) and/or released (KALM's released .npy, CLEVR-Robot "
        "only). Default: both for ClevrRobot, scripted for MetaWorld.",
    )
    dataset: str | None = Field(
        None, description="An OfflineDataset .npz to use as the real data instead of `data`."
    )
    released_path: str | None = Field(
        None,
        description="KALM's released .npy (default: $LLMRL_KALM_DATA, else the copy `llmrl "
        "data get kalm` wrote under LLMRL_HOME).",
    )
    scripted_episodes: Episodes = Field(400, description="Episodes the scripted collector plays.")
    scripted_noise: float = Field(
        0.2, ge=0, le=1, description="Share of random actions of the scripted collector."
    )
    scripted_goals_per_start: int = Field(
        1,
        ge=1,
        le=1000,
        description="ClevrRobot: scripted episodes that share a start state, each with its own "
        "random goal (1: a new start every episode, as KALM's data). More than 1 shows the "
        "grounding one start under several instructions, so that it cannot tell the first "
        "push from the start alone and must read the instruction (our option, not the paper's).",
    )
    variants: list[str] | None = Field(
        None,
        description=f"Training data of the offline policies: {', '.join(VARIANTS)} "
        "(default: both).",
    )
    algorithms: list[str] | None = Field(
        None,
        description="Offline RL algorithms (d3rlpy): bc, cql for ClevrRobot (default both); "
        "bc, cql, td3+bc, iql, awac for MetaWorld (default bc, iql).",
    )
    levels: list[str] | None = Field(
        None,
        description=f"Goal levels evaluated: any of {', '.join(LEVELS)} (default: all; "
        "MetaWorld has no rephrased level).",
    )
    imagine_levels: list[str] | None = Field(
        None,
        description=f"Levels whose instructions are imagined: {', '.join(IMAGINE_LEVELS)} "
        "(default: all three for ClevrRobot; unseen-easy and unseen-hard, the tasks' "
        "instructions, for MetaWorld).",
    )
    imagined_filter: str = Field(
        "valid",
        description="Imagined rollouts kept: valid (KALM: drop those with an invalid state) or "
        "goal (also drop those none of whose states meets the goal under the level's "
        "success function; our option, not the paper's) or replay (a diagnostic: also drop "
        "those whose actions miss the goal in the env's own dynamics; needs ClevrRobot's "
        "simulator, an upper bound for better grounding, not a method). Every share is "
        "reported.",
    )
    model: ModelName = grounding_setting(
        "base_model", "Base LLM grounded by SFT (gateway model name)."
    )
    numbers: Literal["tokens", "text"] = grounding_setting(
        "numbers", "tokens: placeholder slots (KALM); text: numbers as text (ablation)."
    )
    state_target: Literal["absolute", "delta"] = grounding_setting(
        "state_target",
        "What the grounded state head predicts: the next state (KALM) or its "
        "change from the state before it (delta; numbers=tokens only).",
    )
    grounding_steps: Updates = Field(300, ge=1, description="Grounding SFT optimizer steps.")
    grounding_from: str | None = Field(
        None,
        description="A grounded checkpoint to imagine with instead of training one: a "
        "kalm-grounding version directory (e.g. runs/kalm/grounding/1), grounded on this "
        "config's data; its numbers, state_target and action space must match this config's. "
        "Imagination and offline-RL ablations then skip the grounding SFT (the grounding_* "
        "settings are not used).",
    )
    grounding_batch_size: int = grounding_setting("batch_size", "Examples per grounding SFT step.")
    grounding_learning_rate: float = grounding_setting("learning_rate", "LoRA learning rate.")
    grounding_state_weight: float = grounding_setting(
        "state_loss_weight",
        le=1e4,
        description="Weight of the state MSE in the grounding loss (KALM sums its losses "
        "unweighted: 1; a larger weight lets a small model learn the dynamics in fewer steps).",
    )
    grounding_tasks: list[str] | None = Field(
        None,
        description="Grounding SFT tasks, mixed uniformly: trajectory, dynamics, goal, describe "
        "(default: all four, KALM's). Imagination uses the trajectory format only.",
    )
    grounding_action_weight: float = grounding_setting(
        "action_loss_weight",
        le=1e4,
        description="Weight of the action loss in the grounding loss (KALM: 1). With a large "
        "grounding_state_weight the action head gets a small share of the clipped gradient.",
    )
    lora_r: int = grounding_setting("lora_r", "LoRA rank of the grounding SFT.")
    lora_layers: int | None = grounding_setting(
        "lora_layers", "Adapt only the top N decoder layers (None: all)."
    )
    grounding_layers: int | None = grounding_setting(
        "base_layers",
        description="Keep only the base LLM's first N decoder layers for grounding (a cheaper "
        "LM on a small CPU; None: all).",
    )
    imagined_per_level: Annotated[int, limit("episodes")] = Field(
        400, ge=1, description="Imagined rollouts per level (from real initial states)."
    )
    imagine_max_steps: int = Field(10, ge=1, le=50, description="Steps per imagined rollout.")
    imagine_temperature: float = Field(
        0.0,
        ge=0,
        le=10,
        description="Imagined actions: 0 takes the grounded action head's argmax (KALM); above "
        "0 draws each action from its softmax at this temperature, seeded (discrete actions in "
        "slots only: ClevrRobot with numbers=tokens).",
    )
    offline_steps: Updates = Field(5000, ge=1, description="Gradient steps of each offline policy.")
    offline_batch_size: Batch = offline_setting("batch_size", "Transitions per offline RL step.")
    offline_seeds: int = Field(
        1, ge=1, le=10, description="Offline policies trained per algorithm x data (seeds)."
    )
    imagined_weight: int = Field(
        1, ge=1, le=10, description="Times each kept imagined rollout appears in the data."
    )
    eval_episodes: Episodes = Field(100, description="Evaluation episodes per level.")
    eval_mode: str = Field(
        "world",
        description="world: every evaluation episode of a level at once in one batched "
        "simulator world (fast); episodes: one episode job each, played by the `kalm-offline` "
        "driver (rollout workers in service mode; stored episode records).",
    )
    eval_seed_offset: SeedOffset = Field(
        1_000_000, description="Seed offset of the evaluation episodes."
    )
    embed_model: ModelName | None = Field(
        None, description="Gateway embedding model of the instructions (None: its default)."
    )
    seed: Seed = Field(0, description="Seed of data collection, SFT, imagination, RL.")

    @field_validator("env")
    @classmethod
    def _env_is_known(cls, value: str) -> str:
        if value not in ENVS:
            raise ValueError(f"unknown env {value!r}; kalm runs on {', '.join(ENVS)}")
        return value

    @model_validator(mode="before")
    @classmethod
    def _env_defaults(cls, values: object) -> object:
        """Fill the keys whose default depends on the env."""
        if not isinstance(values, dict):
            return values
        clevr = values.get("env", "ClevrRobot") != "MetaWorld"
        defaults = {
            "data": ["scripted", "released"] if clevr else ["scripted"],
            "variants": list(VARIANTS),
            "algorithms": ["bc", "cql"] if clevr else ["bc", "iql"],
            "levels": list(LEVELS) if clevr else [lv for lv in LEVELS if lv != "rephrased"],
            "imagine_levels": list(IMAGINE_LEVELS if clevr else METAWORLD_IMAGINE_LEVELS),
        }
        return {**values, **{k: v for k, v in defaults.items() if values.get(k) is None}}

    @field_validator("data")
    @classmethod
    def _data_is_known(cls, value: list[str]) -> list[str]:
        return _subset(value, DATA_SOURCES, "data source")

    @field_validator("variants")
    @classmethod
    def _variants_are_known(cls, value: list[str]) -> list[str]:
        return _subset(value, VARIANTS, "variant")

    @field_validator("grounding_tasks")
    @classmethod
    def _grounding_tasks_are_known(cls, value: list[str] | None) -> list[str] | None:
        from llmrl.recipes.kalm.grounded_lm import TASKS

        return None if value is None else _subset(value, TASKS, "grounding task")

    @field_validator("levels")
    @classmethod
    def _levels_are_known(cls, value: list[str]) -> list[str]:
        return _subset(value, LEVELS, "level")

    @field_validator("imagine_levels")
    @classmethod
    def _imagine_levels_are_known(cls, value: list[str]) -> list[str]:
        return _subset(value, IMAGINE_LEVELS, "level", empty_ok=True)

    @field_validator("eval_mode")
    @classmethod
    def _eval_mode_is_known(cls, value: str) -> str:
        if value not in ("world", "episodes"):
            raise ValueError(f"expected world or episodes, got {value!r}")
        return value

    @field_validator("imagined_filter")
    @classmethod
    def _filter_is_known(cls, value: str) -> str:
        if value not in IMAGINED_FILTERS:
            raise ValueError(f"expected one of {', '.join(IMAGINED_FILTERS)}, got {value!r}")
        return value

    @field_validator("dataset", "released_path")
    @classmethod
    def _path_is_confined(cls, value: str | None, info: object) -> str | None:
        from llmrl.common.paths import confined_field

        return confined_field(value, info)

    @field_validator("grounding_from")
    @classmethod
    def _grounding_was_saved_here(cls, value: str | None) -> str | None:
        # a checkpoint the project saved (`run:<id>/grounding/1` or its path), nothing else
        from llmrl.common import trusted

        return None if value is None else str(trusted.resolve_artifact(value, "grounding_from"))

    @model_validator(mode="after")
    def _choices_fit_the_env(self) -> KalmConfig:
        allowed = DISCRETE_ALGORITHMS if self.env == "ClevrRobot" else CONTINUOUS_ALGORITHMS
        unknown = [a for a in self.algorithms or () if a not in allowed]
        if unknown or not self.algorithms:
            raise ValueError(
                f"algorithms: {unknown or self.algorithms} not available for {self.env}; "
                f"choose from {', '.join(allowed)}"
            )
        from llmrl.recipes.kalm.grounded_lm import check_number_settings  # numpy only

        check_number_settings(self.numbers, self.state_target)
        if self.imagine_temperature > 0 and (self.env != "ClevrRobot" or self.numbers != "tokens"):
            raise ValueError(
                "imagine_temperature: sampled imagination needs discrete actions in slots "
                f"(ClevrRobot, numbers=tokens); got env {self.env}, numbers {self.numbers}: "
                "use 0"
            )
        if self.scripted_goals_per_start != 1 and "scripted" not in (self.data or ()):
            raise ValueError(
                "scripted_goals_per_start: applies to scripted data, and data is "
                f"{self.data}; add scripted to data or use 1"
            )
        if self.grounding_from is not None:
            check_grounding_checkpoint(self)
        if self.env == "MetaWorld":
            if "rephrased" in (self.imagine_levels or ()):
                raise ValueError(
                    "imagine_levels: MetaWorld has no rephrased level; imagine "
                    f"{' or '.join(METAWORLD_IMAGINE_LEVELS)}"
                )
            if "rephrased" in (self.levels or ()):
                raise ValueError("levels: MetaWorld has no rephrased level")
            if "released" in (self.data or ()):
                raise ValueError(
                    "data: KALM's released Meta-World data has v2 observations (91 numbers), "
                    "not v3's 39; use data=[scripted]"
                )
            if self.scripted_goals_per_start != 1:
                raise ValueError(
                    "scripted_goals_per_start: Meta-World's experts play one task per reset; "
                    "only ClevrRobot shares start states (use 1)"
                )
            if self.imagined_filter == "replay":
                raise ValueError(
                    "imagined_filter: replay needs dynamics that step an imagined state "
                    "(ClevrRobot); MetaWorld's observations do not hold its simulator's state: "
                    "use valid or goal"
                )
        return self


def check_grounding_checkpoint(cfg: KalmConfig) -> None:
    """`grounding_from` names a kalm-grounding checkpoint whose settings fit `cfg`; a
    ValueError naming the key and what differs otherwise."""
    from llmrl.learner.versions import Checkpoint

    try:
        checkpoint = Checkpoint.read(str(cfg.grounding_from))
    except FileNotFoundError:
        raise ValueError(
            f"grounding_from: no checkpoint directory {cfg.grounding_from!r}; name a version "
            "directory of a kalm run's grounding, e.g. runs/kalm/grounding/1"
        ) from None
    except (OSError, ValueError) as exc:  # unreadable or not JSON metadata
        raise ValueError(
            f"grounding_from: cannot read the checkpoint's metadata in {cfg.grounding_from!r} "
            f"({type(exc).__name__}: {str(exc)[:200]})"
        ) from None
    if checkpoint.algorithm != "kalm-grounding":
        raise ValueError(
            f"grounding_from: {cfg.grounding_from!r} holds a "
            f"{checkpoint.algorithm or 'unlabelled'} checkpoint, not kalm-grounding"
        )
    wanted = {
        "numbers": cfg.numbers,
        "state_target": cfg.state_target,
        "action_size": discrete_action_size(cfg.env),
    }
    # checkpoints from before state_target existed predicted absolute states
    saved = {"state_target": "absolute", **checkpoint.config}
    differ = [
        f"{key} {saved.get(key)!r} (this config: {value!r})"
        for key, value in wanted.items()
        if saved.get(key) != value
    ]
    if differ:
        raise ValueError(
            f"grounding_from: {cfg.grounding_from!r} was grounded with {', '.join(differ)}"
        )


def _subset(value: list[str], allowed: tuple[str, ...], noun: str, empty_ok: bool = False):
    unknown = [v for v in value if v not in allowed]
    if unknown:
        raise ValueError(
            f"unknown {noun}(s) {', '.join(unknown)}; choose from {', '.join(allowed)}"
        )
    if not value and not empty_ok:
        raise ValueError(f"expected at least one {noun} of {', '.join(allowed)}")
    return list(dict.fromkeys(value))
