"""Fixtures of the simulator tests: the test envs, and a real server in its own process."""

from __future__ import annotations

import sys
from collections.abc import Iterator
from pathlib import Path

import pytest

sys.path.insert(0, str(Path(__file__).resolve().parent))  # for spawned worker processes too

import simtest_envs  # noqa: F401  registers the SimTest envs
from simtest_support import Server, start_server, stop_server


@pytest.fixture(scope="session")
def sim_server() -> Iterator[Server]:
    server = start_server()
    yield server
    stop_server(server)
