"""The four MiniGrid tasks of When2Ask (Hu et al. 2023, arXiv 2306.03604): shared environment.

Layout: a walled room of random size (width and height drawn from
[min_room_size, max_room_size], walls included, in a grid of max_room_size squared), split by
a wall with a locked door in it. The agent starts on one side with the task's objects (a key,
a key in a box, ...); the goal lies on the other side, by default in the cell right behind
the door, so that opening the door reveals it. The episode succeeds on reaching the goal
(minigrid's reward, 1 - 0.9 * steps / max_steps). The paper's tasks end when the door opens;
the extra `go to the goal` skill is this platform's choice, to keep minigrid's goal reward.

Layouts where the agent could not reach the door or an object (objects count as obstacles,
and nothing lies in front of the door) are redrawn, so every layout is solvable.

Actions: minigrid's first six (0 turn left, 1 turn right, 2 forward, 3 pick up, 4 drop,
5 toggle); `done` (a no-op) is left out. Skills: see `skills.py`.

Observations:
  image           the agent's egocentric 3x3 view, minigrid encoding (type, colour, state)
  direction       0 right, 1 down, 2 left, 3 up
  carrying        (type, colour) of the carried object in minigrid's codes, (1, 0) for nothing
  mission         the task in words
  text            the agent's knowledge in words: objects seen so far (doors with their state),
                  what it carries ("You have seen a red key, a locked red door. You carry
                  nothing.")
  skill_status    see `SkillStatus`
  oracle_plan     privileged: the oracle's remaining skills, one per line (`oracle.py`)
  feasible_skills privileged: skills whose controller would act now, one per line
"""

from __future__ import annotations

from collections import deque
from dataclasses import dataclass
from typing import Any, ClassVar

import numpy as np
from gymnasium import spaces
from minigrid.core.constants import COLOR_NAMES, COLOR_TO_IDX, OBJECT_TO_IDX
from minigrid.core.grid import Grid
from minigrid.core.mission import MissionSpace
from minigrid.core.world_object import Door, Goal, Wall, WorldObj
from minigrid.minigrid_env import MiniGridEnv

from ..base import SkillEnv, SkillStatus
from ..text_spaces import text_space
from .knowledge import EMPTY, AgentKnowledge, Identity, identity_of
from .oracle import oracle_plan
from .skills import (
    PICKABLE,
    TOGGLEABLE,
    AgentState,
    Skill,
    all_skill_phrases,
    decide,
    goal_reached,
    parse_skill,
)

NUM_ACTIONS = 6  # minigrid's actions without `done`
MAX_LAYOUT_TRIES = 1000


@dataclass
class _SkillRun:
    """One invocation of a skill, from its first step until it is done or replaced."""

    skill: Skill
    seen_at_start: frozenset[Identity]
    acted: bool = False  # the skill's last action was its completing one (toggle)


class When2AskEnv(MiniGridEnv, SkillEnv):
    """Base of the When2Ask tasks; subclasses say which objects join the agent."""

    mission_text: ClassVar[str] = "open the locked door with its key and go to the goal"

    def __init__(
        self,
        min_room_size: int = 5,
        max_room_size: int = 10,
        agent_view_size: int = 3,
        max_steps: int = 100,
        goal_behind_door: bool = True,
        render_mode: str | None = None,
    ) -> None:
        if not 5 <= min_room_size <= max_room_size:
            raise ValueError(
                f"room sizes must satisfy 5 <= min_room_size <= max_room_size, "
                f"got {min_room_size} and {max_room_size}"
            )
        if agent_view_size < 3 or agent_view_size % 2 == 0:
            raise ValueError(f"agent_view_size must be odd and >= 3, got {agent_view_size}")
        if max_steps < 1:
            raise ValueError(f"max_steps must be positive, got {max_steps}")
        self.min_room_size = min_room_size
        self.max_room_size = max_room_size
        self.goal_behind_door = goal_behind_door
        mission = self.mission_text
        super().__init__(
            mission_space=MissionSpace(mission_func=lambda: mission),
            width=max_room_size,
            height=max_room_size,
            max_steps=max_steps,
            agent_view_size=agent_view_size,
            render_mode=render_mode,
        )
        view = agent_view_size
        self.action_space = spaces.Discrete(NUM_ACTIONS)
        self.observation_space = spaces.Dict(
            {
                "image": spaces.Box(0, 255, (view, view, 3), dtype=np.uint8),
                "direction": spaces.Discrete(4),
                "carrying": spaces.Box(
                    0,
                    np.array([max(OBJECT_TO_IDX.values()), max(COLOR_TO_IDX.values())]),
                    (2,),
                    dtype=np.uint8,
                ),
                "mission": text_space(256),
                "text": text_space(1024),
                "skill_status": spaces.Discrete(len(SkillStatus)),
                "oracle_plan": text_space(1024),
                "feasible_skills": text_space(2048),
            }
        )
        self.knowledge = AgentKnowledge(max_room_size, max_room_size, agent_view_size)
        self.door: Door | None = None
        self.goal_pos: tuple[int, int] = (-1, -1)
        self.behind_door: tuple[int, int] = (-1, -1)
        self._image = np.zeros((view, view, 3), dtype=np.uint8)
        self._run: _SkillRun | None = None
        self._skill_step_pending = False
        self._state: AgentState | None = None

    # -- layout ---------------------------------------------------------------------------
    def task_objects(self, door_color: str) -> list[WorldObj]:
        """The objects placed on the agent's side of the wall."""
        raise NotImplementedError

    def _gen_grid(self, width: int, height: int) -> None:
        for _ in range(MAX_LAYOUT_TRIES):
            if self._try_layout(width, height):
                self.mission = self.mission_text
                return
        raise RuntimeError("could not draw a solvable layout")  # not seen in practice

    def _try_layout(self, width: int, height: int) -> bool:
        room_w = int(self._rand_int(self.min_room_size, self.max_room_size + 1))
        room_h = int(self._rand_int(self.min_room_size, self.max_room_size + 1))
        self.grid = Grid(width, height)
        self.grid.wall_rect(0, 0, room_w, room_h)
        split = int(self._rand_int(2, room_w - 2))
        self.grid.vert_wall(split, 1, room_h - 2)
        door_y = int(self._rand_int(1, room_h - 1))
        self.door = Door(self._rand_elem(COLOR_NAMES), is_locked=True)
        self.put_obj(self.door, split, door_y)

        self.behind_door = (split + 1, door_y)
        if self.goal_behind_door:
            self.goal_pos = self.behind_door
        else:
            far_side = [(x, y) for x in range(split + 1, room_w - 1) for y in range(1, room_h - 1)]
            self.goal_pos = tuple(int(v) for v in self._rand_elem(far_side))
        self.put_obj(Goal(), *self.goal_pos)

        door_front = (split - 1, door_y)
        near_side = [(x, y) for x in range(1, split) for y in range(1, room_h - 1)]
        free = [cell for cell in near_side if cell != door_front]
        occupied = set()
        for obj in self.task_objects(self.door.color):
            if not free:
                return False
            cell = free.pop(int(self._rand_int(0, len(free))))
            self.put_obj(obj, *cell)
            occupied.add(cell)
        if not free:
            return False
        self.agent_pos = free.pop(int(self._rand_int(0, len(free))))
        self.agent_dir = int(self._rand_int(0, 4))
        return _solvable(set(near_side) - occupied, self.agent_pos, door_front, occupied)

    def load_layout(self, art: str, legend: dict[str, WorldObj] | None = None) -> dict[str, Any]:
        """Replace the current episode's grid by a hand-drawn one; returns the observation.

        One character per cell, rows top to bottom: `#` wall, space or `.` floor, `G` the
        goal, `>` `v` `<` `^` the agent facing right/down/left/up; any other character is
        looked up in `legend` (e.g. {"k": Key("red"), "L": Door("red", is_locked=True)}).
        The first door is the task's door. Used by tests and by anyone checking a controller
        on a known situation; the agent's map starts empty, as after a reset.
        """
        legend = legend or {}
        rows = art.strip("\n").split("\n")
        if len(rows) > self.height or max(map(len, rows)) > self.width:
            raise ValueError(f"layout larger than the {self.width}x{self.height} grid")
        self.grid = Grid(self.width, self.height)
        self.door, self.carrying = None, None
        for y, row in enumerate(rows):
            for x, char in enumerate(row):
                if char == "#":
                    self.grid.set(x, y, Wall())
                elif char == "G":
                    self.put_obj(Goal(), x, y)
                    self.goal_pos = (x, y)
                elif char in ">v<^":
                    self.agent_pos, self.agent_dir = (x, y), ">v<^".index(char)
                elif char in legend:
                    self.put_obj(legend[char], x, y)
                    if isinstance(legend[char], Door) and self.door is None:
                        self.door = legend[char]
                        self.behind_door = (x + 1, y)
                elif char not in " .":
                    raise ValueError(f"unknown layout character {char!r} at ({x}, {y})")
        if self.door is None:
            raise ValueError("a layout needs a door (give one in the legend)")
        self.knowledge.clear()
        self._run = None
        self.step_count = 0
        return self.gen_obs()

    # -- gymnasium API ------------------------------------------------------------------
    def reset(
        self, *, seed: int | None = None, options: dict[str, Any] | None = None
    ) -> tuple[dict[str, Any], dict[str, Any]]:
        self.knowledge.clear()
        self._run = None
        self._skill_step_pending = False
        return super().reset(seed=seed, options=options)

    def step(self, action: Any) -> tuple[dict[str, Any], float, bool, bool, dict[str, Any]]:
        if not self.action_space.contains(action):
            raise ValueError(f"action must be an integer in [0, {NUM_ACTIONS}), got {action!r}")
        skill_step = self._skill_step_pending
        self._skill_step_pending = False
        if not skill_step:
            self._run = None  # a low-level action interrupts any skill
        obs, reward, terminated, truncated, info = super().step(int(action))
        if skill_step:
            obs["skill_status"] = int(SkillStatus.RUNNING)
        return obs, float(reward), terminated, truncated, info

    def gen_obs(self) -> dict[str, Any]:
        """Minigrid calls this after every reset and step: update the agent's map too."""
        grid, vis_mask = self.gen_obs_grid()
        self._image = grid.encode(vis_mask)
        under = self.grid.get(*self.agent_pos)
        under_agent = under.encode() if under is not None else (EMPTY, 0, 0)
        self.knowledge.observe(self._image, self.agent_pos, self.agent_dir, under_agent)
        self._state = None
        return self.observe(SkillStatus.NONE)

    # -- observations -------------------------------------------------------------------
    def carried_identity(self) -> Identity | None:
        if self.carrying is None:
            return None
        return identity_of(OBJECT_TO_IDX[self.carrying.type], COLOR_TO_IDX[self.carrying.color])

    def agent_state(self) -> AgentState:
        if self._state is None:
            self._state = AgentState(
                self.knowledge, self.agent_pos, self.agent_dir, self.carried_identity()
            )
        return self._state

    def observe(self, skill_status: SkillStatus = SkillStatus.NONE) -> dict[str, Any]:
        carried = self.carried_identity()
        eager = self.compute_privileged
        return {
            "image": self._image,
            "direction": int(self.agent_dir),
            "carrying": np.array(carried if carried else (EMPTY, 0), dtype=np.uint8),
            "mission": self.mission,
            "text": self.knowledge.describe(carried),
            "skill_status": int(skill_status),
            "oracle_plan": self.privileged_observation("oracle_plan") if eager else "",
            "feasible_skills": self.privileged_observation("feasible_skills") if eager else "",
        }

    def privileged_observation(self, name: str) -> str:
        """`oracle_plan` or `feasible_skills` now (see SkillEnv.compute_privileged)."""
        if name == "oracle_plan":
            return "\n".join(oracle_plan(self))
        if name == "feasible_skills":
            return "\n".join(self.feasible_skills())
        raise KeyError(f"no privileged observation {name!r}; entries: oracle_plan, feasible_skills")

    def feasible_skills(self) -> list[str]:
        """Skills whose controller would take a step now (explore first, then per object)."""
        state = self.agent_state()
        candidates = [Skill("explore")]
        for identity, _, _ in self.knowledge.seen_objects():
            candidates.append(Skill("go to", identity))
            if identity[0] in PICKABLE:
                candidates.append(Skill("pick up", identity))
            if identity[0] in TOGGLEABLE:
                candidates.append(Skill("toggle", identity))
        return [skill.text for skill in candidates if decide(skill, state).action is not None]

    # -- skills -------------------------------------------------------------------------
    def skill_names(self) -> list[str]:
        return all_skill_phrases()

    def check_skill(self, skill: str) -> None:
        parse_skill(skill)

    def skill_action(self, skill: str) -> tuple[int | None, SkillStatus]:
        parsed = parse_skill(skill)
        if self._run is None or self._run.skill != parsed:
            self._run = _SkillRun(parsed, self.knowledge.identities())
        decision = decide(parsed, self.agent_state())
        if decision.action is None:
            self._run = None
            return None, decision.status
        self._run.acted = decision.completes
        self._skill_step_pending = True
        return decision.action, SkillStatus.RUNNING

    def skill_goal_reached(self, skill: str) -> bool:
        parsed = parse_skill(skill)
        run = self._run
        if parsed.verb == "explore":
            reached = run is not None and bool(self.knowledge.identities() - run.seen_at_start)
        elif parsed.verb == "toggle":
            reached = run is not None and run.acted
        else:
            reached = goal_reached(parsed, self.agent_state())
        if reached:
            self._run = None
        return reached


def _solvable(
    walkable: set[tuple[int, int]],
    start: tuple[int, int],
    door_front: tuple[int, int],
    objects: set[tuple[int, int]],
) -> bool:
    """The agent reaches the door's front and a cell next to every object (objects block)."""
    reached = {start}
    queue = deque([start])
    while queue:
        x, y = queue.popleft()
        for nxt in ((x + 1, y), (x - 1, y), (x, y + 1), (x, y - 1)):
            if nxt in walkable and nxt not in reached:
                reached.add(nxt)
                queue.append(nxt)
    if door_front not in reached:
        return False
    return all(
        any(n in reached for n in ((x + 1, y), (x - 1, y), (x, y + 1), (x, y - 1)))
        for x, y in objects
    )
