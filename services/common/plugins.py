"""Extra modules to import at start-up, so that out-of-tree components are registered.

`LLMRL_PLUGINS` (comma-separated module names) is imported by the orchestrator, rollout
workers and embedded runs before anything is looked up by name; a plugin module registers its
environments, planners, recipes or policy kinds with the usual decorators. The simulator's own
`LLMRL_EXTRA_ENV_MODULES` is honoured as well (a simulator process only reads that one).
"""

from __future__ import annotations

import importlib
import os

PLUGINS_VAR = "LLMRL_PLUGINS"
EXTRA_ENV_MODULES_VAR = "LLMRL_EXTRA_ENV_MODULES"


def load_plugins() -> list[str]:
    """Import every module named in LLMRL_PLUGINS and LLMRL_EXTRA_ENV_MODULES; returns them."""
    names: list[str] = []
    for var in (EXTRA_ENV_MODULES_VAR, PLUGINS_VAR):
        names += [m.strip() for m in os.environ.get(var, "").split(",") if m.strip()]
    for name in dict.fromkeys(names):
        importlib.import_module(name)
    return names
