"""The recipe `evaluate`'s config: every key with its description; bad values name the key."""

from __future__ import annotations

from typing import Annotated, Any

from pydantic import Field, ValidationInfo, field_validator, model_validator

from llmrl.common.bounds import Episodes, Seed, limit
from llmrl.common.registry import registered_name, registry
from llmrl.recipes.config import RecipeConfig, check_planner_model, confined_kwargs


class EvaluateConfig(RecipeConfig):
    env: str = Field("SimpleDoorKey", description="Registered environment id (`llmrl envs`).")
    env_kwargs: dict[str, Any] = Field(
        default_factory=dict, description="Keyword arguments of the environment."
    )
    planner: str = Field("oracle", description="Registered planner name.")
    planner_kwargs: dict[str, Any] = Field(
        default_factory=dict,
        description="Keyword arguments of the planner (e.g. model for LLM planners).",
    )
    policy: dict[str, Any] | None = Field(
        None,
        description="Instead of a planner: a policy spec {kind, name/..., kwargs} of a "
        "registered policy kind (e.g. a recipe's trained policy); overrides planner.",
    )
    episodes: Episodes = Field(20, description="Episodes to play.")
    seed: Seed = Field(0, description="Seed of episode 0; episode i uses seed + i.")
    num_envs: int = Field(
        1,
        ge=1,
        le=64,
        description="Episodes played at once, each in its own env (embedded mode: threads, "
        "whose LLM calls the gateway batches; service mode: the rollout workers decide).",
    )
    max_steps: Annotated[int | None, limit("episode_steps")] = Field(
        None, ge=1, description="Cap on low-level steps per episode (default: the env's limit)."
    )

    @field_validator("env")
    @classmethod
    def _env_is_registered(cls, value: str) -> str:
        from llmrl.common.plugins import load_plugins

        load_plugins()
        return registered_name("env", value)

    @field_validator("planner")
    @classmethod
    def _planner_is_registered(cls, value: str) -> str:
        return registered_name("planner", value)

    @field_validator("env_kwargs", "planner_kwargs")
    @classmethod
    def _paths_are_confined(cls, value: dict[str, Any], info: ValidationInfo) -> dict[str, Any]:
        if info.field_name == "planner_kwargs":
            check_planner_model(value)
        return confined_kwargs(value, str(info.field_name))

    @field_validator("policy")
    @classmethod
    def _policy_kind_is_registered(cls, value: dict[str, Any] | None) -> dict[str, Any] | None:
        if value is None:
            return None
        kinds = registry.names("driver")
        if value.get("kind") not in kinds:
            raise ValueError(
                f"policy.kind must be one of {', '.join(kinds)}, got {value.get('kind')!r}"
            )
        from llmrl.agents.policy_spec import parse_policy_spec, spec_dict

        # checked as its driver will read it: every key, and saved artifacts only (a file the
        # project did not save is refused here; `run:<id>/...` becomes its path)
        return spec_dict(parse_policy_spec(value))

    @model_validator(mode="after")
    def _env_kwargs_are_accepted(self) -> EvaluateConfig:
        from llmrl.simulator.world import check_env_kwargs

        try:
            check_env_kwargs(self.env, self.env_kwargs)
        except ValueError as exc:  # WorldError names the kwarg and the accepted ones
            raise ValueError(f"env_kwargs.{exc}") from None
        return self

    @model_validator(mode="after")
    def _env_gives_what_the_planner_reads(self) -> EvaluateConfig:
        """A planner that reads a privileged entry (the oracle's plan, the feasible skills)
        needs an env that gives it: refused here, naming the planners that would play it,
        rather than failing at the first step of the run."""
        if self.policy is not None:
            return self
        from llmrl.simulator.world import PRIVILEGED_OBSERVATIONS, make_env

        needed = [
            name
            for name in getattr(registry.get("planner", self.planner), "observations", ())
            if name in PRIVILEGED_OBSERVATIONS
        ]
        if not needed:
            return self
        try:
            env = make_env(self.env, **self.env_kwargs)
        except Exception:  # an env that cannot be built here fails with its own error at run time
            return self
        try:
            given = set(env.observation_space.spaces)
        finally:
            env.close()
        missing = [name for name in needed if name not in given]
        if missing:
            usable = [
                name
                for name in registry.names("planner")
                if set(getattr(registry.get("planner", name), "observations", ())) <= given
            ]
            raise ValueError(
                f"planner: {self.planner!r} reads the env's {', '.join(missing)}, which "
                f"{self.env!r} does not give{' with these env_kwargs' if self.env_kwargs else ''};"
                f" planners that read only what it gives: {', '.join(usable) or '(none)'}, or "
                "play a trained policy with policy={kind: ...}"
            )
        return self

    def policy_spec(self) -> dict[str, Any]:
        if self.policy is not None:
            return self.policy
        return {"kind": "planner", "name": self.planner, "kwargs": self.planner_kwargs}

    def policy_label(self) -> str:
        spec = self.policy_spec()
        return str(spec.get("name") or spec["kind"])
