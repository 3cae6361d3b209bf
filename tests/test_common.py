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
