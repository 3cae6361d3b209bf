"""The When2Ask LLM planner (`when2ask-llm`): `LlmSkillPlanner` with the MiniGrid prompt and
skill grammar of `prompts.py`."""

from __future__ import annotations

from typing import Any, Literal

from llmrl.common.registry import registry
from llmrl.planners.llm_skill import LlmSkillPlanner
from llmrl.recipes.when2ask.prompts import GRAMMAR, planner_messages


@registry.register_planner(
    "when2ask-llm", "LLM planner for the When2Ask MiniGrid tasks (mode: generate or score)"
)
class When2AskLlmPlanner(LlmSkillPlanner):
    def __init__(
        self,
        llm: Any,
        mode: Literal["generate", "score"] = "score",
        model: str | None = None,
        run_id: str = "default",
        tag: str = "when2ask/planner",
        max_attempts: int = 3,
        temperature: float = 0.0,
        seed: int = 0,
    ) -> None:
        super().__init__(
            llm,
            planner_messages,
            GRAMMAR,
            mode=mode,
            model=model,
            run_id=run_id,
            tag=tag,
            max_attempts=max_attempts,
            temperature=temperature,
            seed=seed,
        )
