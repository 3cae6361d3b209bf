"""An episode driver for trained ELLM agents, so that any recipe's episode jobs (and rollout
workers) can play them: `llmrl run evaluate env=CrafterText policy='{kind: ellm-dqn,
checkpoint: runs/ellm/checkpoints/pretrain/ellm}'`.

Policy spec: `{"kind": "ellm-dqn", "checkpoint": <a dqn-ellm version directory or line>,
"epsilon": 0.0}`: the Q-network's greedy action on the env's `local_map`, `inventory` and
`achievements` (epsilon-greedy with a generator seeded by the episode's seed). Agents trained
with goal conditioning need their suggestions' embeddings, which episode jobs do not carry:
they are refused, naming the entries they lack.
"""

from __future__ import annotations

from typing import Any, Literal

import numpy as np
from pydantic import Field

from llmrl.agents import Decision, EpisodeDriver, EpisodeJob, RolloutResources
from llmrl.agents.policy_spec import ArtifactRef, PolicySpec
from llmrl.common.registry import registry
from llmrl.recipes.ellm.intrinsic import AGENT_KEYS

ELLM_DQN = "ellm-dqn"


class DqnDriver(EpisodeDriver):
    """Acts with a loaded `DqnPolicy` on one env's numeric observations."""

    observations = AGENT_KEYS
    optional_observations = ("success",)

    def __init__(self, policy: Any, epsilon: float, seed: int) -> None:
        missing = [key for key in policy.keys if key not in AGENT_KEYS]
        if missing:
            raise ValueError(
                f"policy.checkpoint: the agent reads {', '.join(missing)} (goal conditioning), "
                "which episode jobs do not provide; evaluate it with the recipe ellm"
            )
        self.policy, self.epsilon = policy, epsilon
        self.rng = np.random.default_rng(seed)

    def act(self, observation: dict[str, Any], t: int) -> Decision:
        batch = {key: np.asarray(observation[key])[None] for key in self.policy.keys}
        action = self.policy.act(batch, epsilon=self.epsilon, rng=self.rng)[0]
        return Decision(action=int(action))


class DqnSpec(PolicySpec):
    """`{"kind": "ellm-dqn", "checkpoint": <a dqn-ellm version or line>, "epsilon": ...}`."""

    kind: Literal["ellm-dqn"] = ELLM_DQN
    checkpoint: ArtifactRef
    epsilon: float = Field(0.0, ge=0, le=1, description="a random action's probability")


@registry.register_driver(ELLM_DQN, "a trained ELLM agent (dqn-ellm) on CrafterText", spec=DqnSpec)
def _dqn_driver(spec: DqnSpec, resources: RolloutResources, job: EpisodeJob) -> Any:
    from llmrl.learner.algorithms import load_cached

    return DqnDriver(load_cached("dqn-ellm", spec.checkpoint), spec.epsilon, seed=job.seed)
