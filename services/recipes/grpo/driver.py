"""The episode driver of the recipe `grpo`: its transcript policy played from a saved adapter.

Policy spec `{"kind": "grpo", "model": <base model directory or hub id>, "adapter": <PEFT
adapter directory or null>, "greedy": bool, "temperature": float, "device": "cpu"|"cuda"}`:
the episode is one growing transcript (`llmrl.recipes.grpo.policy`), each turn an action phrase
generated under the same constraint as in training, greedily or sampled with a generator
seeded by the episode's seed. With no adapter it is the untrained model in the same form (the
method `base`). Each turn is recorded as an `LlmCall` (prompt and completion tokens).
"""

from __future__ import annotations

import functools
import threading
from typing import Any, Literal

from pydantic import Field

from llmrl.agents import Decision, EpisodeDriver, EpisodeJob, RolloutResources
from llmrl.agents.policy_spec import ArtifactRef, PolicySpec
from llmrl.common.episodes import LlmCall
from llmrl.common.names import ModelName
from llmrl.common.registry import registry
from llmrl.recipes.glam.driver import env_phrases

GRPO = "grpo"
_GENERATING = threading.Lock()  # one cached model may serve episodes on several threads


@functools.lru_cache(maxsize=2)
def cached_policy_model(model: str, adapter: str | None, device: str) -> tuple[Any, Any]:
    """The model (with its adapter) loaded once per process: an evaluation plays many episodes."""
    from llmrl.common.numerics import computes_bf16
    from llmrl.recipes.grpo.policy import load_policy_model

    dtype = "bfloat16" if computes_bf16(device) else "float32"
    return load_policy_model(model, adapter, dtype, device)


class GrpoDriver(EpisodeDriver):
    observations = ("text", "mission")
    optional_observations = ("action_phrases", "success")

    def __init__(self, spec: GrpoSpec, seed: int) -> None:
        import torch

        from llmrl.learner.adapters import base_model_dir
        from llmrl.recipes.grpo.policy import PhrasePolicy

        base = spec.hub_model or str(base_model_dir(spec.model))
        model, tokenizer = cached_policy_model(base, spec.adapter, spec.device)
        self.name = spec.model if spec.adapter is None else f"{spec.model}+{spec.adapter}"
        self.policy = PhrasePolicy(
            model,
            tokenizer,
            (),
            greedy=spec.greedy,
            temperature=spec.temperature,
            generator=torch.Generator().manual_seed(seed),
        )

    def act(self, observation: dict[str, Any], t: int) -> Decision:
        from llmrl.recipes.grpo.policy import PhraseTrie

        text, mission = str(observation["text"]), str(observation["mission"])
        with _GENERATING:
            if t == 0:
                phrases = env_phrases(observation)
                self.policy.trie = PhraseTrie(self.policy.tokenizer, phrases)
                self.policy.start(phrases, mission, text)
            else:
                self.policy.observe(text)
            turn = self.policy.act()
        call = LlmCall(
            t=t,
            messages=[],  # the transcript is in the episode's steps; not repeated per call
            response=turn.phrase,
            parsed=[turn.phrase],
            model=self.name,
            prompt_tokens=turn.context_tokens,
            completion_tokens=len(turn.tokens),
        )
        return Decision(skill=turn.phrase, llm_calls=[call])


class GrpoSpec(PolicySpec):
    """A spec is request data (a run's `policy`, a queued episode job): it names the base model
    as the gateway's settings do and the adapter as a version this project saved, so a worker
    never opens a path a request chose, nor unpickles what it did not write."""

    kind: Literal["grpo"] = GRPO
    model: ModelName = Field(..., description="the base model's gateway name (its weights)")
    hub_model: str | None = Field(
        None,
        pattern=r"^[A-Za-z0-9][A-Za-z0-9._-]*/[A-Za-z0-9][A-Za-z0-9._-]*$",
        max_length=200,
        description="instead: a Hugging Face hub id (the GPU option `hf_model`, downloaded)",
    )
    adapter: ArtifactRef | None = Field(
        None, description="a GRPO adapter version this project saved (None: the base model)"
    )
    greedy: bool = Field(True, description="argmax tokens (else sample, seeded per episode)")
    temperature: float = Field(1.0, gt=0, le=10_000, description="sampling temperature")
    device: Literal["cpu", "cuda"] = "cpu"


@registry.register_driver(
    GRPO, "GRPO: an LLM generates an action phrase per turn of one transcript", spec=GrpoSpec
)
def _grpo_driver(spec: GrpoSpec, resources: RolloutResources, job: EpisodeJob) -> Any:
    return GrpoDriver(spec, seed=job.seed)
