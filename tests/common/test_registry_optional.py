"""Optional packages: a missing one makes its components unavailable, never a whole kind.

Fresh `Registry` instances and subprocesses keep the process-wide registry of the other tests
as it was: the plugins written here register envs that cannot be made.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import textwrap
from collections.abc import Iterator
from pathlib import Path

import pytest

from llmrl.common.registry import Registry, UnavailableError, UnknownNameError, UnloadedModule

MISSING = "llmrl_test_no_such_package"  # an import name nothing provides

# A plugin whose env needs a package that is not installed (imported lazily, as it should be).
NEEDS_MISSING_PLUGIN = f'''
from llmrl.common.registry import registry


@registry.register_env(
    "NeedsMissingPkg", requires=("{MISSING}",), extra="missingdemo", max_episode_steps=5
)
def make_needs_missing(**kwargs):
    """Needs a package that is not installed."""
    import {MISSING}

    return {MISSING}.Env(**kwargs)
'''
# A plugin whose own import fails on a missing package.
BROKEN_PLUGIN = f"""
import {MISSING}_dep  # noqa: F401

from llmrl.common.registry import registry

registry.register_env("BrokenPluginEnv")(object)
"""


def write_modules(folder: Path, modules: dict[str, str]) -> None:
    for relative, text in modules.items():
        path = folder / relative
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(textwrap.dedent(text))


@pytest.fixture
def importable(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Iterator[Path]:
    """tmp_path on sys.path; modules imported from it are forgotten afterwards."""
    monkeypatch.syspath_prepend(str(tmp_path))
    before = set(sys.modules)
    yield tmp_path
    for name in set(sys.modules) - before:
        if str(tmp_path) in str(getattr(sys.modules[name], "__file__", None) or ""):
            del sys.modules[name]


def test_an_entry_whose_package_is_missing_is_listed_but_unavailable():
    reg = Registry(modules={})

    @reg.register_planner("needs-missing", requires=(MISSING,), extra="missingdemo")
    class NeedsMissing:
        """Plans with a package that is not installed."""

    @reg.register_planner("needs-json", requires=("json",))
    class NeedsJson:
        """Plans with the standard library."""

    entries = reg.entries("planner")
    assert list(entries) == ["needs-json", "needs-missing"]
    assert entries["needs-json"].available and entries["needs-json"].install_hint == ""
    unavailable = entries["needs-missing"]
    assert not unavailable.available and unavailable.missing == [MISSING]
    assert unavailable.install_hint == "pip install 'llmrl[missingdemo]'"
    assert unavailable.description == "Plans with a package that is not installed."
    assert reg.get_planner("needs-json") is NeedsJson
    with pytest.raises(UnavailableError, match=rf"'{MISSING}'.*pip install 'llmrl\[missingdemo\]'"):
        reg.get_planner("needs-missing")


def test_without_an_extra_the_hint_names_the_package():
    reg = Registry(modules={})
    reg.register_backend("needs-missing", requires=(MISSING,))(object)
    with pytest.raises(UnavailableError, match=f"pip install {MISSING}$"):
        reg.get_backend("needs-missing")


def test_requires_must_be_a_tuple_of_import_names():
    reg = Registry(modules={})
    with pytest.raises(TypeError, match="requires must be a tuple of import names"):
        reg.register_recipe("bad", requires="crafter")


def test_a_builtin_module_missing_a_package_is_recorded_and_the_others_load(importable):
    # holder.registry's built-in planners are declared in the modules of `fake_planners`.
    write_modules(
        importable,
        {
            "holder.py": """
                from llmrl.common.registry import Registry

                registry = Registry(modules={"planner": {
                    "good": "fake_planners.good", "broken": "fake_planners.broken",
                }})
            """,
            "fake_planners/__init__.py": "",
            "fake_planners/good.py": """
                from holder import registry

                @registry.register_planner("good")
                class Good:
                    \"\"\"Needs nothing.\"\"\"
            """,
            "fake_planners/broken.py": f"""
                import {MISSING}

                from holder import registry

                registry.register_planner("broken")(object)
            """,
        },
    )
    from holder import registry

    assert registry.names("planner") == ["good"]
    expected = UnloadedModule("fake_planners.broken", MISSING, "all")
    assert registry.unloaded_modules("planner") == [expected]
    assert expected.install_hint == "pip install 'llmrl[all]'"
    with pytest.raises(UnknownNameError) as info:
        registry.get_planner("broken")
    message = str(info.value)
    assert "registered planners: good" in message
    assert f"fake_planners.broken (needs '{MISSING}': pip install 'llmrl[all]')" in message


def test_a_module_missing_an_llmrl_module_is_a_bug_and_raised(importable):
    write_modules(
        importable,
        {
            "buggy_planners/__init__.py": "",
            "buggy_planners/typo.py": "import llmrl.no_such_module\n",
        },
    )
    reg = Registry(modules={"planner": {"typo": "buggy_planners.typo"}})
    with pytest.raises(ModuleNotFoundError, match=r"llmrl\.no_such_module"):
        reg.names("planner")


# -- whole processes: the CLI, worlds, gymnasium and the simulator service -------------------
def plugin_env(folder: Path, plugins: str) -> dict[str, str]:
    write_modules(
        folder,
        {"needs_missing_plugin.py": NEEDS_MISSING_PLUGIN, "broken_plugin.py": BROKEN_PLUGIN},
    )
    env = dict(os.environ, LLMRL_PLUGINS=plugins, COLUMNS="250")
    env["PYTHONPATH"] = os.pathsep.join(filter(None, [str(folder), env.get("PYTHONPATH")]))
    return env


def run_python(args: list[str], env: dict[str, str]) -> subprocess.CompletedProcess[str]:
    result = subprocess.run(
        [sys.executable, *args], env=env, capture_output=True, text=True, timeout=300
    )
    assert result.returncode == 0, result.stdout + result.stderr
    return result


def line_of(output: str, name: str) -> str:
    return next(line for line in output.splitlines() if f" {name} " in line)


def test_llmrl_envs_lists_unavailable_envs_with_their_hint(tmp_path):
    env = plugin_env(tmp_path, "needs_missing_plugin,broken_plugin")
    output = run_python(["-m", "llmrl.cli", "envs"], env).stdout
    assert "no: pip install 'llmrl[missingdemo]'" in line_of(output, "NeedsMissingPkg")
    assert " yes " in line_of(output, "SimpleDoorKey")
    assert " yes " in line_of(output, "Housekeep")
    assert f"{MISSING}_dep" in line_of(output, "broken_plugin")
    assert "BrokenPluginEnv" not in output


def test_a_plugin_that_does_not_exist_is_a_clear_cli_error(tmp_path):
    env = plugin_env(tmp_path, "no_such_plugin_module")
    result = subprocess.run(
        [sys.executable, "-m", "llmrl.cli", "envs"], env=env, capture_output=True, text=True
    )
    assert result.returncode != 0
    assert "LLMRL_PLUGINS names 'no_such_plugin_module'" in result.stderr


# Makes the unavailable env every way there is, and a built-in one beside it; prints JSON.
MAKE_EVERY_WAY = """
import json

import gymnasium
import grpc
import numpy as np
from dm_env_rpc.v1 import connection, dm_env_rpc_pb2, error, tensor_utils

from llmrl.common.registry import UnavailableError, UnknownNameError, gym_id, registry
from llmrl.simulator.server import SimulatorServicer, create_server
from llmrl.simulator.world import World

found = {"policy_jobs": registry.names("policy_job")}
with World("SimpleDoorKey", num_envs=2, seed=0) as world:
    world.reset()
    found["builtin_steps"] = world.step(np.zeros(2, np.int64))["step_type"].tolist()
for name, make in [
    ("world", lambda: World("NeedsMissingPkg")),
    ("sharded_world", lambda: World("NeedsMissingPkg", num_envs=2, num_workers=2)),
    ("gymnasium", lambda: gymnasium.make(gym_id("NeedsMissingPkg"))),
]:
    try:
        make()
    except UnavailableError as exc:
        found[name] = str(exc)
try:
    registry.get_env("BrokenPluginEnv")
except UnknownNameError as exc:
    found["unknown"] = str(exc)

server, port = create_server("127.0.0.1", 0, SimulatorServicer())
channel = grpc.insecure_channel(f"127.0.0.1:{port}")
with connection.Connection(channel) as conn:
    def create(env):
        settings = {"env": tensor_utils.pack_tensor(env)}
        return conn.send(dm_env_rpc_pb2.CreateWorldRequest(settings=settings)).world_name
    try:
        create("NeedsMissingPkg")
    except error.DmEnvRpcError as exc:
        found["grpc"] = {"code": exc.code, "message": exc.message}
    found["grpc_builtin_world"] = create("SimpleDoorKey")
server.stop(None)
print(json.dumps(found))
"""


def test_making_an_unavailable_env_names_what_to_install_and_the_others_work(tmp_path):
    import grpc

    env = plugin_env(tmp_path, "needs_missing_plugin,broken_plugin")
    (tmp_path / "make_every_way.py").write_text(MAKE_EVERY_WAY)
    output = run_python([str(tmp_path / "make_every_way.py")], env).stdout
    found = json.loads(output.splitlines()[-1])
    hint = f"env 'NeedsMissingPkg' needs the Python package '{MISSING}', not installed; "
    hint += "install with: pip install 'llmrl[missingdemo]'"
    assert found["world"] == found["sharded_world"] == found["gymnasium"] == hint
    assert found["grpc"] == {
        "code": grpc.StatusCode.FAILED_PRECONDITION.value[0],
        "message": f"env: {hint}",
    }
    assert found["builtin_steps"] == [1, 1] and found["grpc_builtin_world"]
    assert "when2ask" in found["policy_jobs"]  # the learner's job kinds still load
    assert f"broken_plugin (needs '{MISSING}_dep': pip install {MISSING}_dep)" in found["unknown"]
