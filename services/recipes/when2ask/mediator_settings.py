"""What the When2Ask mediator is paid and what it observes (`llmrl.recipes.when2ask.mediator`
explains each feature), declared once: the recipe's config, its training job and its driver's
policy spec embed this model. Apart from the mediator so that reading a job or a spec does
not import the simulator's envs."""

from __future__ import annotations

from pydantic import BaseModel, ConfigDict, Field

from llmrl.common.bounds import Coefficient


class MediatorSettings(BaseModel):
    """What a query costs the mediator and what it observes besides its base features (the
    module docstring); the defaults are the paper's observation with our milder penalties."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    lam: Coefficient = Field(0.01, ge=0, description="Penalty per planner query (λ).")
    same_plan_penalty: Coefficient = Field(
        0.01, ge=0, description="Extra penalty for asking and getting the same plan back."
    )
    new_plan_bonus: Coefficient = Field(
        0.0,
        ge=0,
        description="Reward for asking and getting another plan than the one in hand (the "
        "original code: 0.01, with same_plan_penalty 0.1).",
    )
    sees_plan: bool = Field(
        False,
        description="The mediator also observes the skill in hand (its verb and object type), "
        "so it can learn which plans do not fit the situation (the paper's sees only the "
        "observation).",
    )
    sees_knowledge: bool = Field(
        False,
        description="The mediator also observes what the planner was prompted with and what "
        "it answered, in compact form: the skill in hand (verb, object type and colour) and the "
        "agent's knowledge (seen keys, doors, boxes and balls by colour, the goal, door states, "
        "what it carries), so it can learn which plans do not fit what the agent knows.",
    )
    counts_objects: bool = Field(
        False,
        description="The mediator also observes how many objects the agent's knowledge names "
        "(a planner errs more with more to tell apart: planner_noise_mode=distractors).",
    )
    sees_confidence: bool = Field(
        False,
        description="The mediator also observes the probability the planner gave the plan in "
        "hand (a scoring LLM's softmax probability of its chosen skill; 1 for planners that "
        "cannot say): a sampling LLM's wrong plans are mostly its unlikely draws.",
    )
    sees_time: bool = Field(
        False,
        description="The mediator also observes the share of its step cap (max_steps) used so "
        "far, and training ends an episode at the cap as a termination instead of bootstrapping "
        "past it: under a tight cap the steps left decide whether a detour fails the episode.",
    )
