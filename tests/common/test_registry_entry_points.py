"""Components are found through the entry points the package declares (pyproject.toml's
`llmrl.<kind>` groups): every declared name is registered by its module, every module that
registers something declares it, and a lookup imports only the module of the name looked up
(a worker imports only the recipe it runs)."""

from __future__ import annotations

import ast
import importlib
import json
import subprocess
import sys
from pathlib import Path

import pytest

from llmrl.common.registry import KINDS, declared_modules, registry

SERVICES = Path(__file__).resolve().parents[2] / "services"
RECIPES = ("ellm", "evaluate", "glam", "grpo", "kalm", "llm_personalize", "when2ask")


def registered_kinds(source: str) -> set[str]:
    """The kinds `source` registers components of: its `registry.register_<kind>(...)` calls
    (code, not the docstrings that show the decorator)."""
    kinds = set()
    for node in ast.walk(ast.parse(source)):
        call = node.func if isinstance(node, ast.Call) else None
        if (
            isinstance(call, ast.Attribute)
            and call.attr.startswith("register_")
            and isinstance(call.value, ast.Name)
            and call.value.id == "registry"
        ):
            kinds.add(call.attr.removeprefix("register_"))
    return kinds


@pytest.mark.parametrize("kind", KINDS)
def test_every_declared_name_is_registered_by_its_module(kind: str) -> None:
    declared = declared_modules(kind)
    assert declared, f"no entry points in llmrl.{kind}: is llmrl installed (pip install -e .)?"
    for name, module in declared.items():
        importlib.import_module(module)
        assert name in registry._entries[kind], f"{module} does not register {kind} {name!r}"


@pytest.mark.parametrize("kind", KINDS)
def test_every_registered_builtin_is_declared(kind: str) -> None:
    """Nothing of llmrl's registers a name no entry point declares (it would be found only
    when the whole kind is listed, never by a lookup)."""
    declared = declared_modules(kind)
    builtins = {
        name: entry
        for name, entry in registry.entries(kind).items()
        if getattr(entry.obj, "__module__", type(entry.obj).__module__).startswith("llmrl.")
    }
    assert set(builtins) <= set(declared), sorted(set(builtins) - set(declared))


def test_every_module_that_registers_a_component_declares_it() -> None:
    declared = {(kind, module) for kind in KINDS for module in declared_modules(kind).values()}
    found = set()
    for path in SERVICES.rglob("*.py"):
        if path.name == "registry.py" and path.parent.name == "common":
            continue  # the registry itself
        module = "llmrl." + ".".join(path.relative_to(SERVICES).with_suffix("").parts)
        for kind in registered_kinds(path.read_text()):
            found.add((kind, module.removesuffix(".__init__")))
    assert found, "no registrations found: the pattern no longer matches the code"
    assert found <= declared, sorted(found - declared)


LOOKUPS = """
import json, sys
from llmrl.common.registry import registry
registry.get_recipe("glam")
registry.get_driver("glam")
registry.get_policy_job("glam")
registry.get_algorithm("llm-ppo")
print(json.dumps(sorted(m for m in sys.modules if m.startswith("llmrl.recipes."))))
"""


def test_a_lookup_imports_only_the_recipe_it_names() -> None:
    """What a worker or the learner does to run GLAM: no other recipe is imported."""
    done = subprocess.run(
        [sys.executable, "-c", LOOKUPS], capture_output=True, text=True, timeout=300
    )
    assert done.returncode == 0, done.stderr[-2000:]
    imported = json.loads(done.stdout.strip().splitlines()[-1])
    recipes = {module.split(".")[2] for module in imported} & set(RECIPES)
    assert recipes == {"glam"}, imported
    assert not any(".studies" in module for module in imported)


def test_listing_a_kind_imports_all_of_its_modules() -> None:
    names = registry.names("recipe")
    assert {"ellm", "evaluate", "glam", "grpo", "kalm", "llm-personalize", "when2ask"} <= set(names)
