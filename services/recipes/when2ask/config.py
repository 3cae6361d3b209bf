"""The recipe `when2ask`'s config: tasks, planner, mediator and PPO settings, each key with
its description; bad values name the key."""

from __future__ import annotations

from typing import Any, Literal

from pydantic import Field, field_validator, model_validator

from llmrl.common.bounds import Episodes, EpisodeSteps, Frames, Seed
from llmrl.common.names import ModelName
from llmrl.learner.algorithms.base import setting_field
from llmrl.recipes.config import RecipeConfig
from llmrl.recipes.when2ask import driver as _driver  # noqa: F401 - registers policy kinds
from llmrl.recipes.when2ask.asking import (
    FORCED_ONLY,
    METHODS,
    NEWS_OR_SKILL_END,
    REFERENCE_RULES,
    UNTIL_CONFIDENT,
)
from llmrl.recipes.when2ask.mediator_settings import MediatorSettings
from llmrl.recipes.when2ask.training import (
    When2AskPpoSettings,
)

TASKS = ("SimpleDoorKey", "KeyInBox", "RandomBoxKey", "ColoredDoorKey")
NEVER_ASK = "never-ask"
EVAL_SEED_OFFSET = 1_000_000  # evaluation seeds never overlap training seeds

FIXED_RULES = ("always", FORCED_ONLY, NEWS_OR_SKILL_END)  # the rules the learned one must beat


# the config key of each MediatorSettings field (the flat keys users know)
MEDIATOR_KEYS = {
    name: name if name in ("lam", "same_plan_penalty", "new_plan_bonus") else f"mediator_{name}"
    for name in MediatorSettings.model_fields
}


def mediator_field(name: str) -> Any:
    """The config field of MediatorSettings' `name`: its default, bounds and help, not retyped."""
    return setting_field(MediatorSettings, name)


class When2AskConfig(RecipeConfig, When2AskPpoSettings):
    envs: list[str] = Field(list(TASKS), min_length=1, description="Tasks to run.")
    planner: Literal["oracle", "noisy", "local", "llm"] = Field(
        "oracle",
        description="oracle: scripted, privileged state; noisy: the oracle's plan replaced "
        "with probability planner_noise by a plausible wrong one; local: the gateway's default "
        "local model scores the feasible skills; llm: a chat model writes plans "
        "(planner_model).",
    )
    planner_noise: float = Field(
        0.2, ge=0, le=1, description="planner=noisy: probability that a query's plan is wrong."
    )
    planner_noise_mode: Literal["fresh", "persistent", "distractors"] = Field(
        "fresh",
        description="planner=noisy: fresh: an independent error draw per query (asking again "
        "may repair or break the plan, as a sampling LLM); persistent: the same knowledge and "
        "feasible skills get the same answer within an episode (as a greedy LLM), so asking "
        "again helps only once that input has changed; distractors: fresh draws at rate "
        "min(1, planner_noise x the seen objects other than the plan's), as an LLM confuses "
        "objects more the more it knows of.",
    )
    planner_temperature: float = Field(
        0.0,
        ge=0,
        le=10,
        description="planner=local/llm: sampling temperature (0: always the best plan; > 0: "
        "asking again may change it).",
    )
    planner_model: ModelName | None = Field(
        None, description="Gateway model for planner=local/llm (default: the gateway's)."
    )
    planner_mode: Literal["generate", "score"] | None = Field(
        None, description="Override the LLM planner's mode (local: score, llm: generate)."
    )
    # what the mediator is paid and observes: MediatorSettings' fields, under these keys
    lam: float = mediator_field("lam")
    same_plan_penalty: float = mediator_field("same_plan_penalty")
    new_plan_bonus: float = mediator_field("new_plan_bonus")
    mediator_sees_plan: bool = mediator_field("sees_plan")
    mediator_sees_knowledge: bool = mediator_field("sees_knowledge")
    mediator_counts_objects: bool = mediator_field("counts_objects")
    mediator_sees_confidence: bool = mediator_field("sees_confidence")
    mediator_sees_time: bool = mediator_field("sees_time")
    confident_at: float = Field(
        0.5,
        gt=0,
        le=1,
        description="until-confident (a reference rule): asks until the plan in hand has at "
        "least this probability from the planner.",
    )
    train_steps: Frames = Field(20_000, ge=0, description="PPO timesteps for the asking policy.")
    never_ask_steps: Frames = Field(
        20_000, ge=0, description="PPO timesteps for the never-ask baseline (0: skip it)."
    )
    eval_episodes: Episodes = Field(50, description="Evaluation episodes per method and task.")
    methods: list[str] = Field(
        [*METHODS, NEVER_ASK],
        min_length=1,
        description="Methods to evaluate; also the reference rules until-confirmed (ask until "
        "a query returns the plan in hand), news-until-confirmed (ask when the knowledge "
        "changed, then until confirmed) and until-confident (ask until the planner gave the "
        "plan in hand at least confident_at; needs mediator_sees_confidence), not defaults.",
    )
    max_steps: EpisodeSteps = Field(
        200,
        ge=1,
        description="Mediator step cap per episode, in training and evaluation (an episode "
        "not solved by then fails; the tasks' own cap is 100 low-level steps, and infeasible "
        "skills take mediator steps without env steps).",
    )
    random_ask_p: float | None = Field(
        None,
        ge=0,
        le=1,
        description="Random-ask's probability of asking per step (default: the learned "
        "policy's measured ask rate; required when 'learned' is not among the methods).",
    )
    seed: Seed = Field(0, description="Seed of training and evaluation.")

    def mediator(self) -> MediatorSettings:
        """The mediator's settings (one model: the training job and the policy spec embed it)."""
        return MediatorSettings(**{name: getattr(self, key) for name, key in MEDIATOR_KEYS.items()})

    @model_validator(mode="after")
    def _random_ask_has_a_rate(self) -> When2AskConfig:
        if "random" in self.methods and "learned" not in self.methods and self.random_ask_p is None:
            raise ValueError(
                "random_ask_p: random-ask without 'learned' needs its ask probability "
                "(e.g. random_ask_p=0.1), or add 'learned' to methods to use its rate"
            )
        if UNTIL_CONFIDENT in self.methods and not self.mediator_sees_confidence:
            raise ValueError(
                f"methods: {UNTIL_CONFIDENT} reads the planner's confidence; set "
                "mediator_sees_confidence=true (with planner=local, whose scores give it)"
            )
        return self

    @field_validator("envs")
    @classmethod
    def _known_tasks(cls, value: list[str]) -> list[str]:
        unknown = [env for env in value if env not in TASKS]
        if unknown:
            raise ValueError(f"unknown task(s) {unknown}; tasks: {', '.join(TASKS)}")
        return value

    @field_validator("methods")
    @classmethod
    def _known_methods(cls, value: list[str]) -> list[str]:
        allowed = (*METHODS, *REFERENCE_RULES, NEVER_ASK)
        unknown = [m for m in value if m not in allowed]
        if unknown:
            raise ValueError(f"unknown method(s) {unknown}; methods: {', '.join(allowed)}")
        return value
