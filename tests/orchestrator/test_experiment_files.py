"""Experiments kept as data (issue 53): every reported experiment file validates against its
recipe's config, a bad key or value names the file and the key, and `llmrl sweep --config FILE`
runs one, its arguments over the file's settings. The research notes' files (research/, issue
72) are history: each names a commit of this repository, whose schema reads it, not today's."""

from __future__ import annotations

import os
import shutil
import subprocess
from pathlib import Path

import pytest
from click.testing import CliRunner

from llmrl.orchestrator.experiment_files import (
    RECIPES_DIR,
    RESEARCH_DIR,
    experiment_files,
    history_commit,
    history_files,
    load_experiment,
)
from llmrl.recipes.config import ConfigError


def test_the_project_keeps_experiment_files():
    assert experiment_files(), "no services/recipes/<recipe>/experiments/*.yaml"


def recipe_package(path: Path) -> str:
    """The recipe package a reported experiment file lies in."""
    return path.relative_to(RECIPES_DIR).parts[0]


@pytest.mark.parametrize("path", experiment_files(), ids=lambda p: str(p.relative_to(RECIPES_DIR)))
def test_every_experiment_file_validates_against_its_recipe(path: Path):
    experiment = load_experiment(path)
    assert experiment.name == f"{experiment.recipe}-{path.stem}"
    assert experiment.description and experiment.claim is not None
    assert recipe_package(path) in {r.replace("-", "_") for r in experiment.recipes()}
    # a seeded figure can depend on torch's thread count: a kept one states it, never the cores
    assert experiment.threads, f"{path.name}: state `threads:` (the count its report ran on)"


def test_the_research_record_keeps_history_files_and_none_in_the_package():
    assert history_files(), "no research/<recipe>/experiments/*.yaml"
    assert not list(RECIPES_DIR.glob("*/experiments/history")), "history files belong in research/"


@pytest.mark.parametrize("path", history_files(), ids=lambda p: str(p.relative_to(RESEARCH_DIR)))
def test_every_history_file_names_a_commit_of_this_repository(path: Path):
    """Not validated against today's schema: a history file is read at its commit, which must
    be one git knows (a whole hash, so that no later commit can make it ambiguous)."""
    commit = history_commit(path)
    assert commit is not None and len(commit) == 40, f"{path}: commit: a whole commit hash"
    assert path.parent.parent.name in {p.name for p in RECIPES_DIR.iterdir()}, "a recipe package"
    if shutil.which("git") is None or not (RESEARCH_DIR.parent / ".git").exists():
        pytest.skip("not a git checkout")
    known = subprocess.run(
        ["git", "cat-file", "-e", f"{commit}^{{commit}}"],
        cwd=RESEARCH_DIR.parent,
        capture_output=True,
        timeout=60,
    )
    assert known.returncode == 0, f"{path}: commit {commit} is no commit of this repository"


def test_a_history_file_is_refused_naming_its_commit(tmp_path):
    path = write(tmp_path, 'commit: "' + "ab" * 20 + '"\nrecipe: evaluate\nconfig: {episodez: 3}\n')
    with pytest.raises(ConfigError) as refused:
        load_experiment(path)
    assert f"read with the config schema of commit {'ab' * 20}" in str(refused.value)
    assert "git worktree add" in str(refused.value)


def write(tmp_path: Path, text: str) -> Path:
    path = tmp_path / "trial.yaml"
    path.write_text(text)
    return path


@pytest.mark.parametrize(
    ("text", "named"),
    [
        ("recipe: evaluate\nconfig: {episodez: 3}\n", "config.episodez: unknown config key"),
        ("recipe: evaluate\nconfig: {episodes: 0}\n", "config.episodes"),
        ("recipe: evaluate\ngrid: {planner: [oracle, nope]}\n", "unknown planner 'nope'"),
        ("recipe: evaluate\nclaim: {statement: x, colour: red}\n", "claim.colour"),
        ("recipe: evaluate\nseeds: 3..1\n", "seeds"),
        ("recipe: [1, 2\n", "trial.yaml"),
        ("recipe: evaluate\ngateway: {models: {smollm2: {timeout_s: -1}}}\n", "gateway"),
        ("recipe: evaluate\ngateway: {config: /etc/passwd}\n", "gateway.config"),
    ],
)
def test_a_bad_file_names_itself_and_the_key(tmp_path, text, named):
    with pytest.raises(ConfigError) as refused:
        load_experiment(write(tmp_path, text))
    assert str(tmp_path / "trial.yaml") in str(refused.value)
    assert named in str(refused.value)


def test_arguments_override_the_files_config_grid_and_seeds(tmp_path):
    path = write(tmp_path, "recipe: evaluate\nconfig: {episodes: 4}\nseeds: [0, 1]\n")
    experiment = load_experiment(path, ["episodes=2", "planner=[oracle]", "seeds=[5]"])
    assert experiment.config == {"episodes": 2} and experiment.grid == {"planner": ["oracle"]}
    assert experiment.seeds == [5]


def test_a_file_extends_another_and_writes_only_what_it_changes(tmp_path):
    """A variant of a reported setting (`extends: base.yaml`) is the base with its own keys
    over it: config and gateway merged key by key, what it says of itself its own."""
    (tmp_path / "base.yaml").write_text(
        "description: the base\nbudget: 1 min\nclaim: {statement: base}\nrecipe: evaluate\n"
        "config: {env: SimpleDoorKey, planner: oracle, episodes: 4}\nseeds: [0, 1]\n"
        "threads: 1\ngateway: {torch_threads: 1, models: {smollm2: {timeout_s: 900}}}\n"
    )
    variant = tmp_path / "variant.yaml"
    variant.write_text(
        "extends: base.yaml\ndescription: fewer episodes\nclaim: {statement: variant}\n"
        "config: {episodes: 2}\ngateway: {models: {smollm2: {dtype: float32}}}\n"
    )
    experiment = load_experiment(variant, ["seeds=[3]"])
    assert experiment.name == "evaluate-variant" and experiment.description == "fewer episodes"
    assert experiment.config == {"env": "SimpleDoorKey", "planner": "oracle", "episodes": 2}
    assert experiment.gateway == {
        "torch_threads": 1,
        "models": {"smollm2": {"timeout_s": 900, "dtype": "float32"}},
    }
    assert (experiment.threads, experiment.seeds) == (1, [3])
    assert experiment.budget is None and experiment.claim.statement == "variant"
    assert load_experiment(variant).seeds == [0, 1]  # inherited unless given


@pytest.mark.parametrize(
    ("extends", "named"),
    [
        ("../elsewhere.yaml", "the file name of another experiment file in the same folder"),
        ("/etc/passwd", "the file name of another experiment file in the same folder"),
        ("missing.yaml", "no missing.yaml in"),
        ("trial.yaml", "trial.yaml -> trial.yaml is a cycle"),
        ("loop.yaml", "trial.yaml -> loop.yaml -> trial.yaml is a cycle"),
    ],
)
def test_extends_names_a_sibling_file_without_cycles(tmp_path, extends, named):
    (tmp_path / "loop.yaml").write_text("extends: trial.yaml\n")
    with pytest.raises(ConfigError) as refused:
        load_experiment(write(tmp_path, f"extends: {extends}\nrecipe: evaluate\n"))
    # the message starts with the file whose `extends` is wrong (the base's own, in a chain)
    assert str(refused.value).startswith(str(tmp_path)) and named in str(refused.value)


def test_llmrl_sweep_runs_an_experiment_file(tmp_path):
    from llmrl.cli import main

    path = write(
        tmp_path,
        "description: the oracle on DoorKey\nclaim: {statement: it solves it}\n"
        "recipe: evaluate\nconfig: {env: SimpleDoorKey, planner: oracle, episodes: 2}\n",
    )
    out = tmp_path / "out"
    args = ["sweep", "--config", str(path), "seeds=0..1", "--out", str(out), "--quiet"]
    result = CliRunner().invoke(main, args)
    assert result.exit_code == 0, result.output
    assert "experiment evaluate-trial: 2 runs" in result.output  # named after the file
    assert "success" in (out / "results.md").read_text().lower()


def test_a_sweep_says_the_thread_count_it_was_not_given_and_takes_one(tmp_path, monkeypatch):
    """Unstated, a sweep's runs compute on this machine's thread count, and it says so; --threads
    (over a file's `threads`) states it, and each run's provenance records it."""
    import torch

    from llmrl.cli import main
    from llmrl.common.store import RunStore
    from llmrl.orchestrator.sources import STORE_FILE, from_store

    monkeypatch.delenv("OMP_NUM_THREADS", raising=False)  # the sweep sets it: put back after
    before = torch.get_num_threads()
    path = write(
        tmp_path,
        "description: the oracle on DoorKey\nclaim: {statement: it solves it}\n"
        "recipe: evaluate\nconfig: {env: SimpleDoorKey, planner: oracle, episodes: 1}\n",
    )
    try:
        unstated = CliRunner().invoke(
            main, ["sweep", "--config", str(path), "--out", str(tmp_path / "a"), "--quiet"]
        )
        assert unstated.exit_code == 0, unstated.output
        assert "threads: not stated, so every run computes on" in unstated.output
        out = tmp_path / "b"
        args = ["sweep", "--config", str(path), "--threads", "1", "--out", str(out), "--quiet"]
        stated = CliRunner().invoke(main, args)
        assert stated.exit_code == 0, stated.output
        assert "threads: not stated" not in stated.output
    finally:
        torch.set_num_threads(before)
    store = RunStore(out / STORE_FILE)
    try:
        (run,) = [from_store(store, row) for row in store.list_runs()]
    finally:
        store.close()
    assert run.results.provenance["numerics"]["torch_threads"] == 1
    # a service's threads are its own: --threads with --url is refused, naming the option
    refused = CliRunner().invoke(
        main, ["sweep", "--config", str(path), "--threads", "1", "--url", "http://127.0.0.1:9"]
    )
    assert refused.exit_code == 2 and "--threads: embedded sweeps only" in refused.output


def test_an_experiments_gateway_settings_serve_its_embedded_runs(tmp_path, monkeypatch):
    from llmrl.cli import main
    from llmrl.llm_gateway.settings import CONFIG_ENV_VAR, load_settings

    monkeypatch.setenv(CONFIG_ENV_VAR, "")  # unset for the test, restored after it
    path = write(
        tmp_path,
        "description: the oracle\nclaim: {statement: it solves it}\nrecipe: evaluate\n"
        "config: {env: SimpleDoorKey, planner: oracle, episodes: 1}\n"
        "gateway: {models: {smollm2: {timeout_s: 900}}}\n",
    )
    out = tmp_path / "out"
    result = CliRunner().invoke(
        main, ["sweep", "--config", str(path), "--out", str(out), "--quiet"]
    )
    assert result.exit_code == 0, result.output
    assert os.environ[CONFIG_ENV_VAR] == str(out / "gateway.yaml")
    assert load_settings().models["smollm2"].timeout_s == 900
    # not part of the runnable spec (what --url submits)
    assert "gateway" not in load_experiment(path).spec().model_dump()


def test_a_sweeps_runs_load_their_own_models_from_any_out_dir(tmp_path, monkeypatch):
    """The runs' out dir is the user's choice: their models load from it though it lies
    outside LLMRL_HOME, the data roots and the working folder."""
    from llmrl.cli import main
    from llmrl.common.paths import DATA_ROOTS_ENV

    home = tmp_path / "home"
    monkeypatch.setenv("LLMRL_HOME", str(home))
    monkeypatch.setenv(DATA_ROOTS_ENV, str(home))  # the temporary folders are roots no more
    path = write(
        tmp_path,
        "description: a tiny When2Ask\nclaim: {statement: it runs}\nrecipe: when2ask\n"
        "config: {envs: [SimpleDoorKey], methods: [learned], train_steps: 128, n_envs: 2,\n"
        "         n_steps: 64, never_ask_steps: 0, eval_episodes: 2}\n",
    )
    out = tmp_path / "elsewhere"
    result = CliRunner().invoke(
        main, ["sweep", "--config", str(path), "--out", str(out), "--quiet"]
    )
    assert result.exit_code == 0, result.output
    assert "failed" not in result.output and (out / "results.md").exists()


def test_a_variants_gateway_merges_as_the_gateways_settings_do(tmp_path):
    """A model of another backend under the base's model name replaces it (the gateway's own
    rule), rather than mixing the two backends' keys."""
    (tmp_path / "base.yaml").write_text(
        "recipe: evaluate\nconfig: {episodes: 2}\n"
        "gateway: {models: {smollm2: {timeout_s: 900, dtype: float32}}}\n"
    )
    variant = tmp_path / "variant.yaml"
    variant.write_text(
        "extends: base.yaml\n"
        "gateway: {models: {smollm2: {backend: openai, remote_model: gpt-4o-mini}}}\n"
    )
    experiment = load_experiment(variant)
    assert experiment.gateway == {
        "models": {"smollm2": {"backend": "openai", "remote_model": "gpt-4o-mini"}}
    }


def test_results_list_history_lists_the_research_files_with_their_commits():
    from llmrl.cli import main

    result = CliRunner().invoke(main, ["results", "list", "glam", "--history"])
    assert result.exit_code == 0, result.output
    path = RESEARCH_DIR / "glam" / "experiments" / "2026-11-26-bc.yaml"
    assert "glam/2026-11-26-bc.yaml" in result.output
    assert history_commit(path) in result.output
    assert "glam/quick.yaml" in result.output  # the reported files first, as without --history
