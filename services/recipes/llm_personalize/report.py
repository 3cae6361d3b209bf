"""The report phase: the llm-personalize table (success per stage, per scene and split), its
notes (data and training per stage) and its plot."""

from __future__ import annotations

import json
import math
from pathlib import Path
from typing import Any

import numpy as np

from llmrl.common.plots import pyplot
from llmrl.recipes.context import RunContext
from llmrl.recipes.llm_personalize.analysis import (
    paired_differences,
    phase_behaviour,
    shared_categories,
    target_verbs,
)
from llmrl.recipes.llm_personalize.config import ZERO_SHOT, LlmPersonalizeConfig, stage_name
from llmrl.recipes.results import Results
from llmrl.recipes.targets import ConfigResults, Verdict, judge

# Han et al. 2024, success rate (%) on held-out episodes: zero-shot, bootstrap, round 2
PAPER_LADDER = {"zero-shot": -3.6, "bootstrap": 17.6, "round 2": 29.6}


def llm_personalize_targets(results: ConfigResults) -> list[Verdict]:
    """The self-training ladder on held-out episodes: bootstrap above zero-shot, and round 2
    (or the last round, with fewer) above bootstrap; each step paired episode by episode (an
    episode's difference averaged over the seeds, which play the same episodes on the real
    scenes), or seed by seed where no samples were reported."""
    rows = [row for row in results.rows if row.key.get("episodes") == "held-out"]
    if not rows:
        return []
    row = next((r for r in rows if r.key.get("scene") == "all"), rows[0])
    stages = [column for column in row.values if column not in ("scene", "episodes")]
    rounds = [stage for stage in stages if stage.startswith("round ")]
    steps = [("bootstrap", ZERO_SHOT)]
    if rounds:
        last = "round 2" if "round 2" in rounds else rounds[-1]
        steps.append((last, "bootstrap"))
    verdicts = []
    for later, earlier in steps:
        sample = results.paired_samples(f"held-out/{later}", f"held-out/{earlier}")
        if sample is None:
            sample = results.paired(later, row.key, row.key, earlier_column=earlier)
        paper = None
        if later in PAPER_LADDER and earlier in PAPER_LADDER:
            gain = PAPER_LADDER[later] - PAPER_LADDER[earlier]
            paper = f"{gain:+.1f} ({PAPER_LADDER[earlier]} → {PAPER_LADDER[later]})"
        verdicts.append(
            judge(f"held out: {later} − {earlier}, success points", sample, ">", 0.0, paper)
        )
    return verdicts


VERBS = ("go_to_room", "go_to", "look_at", "pick_up", "place", "mission_complete")


class ReportPhase:
    """The recipe's report phase (mixed into `LlmPersonalize`)."""

    config: LlmPersonalizeConfig

    def stages(self) -> list[int | str]:
        return [ZERO_SHOT, *range(self.config.rounds + 1)]

    def base_model(self) -> str:
        """The model being personalised (a gateway model, or an OpenAI model id)."""
        cfg = self.config
        return cfg.openai_model if cfg.finetune_backend == "openai" else cfg.model

    def report(self, ctx: RunContext) -> dict[str, Any]:
        cfg = self.config
        stages = self.stages()
        evaluations = {stage_name(s): ctx.phase_outputs(f"evaluate/{s}") for s in stages}
        rows = stage_rows(evaluations)
        plot = "llm_personalize.png"
        plot_rounds(rows, list(evaluations), ctx.plot_path(plot))
        notes = [
            "success rate (%) = (correctly placed at the end - at the start) / misplaced at "
            "the start x 100, mean over episodes (can be negative); greedy decoding",
            f"model {self.base_model()}; train = training episodes "
            f"0..{cfg.train_eval_episodes - 1} of each scene, held-out = episodes "
            f"{cfg.train_episodes}..{cfg.train_episodes + cfg.eval_episodes - 1}",
        ]
        for k in range(self.config.rounds + 1):
            data = ctx.phase_outputs(f"annotate/{k}")
            train = ctx.phase_outputs(f"train/{k}")
            if "steps" in train:
                loss = (
                    f"loss {train['first_loss']:.3f} -> {train['last_loss']:.3f} in "
                    f"{train['steps']} steps ({train['seconds']} s)"
                )
            elif "openai_job_id" in train:
                loss = (
                    f"OpenAI job {train['openai_job_id']} -> {train['fine_tuned_model']} "
                    f"({train['trained_tokens']} tokens, {train['seconds']} s)"
                )
            else:
                loss = train.get("skipped", "")
            notes.append(f"{stage_name(k)}: {selection_note(data)}; {loss}")
        results = Results(
            title=f"llm-personalize: {self.base_model()} on Housekeep",
            rows=rows,
            columns=["scene", "episodes", *evaluations],
            notes=notes,
            plots=[plot],
            samples=self.episode_samples(ctx),
        )
        ctx.write_results(results)
        data = [selection_row(k, ctx.phase_outputs(f"annotate/{k}")) for k in range(cfg.rounds + 1)]
        (ctx.out_dir / "selection.json").write_text(json.dumps(data, indent=1))
        diagnostics = ctx.out_dir / "diagnostics.md"
        diagnostics.write_text(self.diagnostics(ctx, data, results.samples))
        ctx.add_artifact("diagnostics.md", diagnostics, kind="results")
        return {"results": "results.json", "rows": rows, "data": data}

    def diagnostics(
        self, ctx: RunContext, selection: list[dict[str, Any]], samples: dict[str, list[float]]
    ) -> str:
        """The counts behind the success rates (`analysis`): each step of the ladder episode
        by episode, the data of each stage, the skills completed per phase and split, what
        each SFT dataset teaches, and what the held-out episodes share with training."""
        cfg = self.config
        splits = [split for _, split, _ in self.eval_set()]
        by_stage: dict[str, list[float]] = {}
        for key, values in samples.items():  # "<split>/<stage>" per episode of that split
            split, _, stage = key.partition("/")
            by_stage.setdefault(stage, [0.0] * len(splits))
            picked = [i for i, s in enumerate(splits) if s == split]
            for index, value in zip(picked, values, strict=True):
                by_stage[stage][index] = value
        stages = list(by_stage)  # each against the one before it, and the target's step
        pairs = list(zip(stages[1:], stages[:-1], strict=False))
        rounds = [stage for stage in stages if stage.startswith("round ")]
        last = "round 2" if "round 2" in rounds else (rounds[-1] if rounds else None)
        if last is not None and (last, "bootstrap") not in pairs:
            pairs.append((last, "bootstrap"))
        differences = paired_differences(by_stage, splits, pairs)
        behaviour = []
        phases = ["demonstrate", *(f"collect/{k}" for k in range(1, cfg.rounds + 1))]
        phases += [f"evaluate/{stage}" for stage in self.stages()]
        for phase in phases:
            records = ctx.store.episodes(ctx.run_id, phase=phase)
            records.sort(key=lambda r: int(r.episode_id.rpartition("/")[2]))
            kinds = splits if phase.startswith("evaluate/") else ["train"] * len(records)
            if len(kinds) == len(records):
                behaviour += phase_behaviour(phase, records, kinds)
        verbs = []
        datasets = {"bootstrap": "bootstrap.jsonl"}
        datasets |= {f"round {k}": f"round-{k}.jsonl" for k in range(1, cfg.rounds + 1)}
        for name, file in datasets.items():
            path = ctx.out_dir / "datasets" / file
            if path.exists():
                counts = target_verbs(path)
                verbs.append({"dataset": name, **{verb: counts[verb] for verb in VERBS}})
        tables = [
            ("Paired per-episode differences of success rate (95% bootstrap interval)",
             differences),
            ("Data per stage", selection),
            ("Completed skills and placement changes per phase and split", behaviour),
            ("Target plan lines of each SFT dataset, by skill", verbs),
            ("Held-out misplaced objects whose category a training episode had misplaced",
             shared_categories(cfg)),
        ]  # fmt: skip
        return "\n".join(Results(title, rows).to_markdown() for title, rows in tables if rows)

    def episode_samples(self, ctx: RunContext) -> dict[str, list[float]]:
        """Each evaluation episode's success rate per split and stage ("held-out/bootstrap"),
        in the same episode order for every stage: every stage plays the same episodes, so
        the targets pair them episode by episode."""
        splits = [split for _, split, _ in self.eval_set()]
        samples: dict[str, list[float]] = {}
        for stage in self.stages():
            records = sorted(
                ctx.store.episodes(ctx.run_id, phase=f"evaluate/{stage}"),
                key=lambda r: int(r.episode_id.rpartition("/")[2]),
            )
            if len(records) != len(splits):  # not evaluated in full: nothing to pair
                continue
            for split, record in zip(splits, records, strict=True):
                key = f"{split}/{stage_name(stage)}"
                samples.setdefault(key, []).append(float(record.metrics["success_rate"]))
        return samples


def selection_row(k: int, annotate: dict[str, Any]) -> dict[str, Any]:
    """What one annotate phase made: queries seen, episodes that raised placements, examples."""
    stats = annotate.get("stats", {})
    return {
        "stage": stage_name(k),
        "episodes": stats.get("episodes"),
        "queries": stats.get("queries"),
        "episodes_with_placement_gain": stats.get("episodes_with_placement_gain"),
        "episodes_with_examples": stats.get("episodes_with_examples"),
        "examples": annotate.get("examples", stats.get("examples")),
        "selection": stats.get("selection"),
    }


def selection_note(annotate: dict[str, Any]) -> str:
    stats = annotate.get("stats", {})
    examples = annotate.get("examples", stats.get("examples"))
    if stats.get("kind") != "self_training":
        return f"{examples} SFT examples from {stats.get('episodes', '?')} demonstrations"
    return (
        f"{examples} SFT examples selected (by {stats.get('selection', 'query')}) from "
        f"{stats.get('queries')} queries of {stats.get('episodes')} collected episodes, "
        f"{stats.get('episodes_with_placement_gain')} of which raised correct placements "
        f"(mean gain {stats.get('mean_episode_placement_gain', 0.0):.2f})"
    )


def stage_rows(evaluations: dict[str, dict[str, Any]]) -> list[dict[str, Any]]:
    """One row per scene and split (plus "all" per split): the success rate of each stage.

    `evaluations`: stage label -> the outputs of its evaluate phase (`groups` keyed
    "<scene>|<split>", each with `success_rate` and `episodes`).
    """
    keys: list[str] = []
    for outputs in evaluations.values():
        keys += [key for key in outputs["groups"] if key not in keys]
    rows = []
    for key in keys:
        scene, _, split = key.partition("|")
        row: dict[str, Any] = {"scene": scene, "episodes": split}
        for stage, outputs in evaluations.items():
            group = outputs["groups"].get(key)
            row[stage] = group["success_rate"] if group else math.nan
        rows.append(row)
    scenes = {row["scene"] for row in rows}
    if len(scenes) > 1:  # mean over scenes, weighted by episodes
        for split in dict.fromkeys(row["episodes"] for row in rows):
            row = {"scene": "all", "episodes": split}
            for stage, outputs in evaluations.items():
                groups = [g for k, g in outputs["groups"].items() if k.endswith(f"|{split}")]
                total = sum(g["episodes"] for g in groups)
                row[stage] = (
                    sum(g["success_rate"] * g["episodes"] for g in groups) / total
                    if total
                    else math.nan
                )
            rows.append(row)
    return rows


def plot_rounds(rows: list[dict[str, Any]], stages: list[str], path: str | Path) -> None:
    """Success rate per stage (zero-shot, bootstrap, round 1..K), a line per scene and split."""
    plt = pyplot()

    fig, ax = plt.subplots(figsize=(7, 4))
    x = np.arange(len(stages))
    for row in rows:
        style = "-" if row["episodes"] == "train" else "--"
        width = 2.5 if row["scene"] == "all" else 1.2
        values = [row.get(stage, math.nan) for stage in stages]
        ax.plot(x, values, style, marker="o", linewidth=width,
                label=f"{row['scene']} ({row['episodes']})")  # fmt: skip
    ax.axhline(0, color="grey", linewidth=0.8)
    ax.set_xticks(x, stages)
    ax.set_ylabel("success rate (%)")
    ax.set_title("LLM-Personalize on Housekeep: success per round")
    ax.legend(fontsize=7, loc="best")
    fig.tight_layout()
    fig.savefig(path, dpi=100)
    plt.close(fig)
