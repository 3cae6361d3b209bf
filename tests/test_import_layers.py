"""Imports point down the layers docs/architecture.md draws, never up or sideways: a module
imports its own package, the episode layer's other half (agents and planners are one layer), or
a package of a lower layer. Every `import` counts, the ones inside functions too: a lazy import
still makes the lower layer depend on the higher one."""

from __future__ import annotations

import ast
from pathlib import Path

import pytest

SERVICES = Path(__file__).resolve().parents[1] / "services"
# package -> layer, as docs/architecture.md lists them (cli: the command line, on top)
LAYERS = {
    "common": 1,
    "simulator": 2,
    "llm_gateway": 2,
    "agents": 3,
    "planners": 3,
    "learner": 3,
    "annotator": 4,  # builds datasets and submits fine-tuning jobs to the learner
    "recipes": 5,
    "orchestrator": 6,
    "cli": 7,
}
ONE_LAYER = [{"agents", "planners"}]  # packages of one layer that may import each other


def llmrl_imports(path: Path) -> list[tuple[int, str]]:
    """(line, imported llmrl package) for every absolute import of llmrl in `path`."""
    found = []
    for node in ast.walk(ast.parse(path.read_text(), str(path))):
        names = []
        if isinstance(node, ast.Import):
            names = [alias.name for alias in node.names]
        elif isinstance(node, ast.ImportFrom) and node.level == 0 and node.module:
            names = [node.module]
        found += [(node.lineno, n.split(".")[1]) for n in names if n.startswith("llmrl.")]
    return found


def allowed(importer: str, imported: str) -> bool:
    if importer == imported:
        return True
    if any({importer, imported} <= group for group in ONE_LAYER):
        return True
    return LAYERS[imported] < LAYERS[importer]


def upward_imports(root: Path) -> list[str]:
    wrong = []
    for path in sorted(root.rglob("*.py")):
        relative = path.relative_to(root)
        importer = relative.parts[0].removesuffix(".py")
        if importer not in LAYERS:  # the package's __init__, generated protobuf modules
            continue
        for line, imported in llmrl_imports(path):
            if imported not in LAYERS:
                wrong.append(f"{relative}:{line} imports llmrl.{imported}, which has no layer")
            elif not allowed(importer, imported):
                wrong.append(
                    f"{relative}:{line} imports llmrl.{imported} (layer {LAYERS[imported]}) "
                    f"from {importer} (layer {LAYERS[importer]})"
                )
    return wrong


def test_every_package_of_llmrl_has_a_layer():
    packages = {p.name.removesuffix(".py") for p in SERVICES.iterdir()}
    packages -= {"__init__", "__pycache__", "py.typed"}
    assert packages <= set(LAYERS), f"give these a layer here and in docs: {packages - set(LAYERS)}"


def test_no_import_points_up_the_layers():
    wrong = upward_imports(SERVICES)
    assert not wrong, "imports that point up or sideways:\n" + "\n".join(wrong)


@pytest.mark.parametrize(
    ("package", "source"),
    [
        ("common", "from llmrl.orchestrator import catalog\n"),
        ("learner", "def f():\n    from llmrl.annotator.datasets import x\n"),  # lazy, too
        ("simulator", "import llmrl.llm_gateway.client\n"),  # sideways, one layer
        ("recipes", "from llmrl.cli import main\n"),
    ],
)
def test_an_upward_import_is_caught(tmp_path, package, source):
    (tmp_path / package).mkdir()
    (tmp_path / package / "module.py").write_text(source)
    (tmp_path / "agents").mkdir()
    (tmp_path / "agents" / "ok.py").write_text("from llmrl.planners.base import Plan\n")
    wrong = upward_imports(tmp_path)
    assert len(wrong) == 1 and wrong[0].startswith(f"{package}/module.py:"), wrong
