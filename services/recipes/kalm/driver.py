"""The episode driver of the recipe `kalm`: a trained offline RL policy plays the env.

Policy spec `{"kind": "kalm-offline", "algorithm": "bc"|"cql"|..., "checkpoint": <version
directory>, "embed_model": <gateway embedding model or None>}`: at each step the policy sees
the env's `state` and the sentence embedding of its `instruction` (the gateway's `embed`,
once per episode, cached by the gateway) and plays its greedy action (an id, or a vector for
Box actions). The model is loaded once per process (`load_cached`).
"""

from __future__ import annotations

from typing import Any, Literal

import numpy as np
from pydantic import Field, field_validator

from llmrl.agents import Decision, EpisodeDriver, EpisodeJob, RolloutResources
from llmrl.agents.policy_spec import ArtifactRef, PolicySpec
from llmrl.common.registry import registry

OFFLINE = "kalm-offline"


class OfflinePolicyDriver(EpisodeDriver):
    """Acts with an `OfflinePolicy` on (state, instruction embedding)."""

    observations = ("state", "instruction")
    optional_observations = ("success",)

    def __init__(self, policy: Any, llm: Any, embed_model: str | None, run_id: str) -> None:
        self.policy, self.llm, self.embed_model, self.run_id = policy, llm, embed_model, run_id
        self.instruction: str | None = None
        self.embedding: np.ndarray | None = None

    def reset(self) -> None:
        self.instruction, self.embedding = None, None

    def act(self, observation: dict[str, Any], t: int) -> Decision:
        instruction = str(observation["instruction"])
        if self.policy.embedding_dim and instruction != self.instruction:
            self.embedding = self.llm.embed(
                [instruction], model=self.embed_model, run_id=self.run_id, tag="kalm-policy"
            )[0]
            self.instruction = instruction
        state = np.asarray(observation["state"], np.float32)
        action = self.policy.act(
            state[None], None if self.embedding is None else self.embedding[None]
        )[0]
        if self.policy.discrete:
            return Decision(action=int(action))
        return Decision(action=[float(x) for x in np.ravel(action)])


class OfflineSpec(PolicySpec):
    """`{"kind": "kalm-offline", "algorithm": ..., "checkpoint": ..., "embed_model": ...}`."""

    kind: Literal["kalm-offline"] = OFFLINE
    algorithm: str = Field(..., description="the offline RL algorithm that saved it (bc, cql...)")
    checkpoint: ArtifactRef
    embed_model: str | None = Field(None, description="gateway embedding model (None: default)")

    @field_validator("algorithm")
    @classmethod
    def _registered(cls, algorithm: str) -> str:
        from llmrl.common.registry import registered_name

        return registered_name("algorithm", algorithm)


@registry.register_driver(
    OFFLINE, "KALM: an offline RL policy on state + instruction embedding", spec=OfflineSpec
)
def _offline_driver(spec: OfflineSpec, resources: RolloutResources, job: EpisodeJob) -> Any:
    from llmrl.learner.algorithms import load_cached

    model = load_cached(spec.algorithm, spec.checkpoint)
    llm = resources.llm if model.embedding_dim else None
    return OfflinePolicyDriver(model, llm, spec.embed_model, job.run_id)
