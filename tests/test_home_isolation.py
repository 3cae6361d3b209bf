"""The whole test session runs with LLMRL_HOME in a temporary folder (tests/conftest.py), so
no test writes ./.llmrl into the repository."""

from __future__ import annotations

from pathlib import Path

from llmrl.common.config import home_dir

REPO = Path(__file__).resolve().parents[1]


def test_the_session_home_is_a_temporary_folder(tmp_path_factory):
    home = home_dir()
    assert home.is_relative_to(tmp_path_factory.getbasetemp().resolve())
    assert not home.is_relative_to(REPO)
