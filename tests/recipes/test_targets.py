"""Targets as recipe code: verdicts from an experiment's report, judged once, over seeds."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

import llmrl.recipes.llm_personalize.recipe
import llmrl.recipes.when2ask.recipe  # noqa: F401 - registers the recipe
from llmrl.orchestrator.compare import RunData, build_report
from llmrl.recipes.results import Results
from llmrl.recipes.targets import ConfigResults, Row, Sample, Verdict, judge


def test_a_verdict_is_met_by_its_mean_and_beyond_noise_by_its_whole_interval():
    wide = judge("gain", Sample([-1.0, 9.0, 10.0, 12.0], "4 seeds"), ">=", 5.0)
    assert wide.met is True and wide.beyond_noise is False
    assert wide.status == "met, within noise"
    tight = judge("gain", Sample([6.0, 7.0, 8.0], "3 seeds"), ">=", 5.0)
    assert tight.met is True and tight.beyond_noise is True
    below = judge("queries", Sample([0.5, 0.6, 0.55], "3 seeds"), "<=", 0.2)
    assert below.met is False and below.beyond_noise is False
    assert below.missed_beyond_noise is True and below.status == "not met, beyond noise"
    # a miss is judged on its noise as a hit is: the interval reaching past the bar
    near = judge("gain", Sample([-1.0, 0.5, 2.0], "3 seeds"), ">", 1.0)
    assert near.met is False and near.status == "not met, within noise"
    assert judge("gain", Sample([-0.36], "1 seed"), ">", 0.0).status == (
        "not met, one value: noise unknown"
    )
    # two values' interval is their range: no noise is read from it, however far it lies
    two = judge("gain", Sample([-0.36, -0.2], "2 seeds"), ">", 0.0)
    assert two.missed_beyond_noise is None and two.status == "not met, 2 values: noise unknown"
    assert two.measured() == "-0.28"  # no range shown as if it were a 95% interval
    assert judge("gain", Sample([6.0, 7.0], "2 seeds"), ">", 0.0).beyond_noise is None
    one = judge("gain", Sample([7.0], "1 seed"), ">", 0.0)
    assert one.met is True and one.beyond_noise is None
    assert judge("gain", None, ">", 0.0).status == "not measured"
    assert Verdict.from_dict(tight.to_dict()) == tight


def test_a_verdict_compares_its_figure_as_printed_not_the_float_behind_it():
    gain = 0.6 - 0.4  # 0.19999999999999996: GLAM's quick run printed "0.2 | >= 0.2 | not met"
    assert gain < 0.2
    verdict = judge("glam - zero-shot", Sample([gain], "1 seed"), ">=", 0.2)
    assert verdict.measured() == "0.2" and verdict.met is True
    assert judge("gain", Sample([0.1 + 0.2], "1 seed"), "<=", 0.3).met  # 0.30000000000000004
    # a difference the printed digits show still decides
    assert judge("gain", Sample([0.199], "1 seed"), ">=", 0.2).met is False
    interval = judge("gain", Sample([0.6 - 0.4, 0.6 - 0.4, 0.3], "3 seeds"), ">=", 0.2)
    assert interval.low == pytest.approx(0.2) and interval.beyond_noise is True


def test_paired_differences_are_taken_within_each_seed_the_rows_share():
    rows = [
        Row({"method": "a"}, [0, 1, 2], {"method": ["a"] * 3, "score": [10, 20, 30]}),
        Row({"method": "b"}, [0, 1, 3], {"method": ["b"] * 3, "score": [1, 2, 3]}),
    ]
    results = ConfigResults("cfg", rows)
    sample = results.paired("score", {"method": "a"}, {"method": "b"})
    assert sample is not None and sample.values == [9.0, 18.0]  # seeds 0 and 1 only
    assert results.paired("score", {"method": "a"}, {"method": "missing"}) is None


def _when2ask_run(seed: int, learned: float, best_rule: float) -> RunData:
    def row(method: str, success: float, queries: float) -> dict:
        return {"task": "KeyInBox", "method": method, "success_%": success, "queries/ep": queries}

    rows = [
        row("learned", learned, 3.0),
        row("always", 70.0, 18.0),
        row("forced-only", best_rule, 1.6),
        row("news-or-skill-end", 55.0, 7.0),
    ]
    config = {"envs": ["KeyInBox"], "seed": seed}
    return RunData(f"w2a-{seed}", "when2ask", config, "completed", Results("when2ask", rows))


def test_when2ask_judges_the_gain_over_the_best_fixed_rule_over_seeds(tmp_path: Path):
    runs = [_when2ask_run(s, learned, 77.0) for s, learned in enumerate([83.0, 84.0, 82.5, 83.5])]
    report = build_report(runs, tmp_path, "when2ask seeds", plots=False)
    verdicts = {v["target"]: v for v in report["verdicts"]}
    gain = verdicts["KeyInBox: learned − best fixed rule (forced-only), success points"]
    assert gain["n"] == 4 and gain["mean"] == pytest.approx(6.25)
    assert gain["met"] is True and gain["beyond_noise"] is True
    assert gain["paper"] == "+0 points (Table 1)"  # learned 100, always-ask 100 there
    share = verdicts["KeyInBox: learned's queries/ep as a share of always-ask's"]
    assert share["mean"] == pytest.approx(3.0 / 18.0) and share["met"] is True
    # one task beaten, two needed: the status table's target is not met by this config
    tasks = next(v for v in report["verdicts"] if v["target"].startswith("tasks where"))
    assert tasks["mean"] == 1.0 and tasks["met"] is False
    stored = json.loads((tmp_path / "results.json").read_text())
    assert stored["verdicts"] == report["verdicts"]
    markdown = (tmp_path / "results.md").read_text()
    assert "## Targets" in markdown and "met, beyond noise" in markdown


def test_when2ask_within_noise_when_the_seeds_disagree(tmp_path: Path):
    runs = [_when2ask_run(s, learned, 77.0) for s, learned in enumerate([90.0, 76.0, 85.0])]
    report = build_report(runs, tmp_path, "noisy seeds", plots=False)
    gain = next(v for v in report["verdicts"] if "best fixed rule" in v["target"])
    assert gain["met"] is True and gain["beyond_noise"] is False  # mean +6, an interval below 5


def _personalize_run(seed: int, held_out: dict[str, list[float]]) -> RunData:
    means = {stage: sum(values) / len(values) for stage, values in held_out.items()}
    rows = [{"scene": "all", "episodes": "held-out", **means}]
    samples = {f"held-out/{stage}": values for stage, values in held_out.items()}
    results = Results("llm-personalize", rows, samples=samples)
    return RunData(f"lp-{seed}", "llm-personalize", {"seed": seed}, "completed", results)


def test_llm_personalize_pairs_the_ladder_episode_by_episode_over_seeds(tmp_path: Path):
    runs = [
        _personalize_run(
            seed,
            {
                "zero-shot": [0.0, -10.0, 0.0, 5.0],
                "bootstrap": [10.0, 0.0, 10.0, 10.0],
                "round 1": [10.0, 0.0, 10.0, 10.0],
                "round 2": [10.0, 0.0, 10.0, 10.0 + seed],
            },
        )
        for seed in range(3)
    ]
    report = build_report(runs, tmp_path, "ladder", plots=False)
    first, second = report["verdicts"]
    assert first["target"] == "held out: bootstrap − zero-shot, success points"
    assert first["n"] == 4  # four episodes, each played under every seed
    assert first["basis"] == "4 paired episodes, each averaged over 3 seed(s)"
    assert first["mean"] == pytest.approx(8.75) and first["beyond_noise"] is True
    assert first["paper"] == "+21.2 (-3.6 → 17.6)"
    assert second["target"] == "held out: round 2 − bootstrap, success points"
    assert second["mean"] == pytest.approx(0.25) and second["beyond_noise"] is False


def test_llm_personalize_falls_back_to_seed_pairs_without_samples(tmp_path: Path):
    runs = []
    for seed, (zero, boot) in enumerate([(-5.0, 0.0), (-3.0, 1.0)]):
        rows = [{"scene": "all", "episodes": "held-out", "zero-shot": zero, "bootstrap": boot}]
        results = Results("llm-personalize", rows)
        runs.append(RunData(f"lp-{seed}", "llm-personalize", {"seed": seed}, "completed", results))
    (verdict,) = build_report(runs, tmp_path, "no samples", plots=False)["verdicts"]
    assert verdict["basis"] == "2 seed(s), paired within each seed"
    assert verdict["mean"] == pytest.approx(4.5)


def _runs(recipe: str, tables: list[list[dict]]) -> list[RunData]:
    return [
        RunData(f"{recipe}-{seed}", recipe, {"seed": seed}, "completed", Results(recipe, rows))
        for seed, rows in enumerate(tables)
    ]


def test_glam_is_held_to_zero_shot_plus_a_fifth(tmp_path: Path):
    import llmrl.recipes.glam.recipe  # noqa: F401 - registers the recipe

    def table(glam: float, zero: float) -> list[dict]:
        return [
            {"method": "zero-shot", "test": "train", "success_rate": zero},
            {"method": "glam", "test": "train", "success_rate": glam},
            {"method": "random", "test": "train", "success_rate": 0.1},
        ]

    runs = _runs("glam", [table(0.54, 0.36), table(0.68, 0.34), table(0.62, 0.32)])
    verdicts = build_report(runs, tmp_path, "glam", plots=False)["verdicts"]
    over_zero = verdicts[0]
    assert over_zero["target"] == "glam − zero-shot, held-out success"
    assert over_zero["mean"] == pytest.approx((0.18 + 0.34 + 0.30) / 3)
    assert over_zero["met"] is True and over_zero["n"] == 3
    assert verdicts[1]["target"] == "glam − random, held-out success"


def test_grpo_run_in_parts_is_judged_as_one_config_paired_within_each_seed(tmp_path: Path):
    """GRPO against GLAM takes longer than one sitting per seed: the file runs each trained
    method in its own part (`methods`, the recipe's `part_keys`), each with the zero-shot
    model its gain per CPU-minute is measured against. A report takes the parts of a seed as
    one config: GRPO and GLAM paired within each seed, and the zero-shot row, which each part
    gives, counted once per seed."""
    import llmrl.recipes.grpo.recipe  # noqa: F401 - registers the recipe

    def part(seed: int, method: str, success: float, gain: float) -> RunData:
        rows = [
            {"method": "zero-shot", "test": "train", "success_rate": 0.2 + seed / 100,
             "gain_per_cpu_minute": None},
            {"method": method, "test": "train", "success_rate": success,
             "gain_per_cpu_minute": gain},
        ]  # fmt: skip
        config = {"env": "BabyAIText-GoToLocalS5N2", "methods": ["zero-shot", method]}
        results = Results("grpo", rows)
        return RunData(f"{method}-{seed}", "grpo", {**config, "seed": seed}, "completed", results)

    runs = [
        part(0, "glam", 0.5, 0.01), part(0, "grpo", 0.3, 0.002),
        part(1, "grpo", 0.4, 0.003), part(1, "glam", 0.6, 0.02),
        part(2, "glam", 0.7, 0.03),  # seed 2's GRPO part not run yet
    ]  # fmt: skip
    report = build_report(runs, tmp_path, "grpo", plots=False)
    assert report["configs"] == [{"config": "grpo", "recipe": "grpo", "seeds": [0, 1, 2]}]
    success, per_minute = report["verdicts"]
    assert success["target"] == "grpo − glam, held-out success"
    assert success["n"] == 2  # the seeds with both parts
    assert success["mean"] == pytest.approx(((0.3 - 0.5) + (0.4 - 0.6)) / 2)
    assert per_minute["mean"] == pytest.approx(((0.002 - 0.01) + (0.003 - 0.02)) / 2)
    zero = next(m for m in report["methods"] if m["row"]["method"] == "zero-shot")
    assert zero["seeds"] == [0, 1, 2]  # once per seed, though two parts gave it
    assert zero["metrics"]["success_rate"]["values"] == pytest.approx([0.2, 0.21, 0.22])


def test_ellm_is_held_above_no_reward_and_to_its_cache_rate(tmp_path: Path):
    import llmrl.recipes.ellm.recipe  # noqa: F401 - registers the recipe

    def table(ellm: float, none: float, hits: float) -> list[dict]:
        return [
            {
                "method": "ellm",
                "achievements_last10": ellm,
                "caption_cache_hit_rate_after_10pct": hits,
            },
            {
                "method": "none",
                "achievements_last10": none,
                "caption_cache_hit_rate_after_10pct": 0.0,
            },
        ]

    runs = _runs("ellm", [table(2.9, 1.0, 0.95), table(2.7, 0.9, 0.93)])
    gain, cache = build_report(runs, tmp_path, "ellm", plots=False)["verdicts"]
    assert gain["target"] == "ellm − none, achievements_last10" and gain["met"] is True
    assert cache["mean"] == pytest.approx(0.94) and cache["met"] is True


def test_kalm_judges_each_algorithm_on_the_two_target_levels(tmp_path: Path):
    import llmrl.recipes.kalm.recipe  # noqa: F401 - registers the recipe

    def table(gain: float) -> list[dict]:
        rows = []
        for level in ("training", "rephrased", "unseen-easy"):
            for data, rate in (("real", 0.3), ("real+imagined", 0.3 + gain)):
                rows.append(
                    {"algorithm": "cql", "data": data, "level": level, "success_rate": rate}
                )
        return rows

    runs = _runs("kalm", [table(0.12), table(0.09), table(0.10)])
    verdicts = build_report(runs, tmp_path, "kalm", plots=False)["verdicts"]
    assert [v["target"] for v in verdicts] == [
        "cql, rephrased: real+imagined − real, success",
        "cql, unseen-easy: real+imagined − real, success",
    ]
    assert all(v["met"] and v["beyond_noise"] for v in verdicts)
