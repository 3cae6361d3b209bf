"""The shared plumbing: overrides, ports, registry errors, episode records, generated code."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

from llmrl.common import config
from llmrl.common.episodes import EpisodeRecord, LlmCall, StepRecord, read_jsonl, write_jsonl
from llmrl.common.registry import Registry, UnknownNameError

ROOT = Path(__file__).resolve().parent.parent


def test_overrides_are_yaml_typed_and_nested():
    parsed = config.parse_overrides(
        ["episodes=20", "planner=oracle", "lam=0.01", "envs=[A, B]", "ppo.lr=3e-4", "flag=true"]
    )
    assert parsed == {
        "episodes": 20,
        "planner": "oracle",
        "lam": 0.01,
        "envs": ["A", "B"],
        "ppo": {"lr": 3e-4},
        "flag": True,
    }


@pytest.mark.parametrize("bad", ["novalue", "=3", ""])
def test_malformed_override_names_the_problem(bad):
    with pytest.raises(ValueError, match="key=value"):
        config.parse_overrides([bad])


def test_ports_have_defaults_and_env_overrides(monkeypatch):
    assert config.service_grpc_port("simulator") == 50051
    monkeypatch.setenv("LLMRL_SIMULATOR_GRPC_PORT", "6001")
    assert config.grpc_address("simulator") == "127.0.0.1:6001"
    monkeypatch.setenv("LLMRL_SIMULATOR_GRPC_PORT", "abc")
    with pytest.raises(ValueError, match="LLMRL_SIMULATOR_GRPC_PORT"):
        config.service_grpc_port("simulator")
    with pytest.raises(ValueError, match="unknown service"):
        config.service_port("nope")


def test_registry_rejects_duplicates_and_lists_known_names():
    reg = Registry()
    reg._loaded.add("planner")  # no built-ins for this private registry

    @reg.register_planner("first")
    class First:
        """The first planner."""

    assert reg.get_planner("first") is First
    assert reg.entry("planner", "first").description == "The first planner."
    with pytest.raises(ValueError, match="already registered"):
        reg.register_planner("first")(object)
    with pytest.raises(UnknownNameError, match="registered planners: first"):
        reg.get_planner("second")


def test_policy_jobs_register_a_request_model_with_their_run_function():
    from pydantic import BaseModel

    reg = Registry()
    reg._loaded.add("policy_job")  # no built-ins for this private registry

    class CountJob(BaseModel):
        kind: str = "count"
        steps: int

    @reg.register_policy_job("count", request=CountJob)
    def count(job: CountJob, report) -> dict:
        report(job.steps)
        return {"steps": job.steps}

    request_model, run = reg.get_policy_job("count")
    reported: list[int] = []
    assert request_model is CountJob
    assert run(request_model(steps=3), reported.append) == {"steps": 3} and reported == [3]
    with pytest.raises(UnknownNameError, match="registered policy_jobs: count"):
        reg.get_policy_job("other")

    class NoKind(BaseModel):  # requests are routed by `kind`: a model without it is refused
        steps: int

    with pytest.raises(TypeError, match="kind"):
        reg.register_policy_job("no-kind", request=NoKind)


def test_when2ask_offers_its_policy_training_as_a_builtin_policy_job():
    from llmrl.common.registry import registry
    from llmrl.recipes.when2ask.training import PolicyTrainingJob, train_policy

    assert "when2ask" in registry.names("policy_job")
    assert registry.get_policy_job("when2ask") == (PolicyTrainingJob, train_policy)


def test_episode_records_round_trip(tmp_path):
    record = EpisodeRecord(
        run_id="r1",
        episode_id="evaluate/0",
        env="SimpleDoorKey",
        seed=3,
        policy="oracle",
        steps=[StepRecord(t=0, text="you see a key", skill="go to the key", reward=0.0)],
        llm_calls=[LlmCall(t=0, messages=[{"role": "user", "content": "hi"}], response="x")],
        episode_return=0.9,
        length=1,
        success=True,
    )
    path = tmp_path / "episodes.jsonl"
    assert write_jsonl(path, [record, record]) == 2
    assert list(read_jsonl(path)) == [record, record]
    path.write_text("not json\n")
    with pytest.raises(ValueError, match=r"episodes\.jsonl:1"):
        list(read_jsonl(path))


def test_generated_grpc_code_is_current():
    result = subprocess.run(
        [sys.executable, str(ROOT / "protos" / "generate.py"), "--check"],
        capture_output=True,
        text=True,
    )
    assert result.returncode == 0, result.stdout + result.stderr


def test_cli_help_explains_every_command():
    from click.testing import CliRunner

    from llmrl.cli import main

    result = CliRunner().invoke(main, ["--help"])
    assert result.exit_code == 0
    for command in [
        "run",
        "serve",
        "worker",
        "up",
        "submit",
        "status",
        "cancel",
        "envs",
        "recipes",
        "models",
    ]:
        assert command in result.output


def test_unknown_service_settings_are_named_with_the_allowed_ones():
    import pytest

    from llmrl.common.config import check_settings

    check_settings("learner", {"jobs_dir": "x"}, ("jobs_dir",))
    expected = r"unknown learner settings \['bogus'\]; allowed: jobs_dir"
    with pytest.raises(ValueError, match=expected):
        check_settings("learner", {"bogus": 1, "jobs_dir": "x"}, ("jobs_dir",))
