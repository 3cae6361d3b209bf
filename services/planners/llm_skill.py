"""A planner that asks a language model, through the gateway, for the next skills.

Two modes, because models differ in what they can do:

* `generate`: for capable chat models. The observation goes into a prompt with few-shot
  examples; the answer is parsed into skills by a `SkillGrammar`. An answer that is not a
  valid plan is shown back to the model with a correction, at most `max_attempts` times in
  all; if none parses, the plan is empty and the caller decides (When2Ask explores).
* `score`: for small local models that cannot write plans reliably (SmolLM2-135M often
  answers "1. 2. 3."). The model scores every skill that is feasible now as a
  continuation of the prompt, in one batched gateway call; the best one is the plan.

`temperature` > 0 makes the planner sample, as LLM planners are usually run: in score mode the
plan is drawn from the softmax of the scores / temperature (the planner's own generator,
seeded by `seed`); in generate mode the gateway samples, with a seed drawn from that generator
per query (so answers stay reproducible and cacheable). Asking again can then change the plan.

Every query is returned in `Plan.llm_calls`, with tokens and cost as the gateway's ledger
counted them, so episodes record exactly what was asked and what it cost.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any, ClassVar, Literal

import numpy as np

from llmrl.common.episodes import LlmCall
from llmrl.planners.base import Plan, Planner, observation_text
from llmrl.planners.plan_parsing import SkillGrammar

# Builds the chat prompt from one env's observation entries.
PromptBuilder = Callable[[dict[str, Any]], list[dict[str, str]]]

CORRECTION = (
    "That is not a valid plan. Answer again with skills only, one per line, each of the form "
    "{forms}."
)


class LlmSkillPlanner(Planner):
    """Asks a language model through the gateway; generate-and-parse or score-candidates."""

    observations = ("text", "feasible_skills")
    uses_llm = True
    seeded: ClassVar[bool] = True

    def __init__(
        self,
        llm: Any,
        prompt: PromptBuilder,
        grammar: SkillGrammar,
        mode: Literal["generate", "score"] = "generate",
        model: str | None = None,
        run_id: str = "default",
        tag: str = "planner",
        max_attempts: int = 3,
        max_tokens: int = 64,
        score_norm: Literal["sum", "mean"] = "sum",
        skill_forms: str = "'explore', 'go to the <colour> <object>', "
        "'pick up the <colour> <object>', 'toggle the <colour> <object>'",
        temperature: float = 0.0,
        seed: int = 0,
    ) -> None:
        if not 0.0 <= temperature <= 10.0:
            raise ValueError(f"temperature must be in [0, 10], got {temperature}")
        if mode not in ("generate", "score"):
            raise ValueError(f"mode must be 'generate' or 'score', got {mode!r}")
        if max_attempts < 1:
            raise ValueError(f"max_attempts must be at least 1, got {max_attempts}")
        self.llm = llm  # the gateway client (llmrl.llm_gateway.client)
        self.prompt = prompt
        self.grammar = grammar
        self.mode = mode
        self.model = model
        self.run_id = run_id
        self.tag = tag
        self.max_attempts = max_attempts
        self.max_tokens = max_tokens
        self.score_norm = score_norm
        self.skill_forms = skill_forms
        self.temperature = float(temperature)
        self.rng = np.random.default_rng(seed)

    def plan(self, observation: dict[str, Any], t: int = 0) -> Plan:
        messages = self.prompt(observation)
        if self.mode == "score":
            return self._plan_by_scoring(messages, observation, t)
        return self._plan_by_generating(messages, t)

    def _plan_by_generating(self, messages: list[dict[str, str]], t: int) -> Plan:
        calls: list[LlmCall] = []
        conversation = list(messages)
        for _ in range(self.max_attempts):
            result = self.llm.chat(
                conversation,
                model=self.model,
                run_id=self.run_id,
                tag=self.tag,
                temperature=self.temperature,
                max_tokens=self.max_tokens,
                seed=int(self.rng.integers(2**31)) if self.temperature > 0 else None,
            )
            answer = result.texts[0] if result.texts else ""
            skills = self.grammar.parse_plan(answer)
            calls.append(LlmCall.from_result(t, conversation, answer, skills or [], result))
            if skills:
                return Plan(skills=skills, llm_calls=calls)
            conversation = [
                *conversation,
                {"role": "assistant", "content": answer},
                {"role": "user", "content": CORRECTION.format(forms=self.skill_forms)},
            ]
        return Plan(skills=[], llm_calls=calls)

    def _plan_by_scoring(
        self, messages: list[dict[str, str]], observation: dict[str, Any], t: int
    ) -> Plan:
        candidates = [
            s for s in observation_text(observation.get("feasible_skills", "")).split("\n") if s
        ]
        if not candidates:
            return Plan(skills=[])
        if len(candidates) == 1:  # nothing to choose: no need to pay for a query
            return Plan(skills=candidates, confidence=1.0)
        result = self.llm.score(
            messages, candidates, model=self.model, run_id=self.run_id, tag=self.tag
        )
        scores = list(result.logprobs)
        if self.score_norm == "mean":
            lengths = [max(len(tokens), 1) for tokens in result.token_logprobs]
            scores = [s / n for s, n in zip(scores, lengths, strict=True)]
        best, confidence = self._choose(scores)
        call = LlmCall.from_result(t, messages, candidates[best], [candidates[best]], result)
        call.info["candidates"] = dict(zip(candidates, scores, strict=True))
        call.info["confidence"] = confidence
        return Plan(skills=[candidates[best]], llm_calls=[call], confidence=confidence)

    def _choose(self, scores: list[float]) -> tuple[int, float | None]:
        """The best-scored candidate, or at temperature > 0 one drawn from softmax(s / T);
        with the probability the softmax gives the chosen one (at T = 1 when greedy)."""
        temperature = self.temperature if self.temperature > 0 else 1.0
        logits = np.asarray(scores, dtype=np.float64) / temperature
        greedy = max(range(len(scores)), key=scores.__getitem__)
        if not np.isfinite(logits).any():  # every candidate impossible: no distribution
            return greedy, None
        probs = np.exp(logits - logits[np.isfinite(logits)].max())
        probs /= probs.sum()
        chosen = greedy if self.temperature <= 0 else int(self.rng.choice(len(scores), p=probs))
        return chosen, float(probs[chosen])
