"""`llmrl results check` (issue 71): a sweep made here against the experiment's kept report,
row by row, saying where each side ran and which cells differ."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from click.testing import CliRunner

from llmrl.cli import main
from llmrl.orchestrator.repeat_check import check_against_kept
from llmrl.orchestrator.stored_results import keep, stored_path
from llmrl.recipes.config import ConfigError

EXPERIMENT = (
    "description: the oracle planner on DoorKey\n"
    "claim: {statement: the oracle solves DoorKey, target: success 1, paper: none}\n"
    "recipe: evaluate\n"
    "config: {env: SimpleDoorKey, planner: oracle, episodes: 2}\n"
    "seeds: [0, 1]\n"
)


def _sweep(path: Path, out: Path, *overrides: str) -> None:
    result = CliRunner().invoke(
        main, ["sweep", "--config", str(path), "--out", str(out), "--quiet", *overrides]
    )
    assert result.exit_code == 0, result.output


@pytest.fixture(scope="module")
def kept_and_again(tmp_path_factory) -> tuple[Path, Path]:
    """An evaluate experiment swept and kept, then swept again into another out dir."""
    root = tmp_path_factory.mktemp("check")
    experiments = root / "recipes" / "evaluate" / "experiments"
    experiments.mkdir(parents=True)
    path = experiments / "trial.yaml"
    path.write_text(EXPERIMENT)
    _sweep(path, root / "first")
    keep(root / "first", path)
    _sweep(path, root / "again")
    return path, root / "again"


def test_the_same_file_swept_again_gives_the_kept_rows(kept_and_again):
    path, again = kept_and_again
    checks = check_against_kept(again, path)
    assert [check.same for check in checks] == [True, True]
    assert all(check.rows > 0 and "precision" not in check.here_on for check in checks)
    assert all("MKL_CBWR=" in check.here_on for check in checks), "the pins it ran with"
    result = CliRunner().invoke(main, ["results", "check", str(again), str(path)])
    assert result.exit_code == 0, result.output
    assert "yes" in result.output


def test_a_differing_cell_is_named_and_fails_the_check(kept_and_again, tmp_path):
    path, again = kept_and_again
    copy = tmp_path / "recipes" / "evaluate" / "experiments" / "trial.yaml"
    copy.parent.mkdir(parents=True)
    copy.write_text(path.read_text())
    report = json.loads(stored_path(path).read_text())
    row = report["runs"][1]["results"]["rows"][0]
    column = next(c for c, v in row.items() if isinstance(v, float))
    kept_value = row[column]
    row[column] = kept_value + 1e-12  # the last bits of one figure, as another CPU might give
    stored_path(copy).write_text(json.dumps(report))

    first, second = check_against_kept(again, copy)
    assert first.same and not second.same
    assert second.differences == [
        f"row 0, {column}: kept {kept_value + 1e-12!r}, here {kept_value!r}"
    ]
    result = CliRunner().invoke(main, ["results", "check", str(again), str(copy)])
    assert result.exit_code == 1
    assert f"row 0, {column}: kept" in result.output


def test_a_run_not_made_here_is_reported_not_matched(kept_and_again, tmp_path):
    path, _ = kept_and_again
    one_seed = tmp_path / "one"
    _sweep(path, one_seed, "seeds=[1]")
    checks = check_against_kept(one_seed, path)
    assert [check.here_on is None for check in checks] == [True, False]
    assert checks[1].same
    result = CliRunner().invoke(main, ["results", "check", str(one_seed), str(path)])
    assert result.exit_code == 0 and "not run here" in result.output


def test_a_file_without_kept_report_or_runs_is_refused_with_what_to_do(kept_and_again, tmp_path):
    path, again = kept_and_again
    bare = tmp_path / "bare.yaml"
    bare.write_text(EXPERIMENT)
    with pytest.raises(ConfigError, match="no kept report"):
        check_against_kept(again, bare)
    other = tmp_path / "other"
    _sweep(path, other, "episodes=3")
    with pytest.raises(ConfigError, match="llmrl sweep --config"):
        check_against_kept(other, path)


def test_the_across_cpus_bench_repeats_every_small_kept_file_and_another_cpus_fingerprint():
    """bench/across_cpus.py's choices (its sweeps take an hour: run by hand on each machine)."""
    import importlib.util

    from llmrl.common.numerics import cpu_pins
    from llmrl.common.provenance import cpu_model, isa_flags
    from llmrl.orchestrator.numerics_fingerprint import read_fingerprint

    bench = Path(__file__).resolve().parents[2] / "bench" / "across_cpus.py"
    spec = importlib.util.spec_from_file_location("across_cpus", bench)
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    files = module.small_files()
    assert {"glam/quick", "evaluate/demo", "when2ask/quick"} <= set(files)
    assert all(stored_path(module.experiment_path(name)).is_file() for name in files)
    kept = module.other_cpus_fingerprint()
    there = read_fingerprint(kept) if kept else None
    assert there is None or (there["cpu"], there.get("isa")) != (cpu_model(), isa_flags())
    # kept ones made unpinned or on another MKL branch are not another CPU's: never chosen
    assert there is None or there["numerics"]["pins"] == cpu_pins()


def test_the_replay_across_cpus_bench_replays_each_bundle_under_its_recorded_numerics():
    """bench/replay_across_cpus.py's choices: a bundle's settings from its provenance, and
    which bundles were made on another CPU (its replays take minutes: run by hand)."""
    import importlib.util

    from llmrl.common.provenance import cpu_model, isa_flags
    from llmrl.llm_gateway.replay_bundle import read_bundle

    bench = Path(__file__).resolve().parents[2] / "bench" / "replay_across_cpus.py"
    spec = importlib.util.spec_from_file_location("replay_across_cpus", bench)
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    kept = module.BUNDLES
    fused = read_bundle(kept / "kalm-quick-25a010da-s0-amd-compatible-fused.llmrl.json.gz")
    settings = module.recorded_environment(fused)
    assert settings["MKL_CBWR"] == "COMPATIBLE" and settings["LLMRL_ADAM"] == "fused"
    assert settings["LLMRL_PRECISION"] == "float32" and settings["ATEN_CPU_CAPABILITY"] == "avx2"
    assert settings["NPY_DISABLE_CPU_FEATURES"] == ""  # a pin added after it was made
    # made here: this CPU's model name and ISA flags; another of either is another CPU
    made_here = {"cpu": cpu_model(), "isa": isa_flags()}
    for provenance, elsewhere in [
        (made_here, False),
        ({**made_here, "isa": [*isa_flags(), "avx512f_not_here"]}, True),
        ({**made_here, "cpu": "Another CPU"}, True),
    ]:
        results = fused.results.model_copy(update={"provenance": provenance})
        assert module.made_elsewhere(fused.model_copy(update={"results": results})) is elsewhere
