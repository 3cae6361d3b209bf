"""Results generated, not typed (issue 53, item 4): an experiment's report is kept beside its
file only when the run store holds every run the file plans, and each recipe page's results
section is rendered from the kept reports; the committed pages must match them."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from click.testing import CliRunner

from llmrl.orchestrator.stored_results import (
    BEGIN,
    END,
    GLANCE_BEGIN,
    GLANCE_END,
    keep,
    render,
    stored_path,
)
from llmrl.recipes.config import ConfigError

EXPERIMENT = (
    "description: the oracle planner on DoorKey\n"
    "claim: {statement: the oracle solves DoorKey, target: success 1, paper: none}\n"
    "recipe: evaluate\n"
    "config: {env: SimpleDoorKey, planner: oracle, episodes: 2}\n"
)


def test_the_docs_results_sections_match_the_kept_reports():
    differing = render(check=True)
    assert not differing, f"run `llmrl results render`: {differing} differ from their reports"


@pytest.fixture(scope="module")
def swept(tmp_path_factory) -> tuple[Path, Path]:
    """An experiment file of the evaluate recipe, run by `llmrl sweep` over seeds 0 and 1."""
    from llmrl.cli import main

    root = tmp_path_factory.mktemp("kept")
    experiments = root / "recipes" / "evaluate" / "experiments"
    experiments.mkdir(parents=True)
    path = experiments / "trial.yaml"
    path.write_text(EXPERIMENT + "seeds: [0, 1]\n")
    out = root / "out"
    result = CliRunner().invoke(
        main, ["sweep", "--config", str(path), "--out", str(out), "--quiet"]
    )
    assert result.exit_code == 0, result.output
    return path, out


def test_keep_stores_the_report_of_every_run_the_file_plans(swept):
    path, out = swept
    kept = json.loads(keep(out, path).read_text())
    assert kept["experiment"] == "evaluate-trial" and kept["claim"]["statement"].startswith(
        "the oracle"
    )
    assert [c["seeds"] for c in kept["configs"]] == [[0, 1]]
    assert sorted(run["seed"] for run in kept["runs"]) == [0, 1]
    assert kept["tables"][0]["rows"], "the recipe's table over seeds"
    assert "curves" not in kept  # tables, verdicts and runs (with their own curves) only


def test_keep_refuses_a_file_whose_runs_are_not_all_there(swept, tmp_path):
    _, out = swept
    grown = tmp_path / "grown.yaml"
    grown.write_text(EXPERIMENT + "seeds: [0, 1, 2]\n")  # seed 2 never ran
    with pytest.raises(ConfigError, match="seed 2"):
        keep(out, grown)
    other = tmp_path / "other.yaml"
    other.write_text(EXPERIMENT.replace("episodes: 2", "episodes: 3") + "seeds: [0]\n")
    with pytest.raises(ConfigError, match="no completed run"):  # same seeds, another config
        keep(out, other)
    assert not stored_path(grown).exists() and not stored_path(other).exists()


def test_render_writes_a_pages_results_section_from_its_reports(swept, tmp_path):
    path, out = swept
    keep(out, path)
    docs = tmp_path / "docs"
    docs.mkdir()
    page = docs / "evaluate.md"
    page.write_text(f"# evaluate\n\n## Results\n{BEGIN}\n{END}\n\nMore text.\n")
    recipes = path.parent.parent.parent
    assert render(recipes, docs) == [page]
    text = page.read_text()
    assert "### `trial.yaml`" in text and "the oracle planner on DoorKey" in text
    assert "llmrl sweep --config" in text and text.endswith("More text.\n")
    assert render(recipes, docs, check=True) == []  # rendered: nothing differs
    page.write_text(text.replace("| config |", "| typed by hand |"))
    assert render(recipes, docs, check=True) == [page]  # a hand edit is caught


def test_render_puts_each_reports_plots_on_its_page(swept, tmp_path):
    path, out = swept
    keep(out, path)
    docs = tmp_path / "docs"
    docs.mkdir()
    page = docs / "evaluate.md"
    page.write_text(f"# evaluate\n{GLANCE_BEGIN}\n{GLANCE_END}\n## Results\n{BEGIN}\n{END}\n")
    recipes = path.parent.parent.parent
    render(recipes, docs)
    opening = page.read_text().partition(GLANCE_END)[0]  # the page opens with the figure
    assert "llmrl sweep --config" in opening and "trial.yaml" in opening
    assert "(figures/evaluate/trial-headline.png)" in opening
    figure = docs / "figures" / "evaluate" / "trial-headline.png"
    assert figure.read_bytes().startswith(b"\x89PNG")  # a PNG, written beside the pages
    assert "![trial.yaml: headline figures](figures/evaluate/trial-headline.png)" in (
        page.read_text()
    )
    assert render(recipes, docs, check=True) == []
    figure.unlink()
    assert render(recipes, docs, check=True) == [page]  # a page whose figure is missing


def test_llmrl_results_keep_names_what_is_missing(swept, tmp_path):
    from llmrl.cli import main

    _, out = swept
    grown = tmp_path / "grown.yaml"
    grown.write_text(EXPERIMENT + "seeds: [0, 5]\n")
    result = CliRunner().invoke(main, ["results", "keep", str(out), str(grown)])
    assert result.exit_code == 2 and "seed 5" in result.output


def test_an_experiment_kept_in_parts_adds_each_part_to_the_kept_runs(swept, tmp_path):
    """One seed per sitting: `keep --partial` stores what is done, a later sweep of the
    missing seeds (`seeds=[...]` over the file) completes the kept report."""
    from llmrl.cli import main

    _, out = swept
    experiments = tmp_path / "recipes" / "evaluate" / "experiments"
    experiments.mkdir(parents=True)
    grown = experiments / "grown.yaml"
    grown.write_text(EXPERIMENT + "seeds: [0, 1, 2]\n")
    refused = CliRunner().invoke(main, ["results", "keep", str(out), str(grown)])
    assert (
        refused.exit_code == 2 and "seeds=[2]" in refused.output and "--partial" in refused.output
    )
    part = json.loads(keep(out, grown, partial=True).read_text())
    assert part["planned"] == 3 and part["missing"] == ["evaluate seed 2"]
    assert [c["seeds"] for c in part["configs"]] == [[0, 1]]
    docs = tmp_path / "docs"
    docs.mkdir()
    page = docs / "evaluate.md"
    page.write_text(f"# evaluate\n{BEGIN}\n{END}\n")
    render(tmp_path / "recipes", docs)
    assert "**Partial: 2 of its 3 planned runs kept so far**" in page.read_text()

    rest = tmp_path / "rest"  # another sitting: only the missing seed, into a new out dir
    result = CliRunner().invoke(
        main, ["sweep", "--config", str(grown), "seeds=[2]", "--out", str(rest), "--quiet"]
    )
    assert result.exit_code == 0, result.output
    whole = json.loads(keep(rest, grown).read_text())
    assert whole["missing"] == [] and [c["seeds"] for c in whole["configs"]] == [[0, 1, 2]]
    assert sorted(run["seed"] for run in whole["runs"]) == [0, 1, 2]
    render(tmp_path / "recipes", docs)
    assert "Partial" not in page.read_text() and "seeds [0, 1, 2]" in page.read_text()
    # the parts' rows are the runs' own: the same as keeping one out dir with all three
    again = json.loads(keep(rest, grown).read_text())
    assert again["tables"] == whole["tables"]


def test_a_partial_keep_needs_at_least_one_run(swept, tmp_path):
    _, out = swept
    other = tmp_path / "other.yaml"
    other.write_text(EXPERIMENT.replace("episodes: 2", "episodes: 3") + "seeds: [0]\n")
    with pytest.raises(ConfigError, match="no completed run"):
        keep(out, other, partial=True)


def test_a_keep_refuses_to_drop_kept_runs_whose_config_changed(swept, tmp_path):
    """A partial report kept, then the file (or a recipe default) changes: keeping another
    part would silently drop the first; it is refused naming the run and the key."""
    _, out = swept
    experiments = tmp_path / "recipes" / "evaluate" / "experiments"
    experiments.mkdir(parents=True)
    changing = experiments / "changing.yaml"
    changing.write_text(EXPERIMENT + "seeds: [0, 1, 2]\n")
    stored = keep(out, changing, partial=True)
    before = stored.read_text()
    changing.write_text(EXPERIMENT.replace("episodes: 2", "episodes: 3") + "seeds: [0, 1, 2]\n")
    with pytest.raises(ConfigError, match=r"no longer plans.*episodes: 2 -> 3"):
        keep(out, changing, partial=True)
    assert stored.read_text() == before  # nothing kept was lost


def test_results_list_says_how_far_each_experiment_file_is_kept(swept, tmp_path):
    from llmrl.cli import main
    from llmrl.orchestrator.stored_results import experiment_state

    _, out = swept
    experiments = tmp_path / "recipes" / "evaluate" / "experiments"
    experiments.mkdir(parents=True)
    grown = experiments / "grown.yaml"
    grown.write_text(EXPERIMENT + "seeds: [0, 1, 2]\n")
    assert experiment_state(grown)["kept_runs"] == 0
    keep(out, grown, partial=True)
    state = experiment_state(grown)
    assert (state["kept_runs"], state["planned"], state["seeds_to_run"]) == (2, 3, [2])
    listed = CliRunner().invoke(main, ["results", "list", "llm-personalize"])
    assert listed.exit_code == 0, listed.output
    assert "llm_personalize/ladder-seeds.yaml" in listed.output and " of 3 " in listed.output
    unknown = CliRunner().invoke(main, ["results", "list", "nope"])
    assert unknown.exit_code == 2 and "no experiment files for recipe 'nope'" in unknown.output


def test_a_kept_report_says_where_and_how_long_its_runs_ran(swept, tmp_path):
    """The same seed can give another figure on another CPU (a LoRA fine-tune's floats follow
    its kernels): each kept run carries the machine and software it ran on and its time in
    phases, the page says so, and `results list` puts the time beside the file's budget."""
    from llmrl.common.provenance import describe, machine_provenance
    from llmrl.orchestrator.stored_results import experiment_state

    _, out = swept
    experiments = tmp_path / "recipes" / "evaluate" / "experiments"
    experiments.mkdir(parents=True)
    timed = experiments / "timed.yaml"
    timed.write_text(EXPERIMENT + "seeds: [0, 1]\n")
    kept = json.loads(keep(out, timed).read_text())
    here = machine_provenance()
    for run in kept["runs"]:
        provenance = run["results"]["provenance"]
        assert provenance["mode"] == "embedded" and provenance["cpu"] == here["cpu"]
        assert provenance["packages"]["llmrl"] and provenance["cores"] >= 1
        assert run["seconds"] >= 0
        assert provenance["numerics"]["precision"] == "float32"  # stated, not the CPU's pick
    assert experiment_state(timed)["minutes_per_run"] is not None
    docs = tmp_path / "docs"
    docs.mkdir()
    page = docs / "evaluate.md"
    page.write_text(f"# evaluate\n{BEGIN}\n{END}\n")
    render(tmp_path / "recipes", docs)
    text = page.read_text()
    measured = describe(kept["runs"][0]["results"]["provenance"])
    assert ", fp32, CPU paths pinned, torch" in measured
    assert f"Measured on: {measured} (seeds 0, 1)" in text and "min per run" in text
    # a second keep of the same runs keeps their times (read back from the stored report)
    again = json.loads(keep(out, timed).read_text())
    assert [run["seconds"] for run in again["runs"]] == [run["seconds"] for run in kept["runs"]]


def test_a_report_kept_before_runs_recorded_their_machine_renders_as_before():
    from llmrl.orchestrator.stored_results import measured_on

    assert measured_on([{"run_id": "a", "seed": 0, "results": {"rows": []}}]) == ""
    line = measured_on(
        [
            {"seed": 0, "seconds": 600, "results": {"provenance": {"cpu": "X", "cores": 2}}},
            {"seed": 1, "results": {}},
        ]
    )
    assert line == (
        "Measured on: X, 2 cores, fp32 (derived from its CPU) (seeds 0); 1 run(s) kept before "
        "runs recorded it; 10 min per run (1 of 2 timed)."
    )


def test_a_report_whose_runs_mixed_precisions_says_so():
    from llmrl.orchestrator.stored_results import measured_on

    epyc = {"cpu": "AMD EPYC", "cores": 2}  # kept before numerics were recorded: bf16 there
    pinned = {**epyc, "numerics": {"precision": "float32", "pins": {"MKL_CBWR": "AVX2"}}}
    line = measured_on(
        [
            {"seed": 0, "results": {"provenance": epyc}},
            {"seed": 1, "results": {"provenance": pinned}},
        ]
    )
    assert "AMD EPYC, 2 cores, bf16 where native (derived from its CPU) (seeds 0)" in line
    assert "AMD EPYC, 2 cores, fp32, CPU paths pinned (seeds 1)" in line
    assert "mixed precisions (bf16 where native, fp32, CPU paths pinned)" in line
    same = measured_on([{"seed": s, "results": {"provenance": pinned}} for s in (0, 1)])
    assert "mixed" not in same


def fake_housekeep_copy(home: Path) -> Path:
    """Enough of a Housekeep copy under `home` for configs naming Ihlen_1_int to validate."""
    copy = home / "data" / "housekeep"
    (copy / "episodes" / "val").mkdir(parents=True)
    (copy / "data.npy").write_bytes(b"")
    (copy / "episodes" / "val" / "Ihlen_1_int.json.gz").write_bytes(b"")
    return copy


def test_kept_reports_hold_no_machines_data_folder_and_match_where_the_data_lies_elsewhere(
    tmp_path, monkeypatch
):
    """The Housekeep data's folder is the machine's, not the run's: the kept LLM-Personalize
    reports write it as $LLMRL_HOUSEKEEP_DATA, and their runs count as kept on a machine
    whose copy lies in another folder than the one they were made with."""
    from llmrl.orchestrator.experiment_files import RECIPES_DIR
    from llmrl.orchestrator.stored_results import canonical_config, experiment_state

    monkeypatch.delenv("LLMRL_HOUSEKEEP_DATA", raising=False)
    monkeypatch.setenv("LLMRL_HOME", str(tmp_path))
    copy = fake_housekeep_copy(tmp_path)
    quick = RECIPES_DIR / "llm_personalize" / "experiments" / "quick.yaml"
    kept = json.loads(stored_path(quick).read_text())["runs"]
    assert {run["settings"]["data_dir"] for run in kept} == {"$LLMRL_HOUSEKEEP_DATA"}
    assert experiment_state(quick)["to_run"] == []
    # a folder that is not where llmrl finds the data stays a folder: another copy, another run
    here = {**kept[0]["settings"], "data_dir": str(copy)}
    elsewhere = {**kept[0]["settings"], "data_dir": str(tmp_path / "other")}
    assert canonical_config(here) == canonical_config(kept[0]["settings"])
    assert canonical_config(elsewhere) != canonical_config(kept[0]["settings"])


def test_a_kept_configs_data_placeholder_is_the_data_llmrl_finds(tmp_path, monkeypatch):
    from llmrl.orchestrator.stored_results import RECIPES_DIR, experiment_state
    from llmrl.recipes.config import validate_config

    monkeypatch.delenv("LLMRL_HOUSEKEEP_DATA", raising=False)
    monkeypatch.setenv("LLMRL_HOME", str(tmp_path))
    settings = {"data_dir": "$LLMRL_HOUSEKEEP_DATA", "scenes": ["Ihlen_1_int"]}
    # no data here: the placeholder stays (a run fails saying how to get the data), and the
    # file's planned runs are the kept ones, so `llmrl results list` counts them kept
    assert validate_config("llm-personalize", settings).data_dir == "$LLMRL_HOUSEKEEP_DATA"
    files = sorted((RECIPES_DIR / "llm_personalize" / "experiments").glob("*.yaml"))
    kept_files = [path for path in files if stored_path(path).is_file()]
    assert kept_files
    for path in kept_files:
        kept = len(json.loads(stored_path(path).read_text())["runs"])
        assert experiment_state(path)["kept_runs"] == kept, path.name
    copy = fake_housekeep_copy(tmp_path)
    assert validate_config("llm-personalize", settings).data_dir == str(copy.resolve())


def test_seeds_kept_with_the_data_placeholder_and_made_here_are_one_config(tmp_path, monkeypatch):
    """A seed made here (its config holding this machine's data folder) and seeds kept before
    (the folder written as $LLMRL_HOUSEKEEP_DATA) are one config in a report, not two."""
    from llmrl.orchestrator.compare import RunData, group_runs

    monkeypatch.setenv("LLMRL_HOUSEKEEP_DATA", str(tmp_path))
    kept = {"data_dir": "$LLMRL_HOUSEKEEP_DATA", "rounds": 0}
    runs = [
        RunData("kept-s0", "llm-personalize", {**kept, "seed": 0}, "completed"),
        RunData("here-s1", "llm-personalize", {**kept, "data_dir": str(tmp_path), "seed": 1}, ""),
        RunData("other-s0", "llm-personalize", {**kept, "rounds": 1, "seed": 0}, "completed"),
    ]
    groups = group_runs(runs)
    assert [[run.run_id for run in group.runs] for group in groups] == [
        ["kept-s0", "here-s1"],
        ["other-s0"],
    ]
    assert [group.label for group in groups] == ["rounds=0", "rounds=1"]


def test_a_page_opens_with_the_file_that_says_it_is_the_status_figure():
    """At most one experiment file per recipe says `status: true`, its kept report says so too
    (`keep` copies it, as it does the budget), and that report opens the page even where
    another report keeps as many runs (LLM-Personalize's ladder over three seeds, not a
    lever's report over three)."""
    from llmrl.orchestrator.experiment_files import RECIPES_DIR, load_experiment
    from llmrl.orchestrator.stored_results import status_report, stored_reports

    for package in sorted(p.name for p in RECIPES_DIR.iterdir() if (p / "experiments").is_dir()):
        files = sorted((RECIPES_DIR / package / "experiments").glob("*.yaml"))
        status = {f: load_experiment(f).status for f in files}
        assert sum(status.values()) <= 1, f"{package}: several status files"
        for file, says in status.items():
            if stored_path(file).is_file():
                kept = json.loads(stored_path(file).read_text())
                assert kept.get("status", False) == says, f"{file.name}: keep it again"
    reports = stored_reports()["llm_personalize"]
    shallower = next(r for r in reports if r["file"].endswith("bootstrap-shallower-lora.yaml"))
    ladder = next(r for r in reports if r["file"].endswith("ladder-seeds.yaml"))
    assert len(shallower["runs"]) == len(ladder["runs"])
    assert status_report(reports) is ladder


def test_a_pages_opening_says_when_its_report_is_partial():
    """A file kept in parts opens its page before all its runs are in: the opening says so."""
    from llmrl.orchestrator.stored_results import glance_section

    report = {
        "file": "services/recipes/grpo/experiments/vs-glam.yaml",
        "kept": "2026-12-07",
        "planned": 9,
        "runs": [{"run_id": "a"}],
        "missing": ["methods=['base'] seed 0"],
        "verdicts": [],
    }
    assert "partial: 1 of its 9 planned runs" in glance_section(report, [])
    assert "partial" not in glance_section({**report, "missing": []}, [])
