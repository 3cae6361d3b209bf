"""Fixtures of the simulator tests: the test envs, and a real server in its own process, closed
by a token that every test's clients send (LLMRL_TOKEN)."""

from __future__ import annotations

from collections.abc import Iterator

import pytest
import support.sim_envs  # noqa: F401  registers the SimTest envs
from support.sim_server import TOKEN, Server, start_server, stop_server


@pytest.fixture(autouse=True)
def clients_send_the_token(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("LLMRL_TOKEN", TOKEN)


@pytest.fixture(scope="session")
def sim_server() -> Iterator[Server]:
    server = start_server()
    yield server
    stop_server(server)
