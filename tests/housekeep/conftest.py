"""Fixtures for the Housekeep tests."""

from __future__ import annotations

from pathlib import Path

import pytest
from housekeep_fixtures import real_data_dir

from llmrl.simulator.envs.housekeep.data import DATA_ENV_VAR


@pytest.fixture(scope="session")
def data_dir() -> Path:
    path = real_data_dir()
    if path is None:
        pytest.skip(f"no Housekeep data (set {DATA_ENV_VAR} or put it in ../shared/data/housekeep)")
    return path
