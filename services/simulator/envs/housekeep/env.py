"""The Housekeep rearrangement environment: a symbolic house, skill actions, partial observability.

A house comes from a real Housekeep episode (`data_dir` given) or is generated (`data_dir`
None). The agent starts outside every room knowing only the room names; going to a room
reveals its receptacles and the objects on them (with `observe_objects_on_entry=False`, the
objects on a receptacle are seen only by looking at it or going to it). Each skill is one
step (see `skills.py` for the phrases); travel between places costs their distance.

Observations: `text` (the context, `context.py`), `known_house` (the same, as JSON),
counters (`step`, `rooms_explored`, `receptacles_found`, `objects_found`, `correctly_placed`,
`correct_at_start`, `misplaced_at_start`, `holding`), metrics (`success_rate`,
`object_success`, `soft_score`, `distance`), `success` (every object is on a correct
receptacle), `skill_status`, what the agent knows as numbers laid out like the actions (for RL
agents on numbers, e.g. ELLM's): `slots` (0/1 flags: per room slot exists, explored, agent in
it; per receptacle slot found, inspected, agent at it; per object slot found, held),
`object_receptacles` (per object slot 1 + the receptacle slot it was seen on, 0 unknown or
held) and `receptacle_rooms` (per receptacle slot 1 + its room slot once found, else 0),
and the privileged Text entries
`oracle_plan`, `feasible_skills` and `correct_receptacles` (JSON: object -> correct receptacles).

Settings (constructor keywords, also world settings):
- `data_dir`: the Housekeep data (None: the copy $LLMRL_HOUSEKEEP_DATA names or `llmrl data
  get housekeep` wrote when a scene, split or episode is asked for, else procedural houses,
  shaped by `procedural`, a dict of `generate_house` ranges); `scene` (one scene), else
  `split` ("train", "val"), else every scene present; `episode`: an index into the scene's
  episodes, a list, or "start:stop" (None: any); each reset draws a scene and an episode
  with the env's seeded generator, and `reset(options={"scene": ..., "episode": ...})`
  picks one explicitly.
- `max_steps` (truncation), `observe_objects_on_entry`, `reward_weights`, `travel_cost`,
  `max_rooms`/`max_receptacles`/`max_objects` (the discrete action layout).

Reward per step, after LLM-Personalize: newly found objects + newly found receptacles
+ 10 x change in correctly placed objects (weights in `reward_weights`), minus
`travel_cost` x metres walked.
"""

from __future__ import annotations

import json
import string
from pathlib import Path
from typing import Any, ClassVar

import numpy as np
from gymnasium import spaces

from llmrl.common.registry import registry

from ..base import SkillEnv, SkillStatus
from . import data as housekeep_data
from .context import render_context
from .house import House, distance
from .metrics import is_correct, rearrangement_metrics
from .procedural import generate_house
from .skills import MISSION_COMPLETE, SKILL_TEMPLATES, ActionLayout, Skill, parse_skill
from .solver import carry_steps, exploration_steps
from .state import KnownHouse

TEXT_CHARSET = frozenset(string.printable)
DEFAULT_REWARD_WEIGHTS = {"objects_found": 1.0, "receptacles_found": 1.0, "placement": 10.0}
TEXT_ENTRIES = ("text", "known_house", "oracle_plan", "feasible_skills", "correct_receptacles")
COUNTERS = (
    "step",
    "rooms_explored",
    "receptacles_found",
    "objects_found",
    "correctly_placed",
    "correct_at_start",
    "misplaced_at_start",
    "holding",
)
FLOAT_METRICS = ("success_rate", "object_success", "soft_score", "distance")


def parse_episodes(episode: int | list[int] | str | None) -> int | list[int] | None:
    """`episode`: an index, a list of indices, or a range "start:stop" (e.g. "0:100")."""
    if isinstance(episode, str):
        start, sep, stop = episode.partition(":")
        try:
            if not sep:
                return int(episode)
            return list(range(int(start or 0), int(stop)))
        except ValueError:
            raise ValueError(
                "episode must be an index, a list of indices or a range 'start:stop', "
                f"got {episode!r}"
            ) from None
    if isinstance(episode, (list, tuple)):
        if not episode:
            raise ValueError("episode: an empty list of episodes")
        return [int(e) for e in episode]
    return None if episode is None else int(episode)


@registry.register_env(
    "Housekeep",
    description="Housekeep rearrangement: find misplaced objects and put them where people would",
    kwargs={},
    tags=("housekeep", "text", "skills", "llm-personalize"),
)
class HousekeepEnv(SkillEnv):
    metadata: ClassVar[dict[str, Any]] = {"render_modes": ["ansi"]}
    privileged_observations: ClassVar[tuple[str, ...]] = (
        "oracle_plan",
        "feasible_skills",
        "correct_receptacles",
    )

    def __init__(
        self,
        data_dir: str | Path | None = None,
        scene: str | None = None,
        split: str | None = None,
        episode: int | list[int] | str | None = None,
        max_steps: int = 60,
        observe_objects_on_entry: bool = True,
        reward_weights: dict[str, float] | None = None,
        travel_cost: float = 0.0,
        max_rooms: int = 12,
        max_receptacles: int = 100,
        max_objects: int = 12,
        text_max_length: int = 16384,
        procedural: dict[str, Any] | None = None,
        render_mode: str | None = None,
    ) -> None:
        if max_steps < 1:
            raise ValueError(f"max_steps must be a positive integer, got {max_steps}")
        unknown = set(reward_weights or {}) - set(DEFAULT_REWARD_WEIGHTS)
        if unknown:
            raise ValueError(
                f"reward_weights: unknown keys {sorted(unknown)}; "
                f"allowed: {', '.join(DEFAULT_REWARD_WEIGHTS)}"
            )
        self.episode = parse_episodes(episode)
        if not data_dir and (scene or split or self.episode is not None):
            # a scene, split or episode asks for the real data: the copy this machine has
            data_dir = housekeep_data.default_data_dir()
            if data_dir is None:
                raise ValueError(
                    "scene, split and episode need the Housekeep data (data_dir; procedural "
                    f"houses have none): {housekeep_data.missing_hint('housekeep')}"
                )
        self.data_dir = housekeep_data.check_data_dir(data_dir) if data_dir else None
        self.scenes = self._choose_scenes(scene, split)
        self.max_steps = int(max_steps)
        self.observe_objects_on_entry = observe_objects_on_entry
        self.reward_weights = {**DEFAULT_REWARD_WEIGHTS, **(reward_weights or {})}
        self.travel_cost = float(travel_cost)
        self.procedural = dict(procedural or {})
        self.render_mode = render_mode
        self.layout = ActionLayout(max_rooms, max_receptacles, max_objects)
        self.action_space = spaces.Discrete(self.layout.size)
        text = spaces.Text(max_length=text_max_length, min_length=0, charset=TEXT_CHARSET)
        entries: dict[str, spaces.Space] = {name: text for name in TEXT_ENTRIES}
        entries["skill_status"] = spaces.Discrete(len(SkillStatus))
        entries["success"] = spaces.Discrete(2)  # every object is on a correct receptacle
        for name in COUNTERS:
            entries[name] = spaces.Box(0, np.iinfo(np.int32).max, shape=(), dtype=np.int32)
        entries["success_rate"] = spaces.Box(-1e4, 100.0, shape=(), dtype=np.float32)
        for name in ("object_success", "soft_score"):
            entries[name] = spaces.Box(0.0, 1.0, shape=(), dtype=np.float32)
        entries["distance"] = spaces.Box(0.0, 1e6, shape=(), dtype=np.float32)
        rooms, recs, objs = max_rooms, max_receptacles, max_objects
        entries["slots"] = spaces.Box(0, 1, shape=(3 * rooms + 3 * recs + 2 * objs,), dtype=np.int8)
        entries["object_receptacles"] = spaces.Box(0, recs, shape=(objs,), dtype=np.int32)
        entries["receptacle_rooms"] = spaces.Box(0, rooms, shape=(recs,), dtype=np.int32)
        self.observation_space = spaces.Dict(entries)
        self.house: House | None = None

    # -- choosing houses ------------------------------------------------------------------
    def _choose_scenes(self, scene: str | None, split: str | None) -> list[str]:
        if self.data_dir is None:
            return []
        if scene is not None:
            housekeep_data.scene_split(self.data_dir, scene)  # validates the name
            return [scene]
        if split is not None:
            return housekeep_data.split_scenes(self.data_dir, split)
        return sorted(housekeep_data.available_scenes(self.data_dir))

    def _new_house(self, options: dict[str, Any]) -> House:
        rng = self.np_random
        if self.data_dir is None:
            return generate_house(int(rng.integers(2**31)), **self.procedural)
        scene = options.get("scene") or self.scenes[int(rng.integers(len(self.scenes)))]
        episode = options.get("episode", self.episode)
        if episode is None:
            episode = int(rng.integers(len(housekeep_data.load_episodes(self.data_dir, scene))))
        elif isinstance(episode, (list, tuple)):
            episode = int(episode[int(rng.integers(len(episode)))])
        return housekeep_data.load_house(self.data_dir, scene, int(episode))

    # -- gymnasium API ----------------------------------------------------------------------
    def reset(
        self, *, seed: int | None = None, options: dict[str, Any] | None = None
    ) -> tuple[dict[str, Any], dict[str, Any]]:
        super().reset(seed=seed)
        options = dict(options or {})
        house = options["house"] if "house" in options else self._new_house(options)
        self.layout.check_fits(house)
        self.house = house
        self.placement: list[int | None] = list(house.start)
        self.held: int | None = None
        self.room: str | None = None
        self.at: int | None = None
        self.position = house.start_position
        self.explored: set[str] = set()
        self.found_receptacles: set[int] = set()
        self.inspected: set[int] = set()
        self.found_objects: set[int] = set()
        self.touched: set[int] = set()
        self.steps = 0
        self.distance = 0.0
        self.last_action: str | None = None
        self.last_feedback: str | None = None
        self._last_step: tuple[int, bool] | None = None  # (action, succeeded)
        self._pending_skill: tuple[int, str] | None = None  # (action, phrase) from skill_action
        self._correct_now = house.correct_at_start()
        return self.observe(SkillStatus.NONE), self._info(0, 0, 0, True, "")

    def step(self, action: Any) -> tuple[dict[str, Any], float, bool, bool, dict[str, Any]]:
        if self.house is None:
            raise RuntimeError("call reset() before step()")
        action = int(action)
        phrase = self.layout.skill(action, self.house)
        if self._pending_skill is not None and self._pending_skill[0] == action:
            phrase = self._pending_skill[1]  # keep the planner's own words for the context
        self._pending_skill = None
        before = (len(self.found_objects), len(self.found_receptacles), self._correct_now)
        terminated = False
        if phrase is None and action == self.layout.unknown_name_action:
            # sent by planners to charge a step for a plan line that is no skill
            phrase, failure = "(not a skill)", "that is not a skill; use the skills listed"
        elif phrase is None:
            failure = f"action {action} names nothing in this house"
            phrase = f"action {action}"
        else:
            skill = parse_skill(phrase)
            failure = self._failure(skill)
            if failure is None:
                terminated = self._apply(skill)
        self.steps += 1
        self.last_action, self.last_feedback = phrase, failure
        self._last_step = (action, failure is None)
        self._correct_now = sum(
            is_correct(self.house, self.placement, o) for o in range(len(self.house.objects))
        )
        new_objects = len(self.found_objects) - before[0]
        new_receptacles = len(self.found_receptacles) - before[1]
        placement_delta = self._correct_now - before[2]
        weights = self.reward_weights
        reward = (
            weights["objects_found"] * new_objects
            + weights["receptacles_found"] * new_receptacles
            + weights["placement"] * placement_delta
        )
        if self.travel_cost:
            reward -= self.travel_cost * self._travel
        truncated = not terminated and self.steps >= self.max_steps
        status = SkillStatus.DONE if failure is None else SkillStatus.INFEASIBLE
        info = self._info(new_objects, new_receptacles, placement_delta, failure is None, phrase)
        info["message"] = failure or ""
        return self.observe(status), float(reward), terminated, truncated, info

    def render(self) -> str:
        return self._context()

    # -- skills -----------------------------------------------------------------------------
    def skill_names(self) -> list[str]:
        """The skill templates; `feasible_skills` gives the grounded phrases possible now."""
        return list(SKILL_TEMPLATES)

    def check_skill(self, skill: str) -> None:
        parse_skill(skill)

    def skill_action(self, skill: str) -> tuple[int | None, SkillStatus]:
        parsed = parse_skill(skill)
        action = self.layout.action(parsed, self._house())
        if action is None:
            action = self.layout.unknown_name_action
        self._pending_skill = (action, parsed.phrase())
        feasible = action != self.layout.unknown_name_action and self._failure(parsed) is None
        return action, SkillStatus.RUNNING if feasible else SkillStatus.INFEASIBLE

    def skill_goal_reached(self, skill: str) -> bool:
        action = self.layout.action(parse_skill(skill), self._house())
        return self._last_step is not None and self._last_step == (action, True)

    def _house(self) -> House:
        if self.house is None:
            raise RuntimeError("call reset() before using skills")
        return self.house

    def _failure(self, skill: Skill) -> str | None:
        """Why `skill` cannot be carried out now, or None if it can."""
        house = self._house()
        if skill.verb == "mission_complete":
            return None
        name = skill.args[0]
        if skill.verb == "go_to_room" or (skill.verb == "go_to" and name in house.rooms):
            if name not in house.rooms:
                return f"there is no room {name}; rooms: {', '.join(house.rooms)}"
            return None
        if skill.verb == "go_to":
            if self._known_receptacle(name) is not None:
                return None
            obj = self._known_object(name)
            if obj is None:
                return f"you have not found a receptacle or object named {name}"
            return f"you are holding {name}" if obj == self.held else None
        if skill.verb == "look_at":
            rec = self._known_receptacle(name)
            if rec is None:
                return f"you have not found a receptacle named {name}"
            room = house.receptacles[rec].room
            return None if room == self.room else f"{name} is in {room}; go to room {room} first"
        if skill.verb == "pick_up":
            obj = self._known_object(name)
            if obj is None:
                return f"you have not found an object named {name}"
            if obj == self.held:
                return f"you are already holding {name}"
            if self.held is not None:
                held = house.objects[self.held].name
                return f"your hand is full (holding {held}); place it first"
            if self.placement[obj] != self.at:
                return f"{name} is not here; go to {name} first"
            return None
        obj_name, rec_name = skill.args  # place
        obj = house.object_index.get(obj_name)
        if obj is None or obj != self.held:
            return f"you are not holding {obj_name}"
        rec = self._known_receptacle(rec_name)
        if rec is None:
            return f"you have not found a receptacle named {rec_name}"
        return None if self.at == rec else f"you are not at {rec_name}; go to {rec_name} first"

    def _known_receptacle(self, name: str) -> int | None:
        index = self._house().receptacle_index.get(name)
        return index if index in self.found_receptacles else None

    def _known_object(self, name: str) -> int | None:
        index = self._house().object_index.get(name)
        return index if index in self.found_objects else None

    def _apply(self, skill: Skill) -> bool:
        """Carry out a feasible skill; returns whether the episode ends."""
        house = self._house()
        self._travel = 0.0
        if skill.verb == "mission_complete":
            return True
        name = skill.args[0]
        if skill.verb == "go_to_room" or (skill.verb == "go_to" and name in house.rooms):
            self._move(house.room_positions[name], name, None)
        elif skill.verb == "go_to":
            rec = house.receptacle_index.get(name)
            if rec is None:
                rec = self.placement[house.object_index[name]]
            assert rec is not None
            self._move(house.receptacles[rec].position, house.receptacles[rec].room, rec)
            self._inspect(rec)
        elif skill.verb == "look_at":
            self._inspect(house.receptacle_index[name])
        elif skill.verb == "pick_up":
            obj = house.object_index[name]
            self.held, self.placement[obj] = obj, None
            self.touched.add(obj)
        else:  # place
            assert self.held is not None
            self.placement[self.held], self.held = self.at, None
        return False

    def _move(self, position: tuple[float, float], room: str, at: int | None) -> None:
        self._travel = distance(self.position, position)
        self.distance += self._travel
        self.position, self.room, self.at = position, room, at
        if room not in self.explored:
            self.explored.add(room)
            for rec in self._house().room_receptacles[room]:
                self.found_receptacles.add(rec)
                if self.observe_objects_on_entry:
                    self._inspect(rec)

    def _inspect(self, rec: int) -> None:
        self.inspected.add(rec)
        self.found_objects.update(o for o, r in enumerate(self.placement) if r == rec)

    _travel = 0.0

    # -- observations -----------------------------------------------------------------------
    def known_house(self) -> KnownHouse:
        house = self._house()
        return KnownHouse(
            rooms=list(house.rooms),
            explored_rooms=[room for room in house.rooms if room in self.explored],
            receptacles={
                house.receptacles[r].name: house.receptacles[r].room
                for r in sorted(self.found_receptacles)
            },
            inspected=[house.receptacles[r].name for r in sorted(self.inspected)],
            objects={
                house.objects[o].name: house.receptacles[r].name
                for o in sorted(self.found_objects)
                if (r := self.placement[o]) is not None
            },
            held=None if self.held is None else house.objects[self.held].name,
            room=self.room,
            at=None if self.at is None else house.receptacles[self.at].name,
        )

    def correct_receptacles(self) -> dict[str, list[str]]:
        house = self._house()
        if self._correct_cache is None or self._correct_cache[0] is not house:
            objects = enumerate(house.objects)
            correct = {obj.name: house.allowed_receptacles(o) for o, obj in objects}
            self._correct_cache = (house, correct, json.dumps(correct, separators=(",", ":")))
        return self._correct_cache[1]

    _correct_cache: tuple[House, dict[str, list[str]], str] | None = None

    def oracle_plan(self) -> list[str]:
        """Explore what is left, then carry every misplaced object (privileged knowledge)."""
        house = self._house()
        known = self.known_house()
        by_room = None  # entering a room shows its objects: no receptacle needs a look
        if not self.observe_objects_on_entry:
            by_room = {
                room: [house.receptacles[r].name for r in recs]
                for room, recs in house.room_receptacles.items()
            }
        explore = exploration_steps(known, by_room)
        future = self._fully_known()
        last_room = next((s for s in reversed(explore) if s.startswith("go to room ")), None)
        if last_room is not None:
            future.room, future.at = last_room.removeprefix("go to room "), None
        return explore + carry_steps(future, self.correct_receptacles())

    def _fully_known(self) -> KnownHouse:
        house = self._house()
        known = self.known_house()
        known.explored_rooms = list(house.rooms)
        known.receptacles = {r.name: r.room for r in house.receptacles}
        known.inspected = list(known.receptacles)
        known.objects = {
            house.objects[o].name: house.receptacles[r].name
            for o, r in enumerate(self.placement)
            if r is not None
        }
        return known

    def _correct_json(self) -> str:
        self.correct_receptacles()
        assert self._correct_cache is not None
        return self._correct_cache[2]

    def feasible_skills(self) -> list[str]:
        house = self._house()
        known = self.known_house()
        skills = [f"go to room {room}" for room in house.rooms]
        skills += [f"go to {rec}" for rec in known.receptacles]
        skills += [f"go to {obj}" for obj in known.objects]
        if self.room is not None:
            skills += [f"look at {rec}" for rec in known.receptacles_in(self.room)]
        if self.held is None and self.at is not None:
            skills += [
                f"pick up {obj}" for obj in known.objects_on(house.receptacles[self.at].name)
            ]
        if self.held is not None and self.at is not None:
            skills.append(f"place {known.held} on {house.receptacles[self.at].name}")
        skills.append(MISSION_COMPLETE)
        return skills

    def _context(self) -> str:
        return render_context(
            self.known_house(),
            steps_left=max(0, self.max_steps - self.steps),
            last_action=self.last_action,
            last_feedback=self.last_feedback,
        )

    def _numeric_knowledge(self) -> dict[str, np.ndarray]:
        """`slots`, `object_receptacles`, `receptacle_rooms` (module docstring): what the agent
        knows, indexed as the action layout indexes rooms, receptacles and objects."""
        house = self._house()
        layout = self.layout
        rooms = np.zeros((layout.max_rooms, 3), np.int8)
        rooms[: len(house.rooms), 0] = 1
        for i, room in enumerate(house.rooms):
            rooms[i, 1] = room in self.explored
            rooms[i, 2] = room == self.room
        recs = np.zeros((layout.max_receptacles, 3), np.int8)
        receptacle_rooms = np.zeros(layout.max_receptacles, np.int32)
        for r in self.found_receptacles:
            recs[r, 0] = 1
            receptacle_rooms[r] = 1 + house.rooms.index(house.receptacles[r].room)
        for r in self.inspected:
            recs[r, 1] = 1
        if self.at is not None:
            recs[self.at, 2] = 1
        objs = np.zeros((layout.max_objects, 2), np.int8)
        object_receptacles = np.zeros(layout.max_objects, np.int32)
        for o in self.found_objects:
            objs[o, 0] = 1
            if self.placement[o] is not None:
                object_receptacles[o] = 1 + self.placement[o]
        if self.held is not None:
            objs[self.held, 1] = 1
        return {
            "slots": np.concatenate([rooms.ravel(), recs.ravel(), objs.ravel()]),
            "object_receptacles": object_receptacles,
            "receptacle_rooms": receptacle_rooms,
        }

    def observe(self, skill_status: SkillStatus = SkillStatus.NONE) -> dict[str, Any]:
        house = self._house()
        metrics = rearrangement_metrics(house, self.placement, self.touched)
        counters = {
            "step": self.steps,
            "rooms_explored": len(self.explored),
            "receptacles_found": len(self.found_receptacles),
            "objects_found": len(self.found_objects),
            "correctly_placed": metrics.correctly_placed,
            "correct_at_start": metrics.correct_at_start,
            "misplaced_at_start": metrics.misplaced_at_start,
            "holding": int(self.held is not None),
        }
        obs: dict[str, Any] = {
            "text": self._context(),
            "known_house": self.known_house().to_json(),
            "oracle_plan": "\n".join(self.oracle_plan()),
            "feasible_skills": "\n".join(self.feasible_skills()),
            "correct_receptacles": self._correct_json(),
            "skill_status": int(skill_status),
            "success": int(metrics.correctly_placed == len(house.objects)),
        }
        obs.update({name: np.asarray(value, dtype=np.int32) for name, value in counters.items()})
        obs["success_rate"] = np.asarray(metrics.success_rate, dtype=np.float32)
        obs["object_success"] = np.asarray(metrics.object_success, dtype=np.float32)
        obs["soft_score"] = np.asarray(metrics.soft_score, dtype=np.float32)
        obs["distance"] = np.asarray(self.distance, dtype=np.float32)
        obs.update(self._numeric_knowledge())
        return obs

    def _info(
        self,
        new_objects: int,
        new_receptacles: int,
        placement_delta: int,
        success: bool,
        skill: str,
    ) -> dict[str, Any]:
        house = self._house()
        metrics = rearrangement_metrics(house, self.placement, self.touched)
        return {
            "skill": skill,
            "skill_success": success,
            "new_objects_found": new_objects,
            "new_receptacles_found": new_receptacles,
            "placement_delta": placement_delta,
            "objects_found": len(self.found_objects),
            "receptacles_found": len(self.found_receptacles),
            "rooms_explored": len(self.explored),
            "distance": self.distance,
            "house": house.source,
            **metrics.as_dict(),
        }
