"""`llm-personalize`: align an LLM planner with a household's preferences (Han et al. 2024).

Per run, on the Housekeep simulator (real scenes from `data_dir`, or procedural houses):

    evaluate/zero-shot   the base model plans (greedy) on every evaluation episode
    demonstrate          the demonstrator plays the training episodes; its plans are logged
                         as the queries the LLM planner would have made
    annotate/0           annotator: bootstrapping SFT data (OpenAI chat JSONL + statistics)
    train/0              LoRA SFT -> adapter version 0 ("bootstrap")
    evaluate/0
    for k in 1..rounds:  self-training
      collect/k          the current model plans with sampling on the training episodes
                         (the first `collect_episodes` of each scene; `collect_samples`
                         seeded samples each, `collect_temperature`)
      annotate/k         annotator: the queries of the episodes that raised correct
                         placements (`selection=episode`; `query`: the placing queries
                         only), reward-scored and de-duplicated
      train/k            LoRA SFT from version k-1 on round k's data, replaying rounds
                         1..k-1 (`replay_rounds`) and the bootstrap data
                         (`replay_bootstrap`) -> version k
      evaluate/k
    report               per scene and split: success rate per stage; PNG plot per round

Every phase is persisted (outputs in the run store, episodes stored one by one), so a run
interrupted anywhere resumes at the first unfinished phase. Adapters are written where the
gateway finds them (`$LLMRL_HOME/adapters/<model>/<adapter>/<version>`) and served as
`<model>:<adapter>@<version>` without a restart.

Evaluation episodes per scene: "train" = training episodes 0..eval_episodes-1 (the ones
demonstrated and collected on), "held-out" = episodes train_episodes.. (never trained on).

Collection is reproducible: every collected episode's planner gets its own sampling seed
(from the run's `seed`, the round, the scene, the episode and the sample), so collecting again
with the same config gives the same episodes.

`finetune_backend=openai` personalises an OpenAI model instead (`openai_model`): each train
phase is a job on the OpenAI fine-tuning API (the same JSONL data, in one file; round k
continues from round k-1's fine-tune), and every stage is evaluated through the gateway's
`openai` backend under a name derived from the model id (`openai_models`).

    llmrl run llm-personalize rounds=2 train_episodes=10 eval_episodes=5
    llmrl run llm-personalize finetune_backend=openai rounds=1   # needs OPENAI_API_KEY

The recipe's code, by phase: `config.py`, `collect.py` (evaluate, demonstrate, collect),
`annotate.py` with `datasets.py` (the dataset rules, also the annotator's builders), `train.py`
and `report.py`; what plays the episodes: `driver.py` (policy kinds), `llm_planner.py` and
`demonstrator.py` (planners), `prompts.py` (the planner's prompt and answer format).
"""

from __future__ import annotations

from llmrl.common.registry import registry
from llmrl.recipes.base import Phase, Recipe
from llmrl.recipes.llm_personalize.annotate import AnnotatePhases
from llmrl.recipes.llm_personalize.collect import CollectPhases
from llmrl.recipes.llm_personalize.config import ZERO_SHOT, LlmPersonalizeConfig
from llmrl.recipes.llm_personalize.report import ReportPhase, llm_personalize_targets
from llmrl.recipes.llm_personalize.train import TrainPhases
from llmrl.recipes.targets import ConfigResults, Verdict


@registry.register_recipe(
    "llm-personalize", "LLM-Personalize: bootstrap an LLM planner, then iterative self-training"
)
class LlmPersonalize(CollectPhases, AnnotatePhases, TrainPhases, ReportPhase, Recipe):
    Config = LlmPersonalizeConfig

    @classmethod
    def targets(cls, results: ConfigResults) -> list[Verdict]:
        return llm_personalize_targets(results)

    config: LlmPersonalizeConfig

    def phases(self) -> list[Phase]:
        phases = [
            Phase(f"evaluate/{ZERO_SHOT}", self._evaluate(ZERO_SHOT), "the base model"),
            Phase("demonstrate", self.demonstrate, "demonstrations on the training episodes"),
            Phase("annotate/0", self._annotate(0), "bootstrap SFT data"),
            Phase("train/0", self._train(0), "LoRA SFT on demonstrations"),
            Phase("evaluate/0", self._evaluate(0), "the bootstrapped model"),
        ]
        for k in range(1, self.config.rounds + 1):
            phases += [
                Phase(f"collect/{k}", self._collect(k), "the current model, sampling"),
                Phase(f"annotate/{k}", self._annotate(k), "self-training selection"),
                Phase(f"train/{k}", self._train(k), "LoRA SFT on the selection"),
                Phase(f"evaluate/{k}", self._evaluate(k), f"round {k}"),
            ]
        phases.append(Phase("report", self.report, "per-round table and plot"))
        return phases
