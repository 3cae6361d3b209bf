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


def test_recipes_lists_one_recipes_keys_and_names_an_unknown_one():
    from click.testing import CliRunner

    from llmrl.cli import main

    one = CliRunner().invoke(main, ["recipes", "evaluate"])
    assert one.exit_code == 0, one.output
    assert "evaluate: configuration" in one.output
    assert "glam: configuration" not in one.output and "registered recipes" not in one.output

    unknown = CliRunner().invoke(main, ["recipes", "glma"])
    assert unknown.exit_code == 2
    assert "unknown recipe 'glma'" in unknown.output and "glam" in unknown.output
