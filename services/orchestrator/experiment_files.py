"""Experiments kept as data: `services/recipes/<recipe>/experiments/<name>.yaml`.

A file is an experiment spec (`experiments.ExperimentSpec`: recipe, config, grid, seeds) and
what it is for:

    description: The learned mediator against every fixed rule, on DoorKey (the status row).
    budget: about 10 minutes on a 2-core CPU
    claim:
      statement: learned asking keeps the success of always-ask with fewer queries
      target: queries per episode below always-ask's, success within 5 points
      paper: Hu et al. 2023, Fig. 4
    recipe: when2ask
    config: {train_steps: 4096}
    grid: {planner: [oracle, noisy]}
    seeds: 0..2

`llmrl sweep --config FILE [key=value ...]` runs it (the arguments override its base config,
grid axes or seeds, as for `llmrl sweep RECIPE`), resumable as every sweep is; with `--url` it
is submitted to an orchestrator. Loading validates the whole file, every planned run's config
included: a bad key or value is a ConfigError naming the file and the key.

The research notes' settings (`research/<recipe>/experiments/<note>.yaml` at the repository
root, beside the code and not in the package) are history: each names the `commit:` whose
config schema reads it, and is re-run in a checkout of that commit (research/README.md), so
loading one here is refused with that commit.
"""

from __future__ import annotations

import copy
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import yaml
from pydantic import BaseModel, ConfigDict, Field, ValidationError, field_validator

from llmrl.common.config import deep_merged, load_yaml
from llmrl.orchestrator.experiments import (
    ExperimentSpec,
    plan_experiment,
    split_arguments,
)
from llmrl.recipes.config import ConfigError

RECIPES_DIR = Path(__file__).resolve().parent.parent / "recipes"
# the repository checkout's research record (absent from an installed wheel, which ships only
# services/): history experiment files, each read at its own commit
RESEARCH_DIR = RECIPES_DIR.parent.parent / "research"
HISTORY_KEY = "commit"  # a history file's pin: the commit whose config schema reads it
DOCUMENTATION = ("description", "budget", "claim", "status")  # what a file says of the spec
RUNTIME = ("gateway", "threads")  # how its embedded runs are served, not what they are


class Claim(BaseModel):
    """The figure an experiment checks, as a researcher would state it."""

    model_config = ConfigDict(extra="forbid")

    statement: str = Field(..., description="what the figure shows")
    target: str | None = Field(None, description="the threshold it is held to")
    paper: str | None = Field(None, description="the paper's figure beside it, and where")


class ExperimentFile(ExperimentSpec):
    """An experiment spec with its purpose; unknown keys are errors."""

    description: str = Field("", description="what the experiment is, in a sentence or two")
    budget: str | None = Field(None, description="its cost, e.g. 'about 10 minutes on 2 cores'")
    claim: Claim | None = None
    status: bool = Field(
        False,
        description="its kept report is the recipe's status figure, the one its page opens "
        "with (at most one file per recipe; without one, the report over the most runs)",
    )
    gateway: dict[str, Any] | None = Field(
        None,
        description="LLM gateway settings of the embedded runs, as in a gateway config file "
        "(e.g. {models: {smollm2: {timeout_s: 900}}, torch_threads: 1}: a loaded CPU may "
        "take minutes per batched query); $LLMRL_LLM_GATEWAY_CONFIG, when set, wins. With "
        "--url the gateway service's own settings hold.",
    )

    threads: int | None = Field(
        None,
        ge=1,
        le=256,
        description="torch threads of each embedded run (OMP_NUM_THREADS too): on a shared "
        "CPU one per run is faster, and a seeded run's figures can depend on the count "
        "(torch splits its reductions by thread).",
    )

    @field_validator("gateway")
    @classmethod
    def _gateway_settings(cls, value: dict[str, Any] | None) -> dict[str, Any] | None:
        if value is None:
            return None
        if "config" in value:  # a settings key that names a file to read: not from here
            raise ValueError("gateway.config: give the settings themselves, not a file")
        from llmrl.llm_gateway.settings import load_settings

        try:
            load_settings(value)
        except ValueError as exc:
            raise ValueError(f"gateway: {exc}") from None
        return value

    def spec(self) -> ExperimentSpec:
        """The runnable part (what POST /experiments takes)."""
        return ExperimentSpec.model_validate(self.model_dump(exclude={*DOCUMENTATION, *RUNTIME}))


def load_experiment(path: str | Path, arguments: Sequence[str] = ()) -> ExperimentFile:
    """The experiment in YAML file `path` (its name defaults to its recipe and the file's
    stem, e.g. `when2ask-quick`), with
    `key=value` `arguments` over its config, grid and seeds; validated in full (every run's
    config), a ConfigError naming the file and the key otherwise."""
    path = Path(path)
    data = _read(path)
    if HISTORY_KEY in data:
        commit = str(data[HISTORY_KEY])
        raise ConfigError(
            f"{path}: a history experiment file, read with the config schema of commit "
            f"{commit}, not today's: run it in a checkout of that commit (`git worktree add "
            f"/tmp/at {commit}`; research/README.md)",
            [{"loc": [HISTORY_KEY], "msg": "a history file: run it at its commit"}],
        )
    data = _with_base(path, data)
    if isinstance(data.get("recipe"), str):  # e.g. when2ask-quick: each recipe has a quick.yaml
        data.setdefault("name", f"{data['recipe']}-{path.stem}")
    data.setdefault("name", path.stem)
    given = split_arguments(arguments)
    data["config"] = {**data.get("config", {}), **given["config"]}
    data["grid"] = {**data.get("grid", {}), **given["grid"]}
    if "seeds" in given:
        data["seeds"] = given["seeds"]
    try:
        experiment = ExperimentFile.model_validate(data)
    except ValidationError as exc:
        problems = [
            f"{'.'.join(map(str, e['loc'])) or 'experiment'}: {e['msg']}"
            for e in exc.errors(include_url=False)
        ]
        raise ConfigError(f"{path}: " + "; ".join(problems), exc.errors()) from None
    try:
        plan_experiment(experiment.spec(), experiment_id=str(experiment.name))
    except ConfigError as exc:
        raise ConfigError(f"{path}: {exc}", exc.errors) from None
    return experiment


def _read(path: Path) -> dict[str, Any]:
    try:
        return load_yaml(path)
    except (OSError, ValueError, yaml.YAMLError) as exc:
        raise ConfigError(f"{path}: {exc}", [{"loc": ["config"], "msg": str(exc)}]) from None


def _with_base(path: Path, data: dict[str, Any], seen: tuple[Path, ...] = ()) -> dict[str, Any]:
    """A file with `extends: <name>.yaml` (another experiment file in its folder) is that file
    with its own keys over it: `config` merged key by key at every depth (as `key=value`
    overrides are; ELLM's `ppo` too), `gateway` as the gateway merges its settings (a model
    of another backend replaces the base's), `grid`, `seeds`, `threads` and `recipe` replaced
    when given. What a file says of itself (`name`, `description`, `budget`, `claim`,
    `status`) is never inherited. So a variant of a reported setting
    writes only what it changes, and follows the base when the base changes."""
    name = data.pop("extends", None)
    if name is None:
        return data
    if not (isinstance(name, str) and name.endswith(".yaml") and Path(name).name == name):
        raise ConfigError(
            f"{path}: extends: the file name of another experiment file in the same folder "
            f"(e.g. quick.yaml), got {name!r}",
            [{"loc": ["extends"], "msg": "not a file name in the same folder"}],
        )
    base_path = path.parent / name
    if base_path.resolve() in {p.resolve() for p in (path, *seen)}:
        chain = " -> ".join(p.name for p in (*seen, path, base_path))
        raise ConfigError(
            f"{path}: extends: {chain} is a cycle",
            [{"loc": ["extends"], "msg": "a cycle of files"}],
        )
    if not base_path.is_file():
        siblings = ", ".join(sorted(p.name for p in path.parent.glob("*.yaml"))) or "none"
        raise ConfigError(
            f"{path}: extends: no {name} in {path.parent} (its experiment files: {siblings})",
            [{"loc": ["extends"], "msg": "no such experiment file"}],
        )
    base = _with_base(base_path, _read(base_path), (*seen, path))
    merged = {key: value for key, value in base.items() if key not in ("name", *DOCUMENTATION)}
    for key, value in data.items():
        if key == "config" and isinstance(value, dict):
            value = deep_merged(merged.get(key) or {}, value)
        elif key == "gateway" and isinstance(value, dict):
            from llmrl.llm_gateway.settings import merge_settings

            value = merge_settings(copy.deepcopy(merged.get(key) or {}), value)
        merged[key] = value
    return merged


def experiment_files(recipe: str | None = None) -> list[Path]:
    """The reported experiment files (`services/recipes/<recipe>/experiments/<name>.yaml`), of
    one recipe (its package's name, e.g. `llm_personalize`) or of all."""
    return sorted(RECIPES_DIR.glob(f"{recipe or '*'}/experiments/*.yaml"))


def history_files(recipe: str | None = None, research_dir: Path = RESEARCH_DIR) -> list[Path]:
    """The research notes' experiment files (`research/<recipe>/experiments/<note>.yaml`, each
    the setting of a dated note under docs/notes/, pinned to its commit), of one recipe or of
    all; none where there is no repository checkout (an installed wheel)."""
    return sorted(research_dir.glob(f"{recipe or '*'}/experiments/*.yaml"))


def history_commit(path: Path) -> str | None:
    """The commit a history file names (its `commit:`); None when it names none."""
    commit = _read(path).get(HISTORY_KEY)
    return None if commit is None else str(commit)
