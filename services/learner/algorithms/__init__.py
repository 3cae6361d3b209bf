"""Training algorithms: one module per family, each algorithm registered and looked up by name.

An *algorithm* is what turns experience into a checkpoint: it learns from a source (an env, or
a dataset), saves a versioned checkpoint, and loads it back. Whoever trains looks it up by
name, never by import, so a recipe or a policy job can name any registered one:

    ppo = registry.get_algorithm("ppo")               # unknown names list the registered ones
    checkpoint = ppo.train(vec_env, Versions(out / "asking"), total_timesteps=4096)
    model = ppo.load(checkpoint)                      # or load_cached("ppo", path) in drivers

The contract (`base.Algorithm`):
* `name`, `family` (its module), `learns_from`: "env" (online RL: a VecEnv over simulator
  worlds) or "dataset" (offline RL, SFT);
* `train(source, checkpoints, *, version=None, on_progress=None, **settings) -> Checkpoint`:
  trains on `source`, saves version `version` (None: the next number) of the checkpoint line
  `checkpoints` (`llmrl.learner.versions`), reports progress as it goes (`on_progress(n)`: n
  more steps); an unknown setting is an error naming the allowed ones;
* `load(checkpoint)`: the trained thing, ready to use, from a `Checkpoint`, a version
  directory or a line (its latest version).

Families: `sb3` (SB3 on-policy `ppo`, `a2c`; off-policy `dqn`; checkpoint: `model.zip`;
resumable, with periodic versions), `sft` (LoRA supervised fine-tuning on chat JSONL;
checkpoint: a LoRA adapter the gateway serves), `offline-rl` (d3rlpy's BC, CQL, TD3+BC, IQL,
AWAC on a dataset). An algorithm only one method uses lives with its recipe and registers the
same way: `llm-ppo` (GLAM's PPO on an LLM policy over text actions) is
`llmrl.recipes.glam.llm_ppo`, `dqn-ellm` (ELLM's DQN) `llmrl.recipes.ellm.dqn`, and
`kalm-grounding` (KALM's grounding of an LLM in states and actions)
`llmrl.recipes.kalm.grounding_sft`. Each declares its settings as a pydantic model
(`settings_model`, listed by `llmrl algorithms NAME`).

Every module here is imported when the first algorithm is looked up, so a family imports its
libraries (torch, SB3, peft, d3rlpy) inside its functions: a missing one then only matters
to that family, and the learner service starts without any of them.
"""

from llmrl.learner.algorithms.base import Algorithm, load_cached
from llmrl.learner.versions import Checkpoint, Versions

__all__ = ["Algorithm", "Checkpoint", "Versions", "load_cached"]
