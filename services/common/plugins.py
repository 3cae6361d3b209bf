"""Out-of-tree components: the modules named in LLMRL_PLUGINS.

`LLMRL_PLUGINS` holds comma-separated module names. The process-wide registry imports them
before a kind's first lookup (`Registry.load_plugins`), so every process that looks a name up
(simulator and its shard workers, gateway, learner, annotator, orchestrator, rollout workers,
embedded runs) knows the environments, planners, recipes or policy kinds that the plugins
register with the usual decorators. A plugin whose import fails on a missing package is left
out and listed with what to install, like a built-in module.
"""

from __future__ import annotations

import os

PLUGINS_VAR = "LLMRL_PLUGINS"


def plugin_modules() -> list[str]:
    """The module names in LLMRL_PLUGINS, in order, without repeats."""
    names = (name.strip() for name in os.environ.get(PLUGINS_VAR, "").split(","))
    return list(dict.fromkeys(name for name in names if name))


def load_plugins() -> list[str]:
    """Import the plugin modules not imported yet (the registry's first lookup does this
    too); returns the names in LLMRL_PLUGINS."""
    from llmrl.common.registry import registry

    registry.load_plugins()
    return plugin_modules()
