"""Captions of Crafter states and transitions, in ELLM's words (pure functions, no crafter).

State caption: up to four sentences, lower case, each ending in a full stop, in this order
(a sentence whose list would be empty is left out, except the first):

    you see <things>.                     what the local view (9x7 cells) holds
    you are targeting <thing>.            what is on the cell the player faces
    you have in your inventory <items>.   the items held (not the vital statistics)
    you feel <feelings>.                  the vital statistics below `status_threshold`
    you are sleeping.                     while asleep

e.g. "you see grass, tree, and water. you are targeting tree. you have in your inventory wood,
plant. you feel thirsty."

* <things>: the distinct things in view, sorted by name (so that the caption changes only when
  what is in view changes, which keeps an LLM's cache warm), joined as "a", "a and b", "a, b,
  and c"; "nothing" when the view holds none. The player, sand and arrows are left out (as in
  ELLM: nothing to act on); the table is called "crafting table".
* <thing>: a creature or object on the faced cell, else its material; nothing is said when that
  is path or sand, or outside the world.
* <items>: the held items in crafter's inventory order, without counts; underscores become
  spaces and the sapling is called "plant" (ELLM's word), e.g. "wood, plant, wood pickaxe".
* <feelings>: "hurt" (health), "hungry" (food), "thirsty" (drink), "sleepy" (energy) for each
  vital statistic below the threshold (ELLM: 9, i.e. below its maximum).

Transition caption: what the last action achieved, as ELLM's goal phrases (`vocabulary.py`),
or "" when it achieved nothing (moves, no-ops, a failed attempt):

    chop tree, chop grass (a sapling was collected), mine stone|coal|iron|diamond, drink water,
    eat plant, attack cow|zombie|skeleton (a hit, whether or not it kills), place stone|crafting
    table|furnace|plant, make wood|stone|iron pickaxe|sword, sleep (fell asleep), wake up

Two achievements in one step (waking up, then chopping) are joined by " and ".
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping

import numpy as np

from .vocabulary import ACHIEVEMENT_PHRASES, ACHIEVEMENTS, INVENTORY_ITEMS, SEMANTIC_NAMES, VITALS

NOT_SEEN = frozenset({"none", "player", "sand", "arrow"})
NOT_TARGETED = frozenset({"none", "player", "path", "sand"})
FEELINGS = {"health": "hurt", "food": "hungry", "drink": "thirsty", "energy": "sleepy"}
ITEM_WORDS = {"sapling": "plant"}
THING_WORDS = {"table": "crafting table"}


def list_phrase(words: list[str]) -> str:
    """ "a", "a and b", "a, b, and c"."""
    if len(words) <= 2:
        return " and ".join(words)
    return ", ".join(words[:-1]) + ", and " + words[-1]


def things_in_view(local_map: np.ndarray) -> list[str]:
    """The distinct things a local semantic map shows, by crafter's names, sorted."""
    ids = np.unique(np.asarray(local_map))
    names = {SEMANTIC_NAMES[i] for i in ids.tolist() if 0 <= i < len(SEMANTIC_NAMES)}
    return sorted(names - NOT_SEEN)


def state_caption(
    local_map: np.ndarray,
    target: str | None,
    inventory: Mapping[str, int],
    status_threshold: int = 9,
    sleeping: bool = False,
) -> str:
    """The state caption (module docstring) of a local semantic map, the faced thing's name
    (crafter's: "tree", "cow", "table"...; None outside the world) and the inventory."""
    seen = sorted(THING_WORDS.get(name, name) for name in things_in_view(local_map))
    sentences = [f"you see {list_phrase(seen) or 'nothing'}."]
    if target is not None and target not in NOT_TARGETED:
        sentences.append(f"you are targeting {THING_WORDS.get(target, target)}.")
    held = [
        ITEM_WORDS.get(item, item).replace("_", " ")
        for item in INVENTORY_ITEMS
        if item not in VITALS and inventory.get(item, 0) > 0
    ]
    if held:
        sentences.append(f"you have in your inventory {', '.join(held)}.")
    feelings = [FEELINGS[vital] for vital in VITALS if inventory.get(vital, 0) < status_threshold]
    if feelings:
        sentences.append(f"you feel {', '.join(feelings)}.")
    if sleeping:
        sentences.append("you are sleeping.")
    return " ".join(sentences)


def transition_caption(
    achieved: Iterable[str], hit: str | None = None, fell_asleep: bool = False
) -> str:
    """The transition caption (module docstring) of one step: `achieved` are the achievements
    whose counters the step raised, `hit` the creature the action damaged (if any),
    `fell_asleep` whether the player went to sleep."""
    done = set(achieved)
    unknown = done - set(ACHIEVEMENTS)
    if unknown:
        raise ValueError(f"achieved: unknown achievements {sorted(unknown)}")
    phrases = ["wake up"] if "wake_up" in done else []
    if fell_asleep:
        phrases.append("sleep")
    phrases += [ACHIEVEMENT_PHRASES[name] for name in ACHIEVEMENTS if name in done - {"wake_up"}]
    if hit is not None and f"attack {hit}" not in phrases:
        phrases.append(f"attack {hit}")
    return " and ".join(phrases)
