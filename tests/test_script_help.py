"""Every command-line option of the repository's scripts explains itself in `--help`."""

from __future__ import annotations

import ast
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
SCRIPT_FOLDERS = ("bench", "services")


def options_without_help(source: str) -> list[str]:
    """The `add_argument` calls of `source` that pass no `help=`, as 'line: names'."""
    missing = []
    for node in ast.walk(ast.parse(source)):
        if not (isinstance(node, ast.Call) and getattr(node.func, "attr", "") == "add_argument"):
            continue
        if any(keyword.arg == "help" for keyword in node.keywords):
            continue
        names = [arg.value for arg in node.args if isinstance(arg, ast.Constant)]
        missing.append(f"{node.lineno}: {', '.join(map(str, names))}")
    return missing


def test_the_check_finds_an_option_without_help() -> None:
    source = "p.add_argument('--a', help='the a')\np.add_argument('--b', type=int)\n"
    assert options_without_help(source) == ["2: --b"]


def test_every_script_option_has_a_help_text() -> None:
    missing = {
        str(path.relative_to(ROOT)): found
        for folder in SCRIPT_FOLDERS
        for path in sorted((ROOT / folder).rglob("*.py"))
        if (found := options_without_help(path.read_text()))
    }
    assert not missing, f"options without help=: {missing}"
