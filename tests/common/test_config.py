"""Shared configuration: `--set` overrides, service ports, service settings."""

from __future__ import annotations

import pytest

from llmrl.common import config


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


@pytest.mark.parametrize("raw", ["abc", "2.5", "0", "-1"])
def test_an_integer_variable_below_its_minimum_or_not_an_integer_is_named(monkeypatch, raw):
    monkeypatch.setenv("LLMRL_TEST_COUNT", raw)
    with pytest.raises(ValueError, match="LLMRL_TEST_COUNT must be a count of at least 1"):
        config.env_int("LLMRL_TEST_COUNT", 4, minimum=1, what="a count of at least 1")


@pytest.mark.parametrize("raw", ["soon", "-1", "90000", "nan"])
def test_a_seconds_variable_out_of_range_or_not_a_number_is_named(monkeypatch, raw):
    monkeypatch.setenv("LLMRL_TEST_WAIT_S", raw)
    with pytest.raises(ValueError, match=r"LLMRL_TEST_WAIT_S: expected seconds in \[0, 86400\]"):
        config.env_seconds("LLMRL_TEST_WAIT_S", 120.0)


def test_a_seconds_variable_unset_gives_its_default_and_set_its_value(monkeypatch):
    monkeypatch.delenv("LLMRL_TEST_WAIT_S", raising=False)
    assert config.env_seconds("LLMRL_TEST_WAIT_S", 120.0) == 120.0
    monkeypatch.setenv("LLMRL_TEST_WAIT_S", "1.5")
    assert config.env_seconds("LLMRL_TEST_WAIT_S", 120.0) == 1.5


def test_an_integer_variable_unset_or_empty_gives_its_default(monkeypatch):
    monkeypatch.delenv("LLMRL_TEST_COUNT", raising=False)
    assert config.env_int("LLMRL_TEST_COUNT", 4, minimum=1) == 4
    monkeypatch.setenv("LLMRL_TEST_COUNT", "")
    assert config.env_int("LLMRL_TEST_COUNT", 4, minimum=1) == 4
    monkeypatch.setenv("LLMRL_TEST_COUNT", "7")
    assert config.env_int("LLMRL_TEST_COUNT", 4, minimum=1) == 7


def test_unknown_service_settings_are_named_with_the_allowed_ones():
    import pytest

    from llmrl.common.config import check_settings

    check_settings("learner", {"jobs_dir": "x"}, ("jobs_dir",))
    expected = r"unknown learner settings \['bogus'\]; allowed: jobs_dir"
    with pytest.raises(ValueError, match=expected):
        check_settings("learner", {"bogus": 1, "jobs_dir": "x"}, ("jobs_dir",))
