"""The Housekeep LLM planner (LLM-Personalize, Han et al. 2024): plans through the gateway.

Two modes:

* `generate` (chat models, and the small local model once fine-tuned): the context goes into
  the Housekeep prompt (`prompts.build_messages`, the same prompt the fine-tuning data is
  built from); the answer is read by `parse_plan` into a
  multi-step plan. "mission complete" becomes the plan's last skill (the environment ends
  the episode when it is executed); lines that are no skill are kept verbatim when
  `charge_unparsable` is set, so that an executor charges each as a failed step
  (the `housekeep-planner` policy kind does), and dropped otherwise (the generic `planner`
  kind, which can only send skills). With `guided` (local models), the gateway's guided
  decoding keeps every line of the plan within the skills over names the agent knows
  (`skills_over` of the `known_house` observation): a small model can still choose badly,
  but it can no longer invent names or formats.
* `score`: the model scores every skill feasible now (privileged `feasible_skills`) as the
  reply to the same prompt, written as a one-step plan ("1. <skill>"); the best one is the
  plan.

Every query is reported in `Plan.llm_calls` with its prompt, answer, tokens and cost.
"""

from __future__ import annotations

from typing import Any, Literal

from llmrl.common.episodes import LlmCall
from llmrl.common.registry import registry
from llmrl.planners.base import Plan, Planner, observation_text
from llmrl.recipes.llm_personalize.prompts import build_messages, format_plan, parse_plan
from llmrl.simulator.envs.housekeep.skills import MISSION_COMPLETE, skills_over
from llmrl.simulator.envs.housekeep.state import KnownHouse

Mode = Literal["generate", "score"]


@registry.register_planner(
    "housekeep-llm", "LLM planner for Housekeep rearrangement (generate plans or score skills)"
)
class HousekeepLlmPlanner(Planner):
    uses_llm = True

    def __init__(
        self,
        llm: Any,
        model: str | None = None,
        mode: Mode = "generate",
        run_id: str = "default",
        tag: str = "housekeep/planner",
        few_shot: bool = True,
        max_tokens: int = 96,
        temperature: float = 0.0,
        seed: int | None = None,
        max_plan_length: int | None = None,
        charge_unparsable: bool = False,
        guided: bool = False,
        guided_max_lines: int = 8,
    ) -> None:
        if mode not in ("generate", "score"):
            raise ValueError(f"mode must be 'generate' or 'score', got {mode!r}")
        if max_tokens < 1:
            raise ValueError(f"max_tokens must be a positive integer, got {max_tokens}")
        if temperature < 0:
            raise ValueError(f"temperature must be >= 0, got {temperature}")
        if max_plan_length is not None and max_plan_length < 1:
            raise ValueError(f"max_plan_length must be positive or None, got {max_plan_length}")
        if not 1 <= guided_max_lines <= 64:
            raise ValueError(f"guided_max_lines must be in [1, 64], got {guided_max_lines}")
        self.llm = llm  # the gateway client (llmrl.llm_gateway.client)
        self.model = model
        self.mode = mode
        self.run_id = run_id
        self.tag = tag
        self.few_shot = few_shot
        self.max_tokens = max_tokens
        self.temperature = temperature
        self.seed = seed
        self.max_plan_length = max_plan_length
        self.charge_unparsable = charge_unparsable
        self.guided = guided and mode == "generate"
        self.guided_max_lines = guided_max_lines
        if mode == "score":
            self.observations: tuple[str, ...] = ("text", "feasible_skills")
        else:
            self.observations = ("text", "known_house") if self.guided else ("text",)
        self._queries = 0

    def reset(self) -> None:
        self._queries = 0

    def plan(self, observation: dict[str, Any], t: int = 0) -> Plan:
        messages = build_messages(observation_text(observation["text"]), few_shot=self.few_shot)
        self._queries += 1
        if self.mode == "score":
            return self._plan_by_scoring(messages, observation, t)
        return self._plan_by_generating(messages, t, self._guidance(observation))

    def _guidance(self, observation: dict[str, Any]) -> dict[str, Any] | None:
        if not self.guided:
            return None
        if "known_house" not in observation:
            raise KeyError(
                "housekeep-llm with guided=True needs the known_house observation "
                "(request it from the Housekeep environment)"
            )
        known = KnownHouse.from_json(observation_text(observation["known_house"]))
        max_lines = min(self.guided_max_lines, self.max_plan_length or self.guided_max_lines)
        return {"choices": skills_over(known), "numbered": True, "max_lines": max_lines}

    def _plan_by_generating(
        self, messages: list[dict[str, str]], t: int, guidance: dict[str, Any] | None
    ) -> Plan:
        sampled = self.temperature > 0
        # a sampled query gets its own seed (episode seed + query number): reproducible, and
        # two queries of one episode do not draw the same sample
        seed = None if self.seed is None or not sampled else self.seed * 1000 + self._queries
        result = self.llm.chat(
            messages,
            model=self.model,
            run_id=self.run_id,
            tag=self.tag,
            temperature=self.temperature,
            max_tokens=self.max_tokens,
            seed=seed,
            guided_lines=guidance,
        )
        answer = result.texts[0] if result.texts else ""
        if guidance is not None and result.finish_reasons[:1] == ["length"]:
            # max_tokens cut the last line short: the model never chose that text
            answer = answer.rsplit("\n", 1)[0] if "\n" in answer else ""
        parsed = parse_plan(answer)
        lines = parsed.lines if self.charge_unparsable else parsed.skills
        if self.max_plan_length is not None:
            lines = lines[: self.max_plan_length]
        steps = [*lines, MISSION_COMPLETE] if parsed.done else list(lines)
        call = LlmCall.from_result(t, messages, answer, parsed.skills, result)
        call.info.update(
            {"unparsable": parsed.unparsable, "done": parsed.done, "guided": guidance is not None}
        )
        return Plan(skills=steps, llm_calls=[call])

    def _plan_by_scoring(
        self, messages: list[dict[str, str]], observation: dict[str, Any], t: int
    ) -> Plan:
        if "feasible_skills" not in observation:
            raise KeyError(
                "housekeep-llm in score mode needs the feasible_skills observation "
                "(request it from the Housekeep environment)"
            )
        candidates = [s for s in observation_text(observation["feasible_skills"]).split("\n") if s]
        if len(candidates) <= 1:  # nothing to choose: no need to pay for a query
            return Plan(skills=candidates)
        # each candidate is scored as a one-step plan in the answer format ("1. <skill>"),
        # the form fine-tuning data teaches the model to start its answers with
        answers = [format_plan([skill]) for skill in candidates]
        result = self.llm.score(
            messages, answers, model=self.model, run_id=self.run_id, tag=self.tag
        )
        best = max(range(len(candidates)), key=lambda i: result.logprobs[i])
        call = LlmCall.from_result(t, messages, candidates[best], [candidates[best]], result)
        call.info["candidates"] = dict(zip(candidates, result.logprobs, strict=True))
        return Plan(skills=[candidates[best]], llm_calls=[call])
