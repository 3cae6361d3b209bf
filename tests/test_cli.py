"""The `llmrl` command line."""

from __future__ import annotations


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
