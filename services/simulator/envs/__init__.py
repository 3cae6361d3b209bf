"""The registered environments (`llmrl envs` lists them).

Importing this package registers every built-in environment, with the registry and with
gymnasium, so that after `import llmrl.simulator.envs` (or with the module prefix,
`gymnasium.make("llmrl.simulator.envs:llmrl/SimpleDoorKey-v0")`) `gymnasium.make` works.
"""

from llmrl.common.registry import registry

registry.load_builtins("env")
