"""Settings that name a file, a folder, a model or an endpoint are checked when a run is
submitted, not when it reaches them: a path outside LLMRL_HOME and the data roots is refused
naming the setting (`llmrl.common.paths.confine`), a recipe's model is a gateway model name
(never a path or a URL: the gateway's settings say where a model is), llm-personalize's
`openai_base_url` must be a configured provider's; and what the orchestrator answers names the
server's own folders by their variables, never by their absolute paths."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest
from starlette.testclient import TestClient

from llmrl.common.config import home_dir
from llmrl.recipes.config import ConfigError, validate_config

OUTSIDE = "/etc"  # never under LLMRL_HOME nor a data root


def refusal(recipe: str, config: dict) -> ConfigError:
    with pytest.raises(ConfigError) as refused:
        validate_config(recipe, config)
    return refused.value


@pytest.mark.parametrize(
    ("recipe", "config", "field"),
    [
        ("evaluate", {"env": "Housekeep", "env_kwargs": {"data_dir": OUTSIDE}}, "env_kwargs"),
        ("ellm", {"env": "Housekeep", "env_kwargs": {"data_dir": OUTSIDE}}, "env_kwargs"),
        ("llm-personalize", {"data_dir": OUTSIDE}, "data_dir"),
        ("kalm", {"released_path": f"{OUTSIDE}/kalm.npy"}, "released_path"),
        ("kalm", {"dataset": f"{OUTSIDE}/data.npz"}, "dataset"),
    ],
)
def test_a_path_outside_the_roots_is_refused_at_submission_naming_the_setting(
    recipe, config, field
):
    refused = refusal(recipe, config)
    assert [e["loc"] for e in refused.errors] == [["config", field]], refused
    message = str(refused)
    assert "is outside the folders this service may use" in message
    assert f"'{OUTSIDE}" in message  # the path as the client gave it
    if field == "env_kwargs":
        assert "env_kwargs.data_dir:" in message


def test_paths_under_the_roots_and_other_kwargs_pass(tmp_path: Path):
    inside = home_dir() / "housekeep-copy"
    config = validate_config("evaluate", {"env": "SimpleDoorKey", "env_kwargs": {}})
    assert config.env_kwargs == {}
    from llmrl.recipes.config import confined_kwargs

    kwargs = {"data_dir": str(inside), "scene_files": [str(tmp_path / "a")], "size": 5}
    assert confined_kwargs(kwargs, "env_kwargs") == kwargs
    with pytest.raises(ValueError, match=r"env_kwargs\.scene_files: '/etc/x' is outside"):
        confined_kwargs({"scene_files": [str(tmp_path), "/etc/x"]}, "env_kwargs")


MODEL_FIELDS = [
    ("ellm", "model"),
    ("ellm", "embed_model"),
    ("glam", "model"),
    ("kalm", "model"),
    ("kalm", "embed_model"),
    ("llm-personalize", "model"),
    ("when2ask", "planner_model"),
]


@pytest.mark.parametrize(("recipe", "field"), MODEL_FIELDS)
@pytest.mark.parametrize(
    ("value", "what"),
    [("/srv/models/smollm2", "a path"), ("../models", "a path"), ("http://evil/v1", "a URL")],
)
def test_a_model_given_as_a_path_or_url_is_refused(recipe, field, value, what):
    config = {"data_dir": "procedural"} if recipe == "llm-personalize" else {}
    refused = refusal(recipe, {**config, field: value})
    assert [e["loc"] for e in refused.errors] == [["config", field]], refused
    message = str(refused)
    assert f"{what}, which is no model name" in message
    assert "models are named in the gateway's settings" in message


@pytest.mark.parametrize(("recipe", "field"), MODEL_FIELDS)
def test_gateway_model_names_and_adapter_references_pass(recipe, field):
    config = {"data_dir": "procedural"} if recipe == "llm-personalize" else {}
    for name in ("smollm2", "tiny", "smollm2:my-adapter@3"):
        assert getattr(validate_config(recipe, {**config, field: name}), field) == name


def test_a_planners_model_is_a_gateway_model_name_too():
    refused = refusal("evaluate", {"planner_kwargs": {"model": "/srv/models/x"}})
    assert "planner_kwargs.model:" in str(refused) and "a path" in str(refused)


def test_an_openai_model_id_is_never_a_path_or_url():
    config = {"data_dir": "procedural"}
    ok = "ft:gpt-4o-mini-2024-07-18:org::abc123"
    assert validate_config("llm-personalize", {**config, "openai_model": ok}).openai_model == ok
    for bad in ("../../x", "http://evil/v1"):
        refused = refusal("llm-personalize", {**config, "openai_model": bad})
        assert [e["loc"] for e in refused.errors] == [["config", "openai_model"]]


def test_an_openai_base_url_no_provider_has_is_refused_at_submission(monkeypatch):
    monkeypatch.delenv("OPENAI_BASE_URL", raising=False)
    monkeypatch.delenv("LLMRL_PROVIDERS", raising=False)
    refused = refusal(
        "llm-personalize", {"data_dir": "procedural", "openai_base_url": "http://evil:1/v1"}
    )
    assert "openai_base_url: no configured provider has base_url 'http://evil:1/v1'" in str(refused)
    assert "LLMRL_PROVIDERS" in str(refused)


# -- what the orchestrator answers ------------------------------------------------------------
@pytest.fixture
def orchestrator(tmp_path: Path) -> Iterator[TestClient]:
    from support.service_apps import orchestrator_app

    with TestClient(orchestrator_app(tmp_path), raise_server_exceptions=False) as client:
        yield client


def test_post_runs_names_the_setting_and_no_absolute_server_path(orchestrator):
    home = home_dir()
    (home / "not-housekeep").mkdir(parents=True, exist_ok=True)
    cases = [
        ({"data_dir": OUTSIDE}, "data_dir", f"'{OUTSIDE}' is outside"),
        # inside LLMRL_HOME, but no Housekeep data: the loader's error names the folder
        ({"data_dir": str(home / "not-housekeep")}, "data_dir", "$LLMRL_HOME/not-housekeep"),
        ({"model": "/srv/models/x"}, "model", "models are named in the gateway's settings"),
        ({"openai_base_url": "http://evil:1/v1"}, "openai_base_url", "no configured provider"),
    ]
    for config, field, says in cases:
        response = orchestrator.post("/runs", json={"recipe": "llm-personalize", "config": config})
        assert response.status_code == 422, response.text
        body = response.json()
        assert field in body["detail"] and says in body["detail"], body["detail"]
        assert str(home) not in response.text, response.text
    assert orchestrator.get("/runs").json() == []


def test_a_failed_runs_error_names_server_folders_by_their_variables(orchestrator):
    home = home_dir()
    store = orchestrator.app.state.manager.store
    run_id = store.create_run("evaluate", {}, "out")
    store.update_run(
        run_id,
        status="failed",
        error=f"FileNotFoundError: data_dir '{home}/data/x' is not a Housekeep data directory "
        "(nor is /etc/passwd)",
    )
    error = orchestrator.get(f"/runs/{run_id}").json()["error"]
    assert error == (
        "FileNotFoundError: data_dir '$LLMRL_HOME/data/x' is not a Housekeep data directory "
        "(nor is /etc/passwd)"
    )
    assert [run["error"] for run in orchestrator.get("/runs").json()] == [error]


def test_server_folders_are_written_as_their_variables(monkeypatch):
    from llmrl.common.datasets import DATASETS
    from llmrl.common.server_paths import redact_server_paths

    for dataset in DATASETS.values():
        monkeypatch.delenv(dataset.env_var, raising=False)
    monkeypatch.delenv("LLMRL_ARTIFACT_ROOTS", raising=False)
    monkeypatch.setenv("LLMRL_HOME", "/srv/llmrl")
    monkeypatch.setenv("LLMRL_DATA_ROOTS", "/srv/data:/srv/llmrl/shared")
    monkeypatch.setenv("LLMRL_HOUSEKEEP_DATA", "/srv/data/housekeep")
    text = (
        "'/srv/llmrl/runs/a' /srv/llmrl2/x /srv/data/housekeep/episodes /srv/data. "
        "/srv/llmrl/shared/f /etc/passwd /srv/datasets"
    )
    assert redact_server_paths(text) == (
        "'$LLMRL_HOME/runs/a' /srv/llmrl2/x $LLMRL_HOUSEKEEP_DATA/episodes "
        "$LLMRL_DATA_ROOTS[0]. $LLMRL_DATA_ROOTS[1]/f /etc/passwd /srv/datasets"
    )


def test_only_a_command_line_study_may_name_its_model_by_a_local_path():
    from llmrl.common.names import check_model_name, local_model_paths_allowed

    with pytest.raises(ValueError, match="a path, which is no model name"):
        check_model_name("/models/smollm2")
    with local_model_paths_allowed():  # what `model_from_options` does for a study's options
        assert check_model_name("/models/smollm2") == "/models/smollm2"
        with pytest.raises(ValueError, match="a URL"):
            check_model_name("http://engine/v1")
    with pytest.raises(ValueError):  # the allowance ends with the block
        check_model_name("/models/smollm2")
