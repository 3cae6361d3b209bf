"""The episode layer: how one episode is played, by whatever process plays it.

    episode.py         an episode job (`EpisodeJob`), what a driver decides (`Decision`), what a
                       driver is (`EpisodeDriver`), and `make_driver` (a policy spec -> a driver,
                       by its kind, through the registry's "driver" kind)
    resources.py       what a process that plays episodes holds (`RolloutResources`)
    rollout.py         `run_episode`: the one rollout loop of llmrl
    planner_driver.py  the "planner" kind: follow a registered planner's plans

A policy spec is a small JSON dict naming how to act, `{"kind": "planner", "name": "oracle",
"kwargs": {...}}`; a driver is what plays one episode from it. Recipes register their own kinds
(`@registry.register_driver(kind)`). Rollout workers, the embedded runner and recipes (their
demonstrations included) all play episodes through `run_episode`. This layer imports `common`
and the shared planners (and, lazily, the simulator and gateway clients), never a recipe or
the orchestrator.
"""

from llmrl.agents.episode import Decision, EpisodeDriver, EpisodeJob, make_driver
from llmrl.agents.resources import RolloutResources
from llmrl.agents.rollout import run_episode

__all__ = [
    "Decision",
    "EpisodeDriver",
    "EpisodeJob",
    "RolloutResources",
    "make_driver",
    "run_episode",
]
