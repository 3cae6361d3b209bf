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


def test_algorithms_lists_each_algorithms_settings_from_its_model():
    """`llmrl algorithms NAME` prints the settings model `train` validates with: every key,
    its default and its meaning, so what the help says is what is checked."""
    from click.testing import CliRunner

    from llmrl.cli import main
    from llmrl.common.registry import registry

    for name in ("llm-ppo", "sft", "cql", "kalm-grounding"):
        shown = CliRunner().invoke(main, ["algorithms", name], terminal_width=400)
        assert shown.exit_code == 0, shown.output
        model = registry.get_algorithm(name).settings_model
        assert f"{name}: settings" in shown.output
        for key in model.model_fields:
            assert key in shown.output, f"{name}: {key} not listed"
    listing = CliRunner().invoke(main, ["algorithms"])
    assert listing.exit_code == 0 and "llm-ppo" in listing.output and "ppo" in listing.output
    unknown = CliRunner().invoke(main, ["algorithms", "ppp"])
    assert unknown.exit_code == 2 and "unknown algorithm 'ppp'" in unknown.output
