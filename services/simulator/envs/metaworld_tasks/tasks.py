"""KALM's Meta-World tasks, grouped as the paper does, and 20 instructions per task.

The tasks are Meta-World v3's (the `metaworld` package, 3.x; KALM used v2, whose observation
differs, see `llmrl.recipes.kalm.released`):

  training     KALM's 10: reach, push, pick-place, button-press, door-unlock, door-open,
               window-open, faucet-open, coffee-push, coffee-button
  unseen-easy  close variants of them: the wall versions (reach-wall, push-wall,
               pick-place-wall, button-press-wall) and the opposite motions (door-lock,
               door-close, window-close, faucet-close)
  unseen-hard  new skills: hammer, soccer, sweep-into, basketball, push-back, coffee-pull
               (v3 has no make-coffee task)

Instructions (written for this project): 4 descriptions of each task x 5 sentence frames = 20.
"""

from __future__ import annotations

TASK_LEVELS: dict[str, tuple[str, ...]] = {
    "training": (
        "reach",
        "push",
        "pick-place",
        "button-press",
        "door-unlock",
        "door-open",
        "window-open",
        "faucet-open",
        "coffee-push",
        "coffee-button",
    ),
    "unseen-easy": (
        "reach-wall",
        "push-wall",
        "pick-place-wall",
        "button-press-wall",
        "door-lock",
        "door-close",
        "window-close",
        "faucet-close",
    ),
    "unseen-hard": ("hammer", "soccer", "sweep-into", "basketball", "push-back", "coffee-pull"),
}
TASKS: tuple[str, ...] = tuple(t for tasks in TASK_LEVELS.values() for t in tasks)

FRAMES = (
    "{}",
    "Please {}",
    "Can you {}?",
    "Your task is to {}",
    "I need the robot to {}",
)

DESCRIPTIONS: dict[str, tuple[str, ...]] = {
    "reach": (
        "reach the goal position",
        "move the gripper to the target point",
        "bring the arm's hand to the goal",
        "touch the target location with the gripper",
    ),
    "push": (
        "push the puck to the goal",
        "slide the puck over to the target",
        "shove the puck to the goal position",
        "move the puck to the target by pushing it",
    ),
    "pick-place": (
        "pick up the puck and place it at the goal",
        "grab the puck and put it at the target",
        "lift the puck and set it down on the goal",
        "take the puck and carry it to the target position",
    ),
    "button-press": (
        "press the button",
        "push the button in",
        "hit the button with the gripper",
        "press down the button from the front",
    ),
    "door-unlock": (
        "unlock the door",
        "turn the lock of the door open",
        "rotate the door lock to unlock it",
        "open the lock on the door",
    ),
    "door-open": (
        "open the door",
        "pull the door open",
        "swing the door open by its handle",
        "open the door wide",
    ),
    "window-open": (
        "open the window",
        "slide the window open",
        "push the window to open it",
        "move the window sash to open it",
    ),
    "faucet-open": (
        "open the faucet",
        "turn the faucet on",
        "rotate the faucet handle to open it",
        "turn on the tap",
    ),
    "coffee-push": (
        "push the coffee mug under the machine",
        "slide the mug to the coffee machine",
        "move the cup under the coffee machine",
        "shove the coffee cup to the machine",
    ),
    "coffee-button": (
        "press the button of the coffee machine",
        "push the coffee machine's button",
        "start the coffee machine with its button",
        "hit the button on the coffee machine",
    ),
    "reach-wall": (
        "reach the goal behind the wall",
        "move the gripper over the wall to the target",
        "bring the hand to the goal past the wall",
        "touch the target on the other side of the wall",
    ),
    "push-wall": (
        "push the puck around the wall to the goal",
        "slide the puck past the wall to the target",
        "move the puck to the goal behind the wall",
        "shove the puck around the wall to the target position",
    ),
    "pick-place-wall": (
        "pick up the puck and place it at the goal over the wall",
        "grab the puck and carry it over the wall to the target",
        "lift the puck across the wall and set it on the goal",
        "take the puck past the wall to the target position",
    ),
    "button-press-wall": (
        "press the button behind the wall",
        "push the button that sits past the wall",
        "reach around the wall and press the button",
        "hit the button on the far side of the wall",
    ),
    "door-lock": (
        "lock the door",
        "turn the lock of the door closed",
        "rotate the door lock down to lock it",
        "secure the door with its lock",
    ),
    "door-close": (
        "close the door",
        "push the door shut",
        "swing the door closed",
        "shut the open door",
    ),
    "window-close": (
        "close the window",
        "slide the window shut",
        "push the window closed",
        "move the window sash to close it",
    ),
    "faucet-close": (
        "close the faucet",
        "turn the faucet off",
        "rotate the faucet handle to close it",
        "turn off the tap",
    ),
    "hammer": (
        "hammer the nail into the wall",
        "pick up the hammer and drive the nail in",
        "use the hammer to knock the nail in",
        "grab the hammer and hit the nail",
    ),
    "soccer": (
        "kick the ball into the goal",
        "push the soccer ball into the net",
        "score a goal with the ball",
        "move the ball into the soccer goal",
    ),
    "sweep-into": (
        "sweep the puck into the hole",
        "push the puck into the hole in the table",
        "slide the puck into the opening",
        "sweep the block into the hole",
    ),
    "basketball": (
        "dunk the ball into the basket",
        "put the basketball through the hoop",
        "pick up the ball and drop it in the basket",
        "score a basket with the ball",
    ),
    "push-back": (
        "push the puck back to the goal",
        "slide the puck backwards to the target",
        "move the puck back towards the goal",
        "push the block back to the target position",
    ),
    "coffee-pull": (
        "pull the coffee mug out from the machine",
        "slide the mug away from the coffee machine",
        "take the cup out from under the coffee machine",
        "draw the coffee cup back to the target",
    ),
}


def instructions(task: str) -> list[str]:
    """The 20 instructions of `task`."""
    if task not in DESCRIPTIONS:
        raise ValueError(f"task: unknown task {task!r}; tasks: {', '.join(TASKS)}")
    texts = []
    for frame in FRAMES:
        for description in DESCRIPTIONS[task]:
            text = frame.format(description)
            texts.append(text[0].upper() + text[1:])
    return texts


def level_of(task: str) -> str:
    """The level (training, unseen-easy, unseen-hard) a task belongs to."""
    for level, tasks in TASK_LEVELS.items():
        if task in tasks:
            return level
    raise ValueError(f"task: unknown task {task!r}; tasks: {', '.join(TASKS)}")
