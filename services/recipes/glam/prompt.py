"""GLAM's prompt (Carta et al., ICML 2023): what the LLM policy reads at every step.

The format, one line each, ending with the open action line that the candidates complete:

    Possible action of the agent: turn left, turn right, go forward, pick up, drop, toggle
    Goal of the agent: go to the red ball
    Observation 0: You see a wall 2 steps forward, You see a red ball 1 step left
    Action 0: go forward
    Observation 1: You see a wall 1 step forward, You see a red ball 1 step left
    Action 1: turn left
    Observation 2: You see a red ball 1 step forward
    Action 2:

* the last `HISTORY_OBSERVATIONS` (3) observations and the `HISTORY_OBSERVATIONS - 1` (2)
  actions taken between them, numbered from 0 in the prompt; the history is cleared when an
  episode ends;
* an observation is the env's `text` on one line: sentences on separate lines are joined by
  ", " (the original's form, "You see a wall 2 steps forward, You see a red ball 1 step left"),
  a trailing "." is dropped; BabyAI-Text's own one-line text ("You see a wall 2 steps
  forward, a red ball 1 step left. You carry nothing.") is kept as it is otherwise;
* each candidate is scored as the continuation " <phrase>" of the final "Action i:".
"""

from __future__ import annotations

from collections.abc import Sequence

HISTORY_OBSERVATIONS = 3

# Action phrase sets by name: the policy's candidates. "babyai": BabyAI-Text's six actions.
ACTION_SETS: dict[str, tuple[str, ...]] = {
    "babyai": ("turn left", "turn right", "go forward", "pick up", "drop", "toggle"),
}


def action_phrases(name: str) -> tuple[str, ...]:
    """The phrases of action set `name` (a ValueError names the known sets)."""
    if name not in ACTION_SETS:
        raise ValueError(
            f"action_set: unknown action phrase set {name!r}; known: {', '.join(ACTION_SETS)}"
        )
    return ACTION_SETS[name]


def observation_sentence(text: str) -> str:
    """The env's view text (one sentence a line) as one line of comma-joined sentences."""
    return ", ".join(line.strip().rstrip(".") for line in text.splitlines() if line.strip())


def glam_prompt(
    phrases: Sequence[str],
    mission: str,
    observations: Sequence[str],
    actions: Sequence[str],
) -> str:
    """The prompt for the next action: `observations` are the episode's so far (oldest
    first, already sentences), `actions` the phrases taken after each but the last."""
    if len(actions) != len(observations) - 1:
        raise ValueError(
            f"actions: expected one fewer than observations ({len(observations)}), "
            f"got {len(actions)}"
        )
    observations = list(observations)[-HISTORY_OBSERVATIONS:]
    actions = list(actions)[len(actions) - (len(observations) - 1) :] if actions else []
    lines = [
        f"Possible action of the agent: {', '.join(phrases)}",
        f"Goal of the agent: {mission}",
    ]
    for i, observation in enumerate(observations):
        lines.append(f"Observation {i}: {observation}")
        lines.append(f"Action {i}:" + (f" {actions[i]}" if i < len(actions) else ""))
    return "\n".join(lines)


class PromptHistory:
    """One env's episode so far (its mission, observations and actions), as GLAM's prompt."""

    def __init__(self, phrases: Sequence[str]) -> None:
        self.phrases = tuple(phrases)
        self.mission = ""
        self.observations: list[str] = []
        self.actions: list[str] = []

    def start(self, mission: str, text: str) -> None:
        """A new episode (the history is cleared)."""
        self.mission = mission
        self.observations = [observation_sentence(text)]
        self.actions = []

    def advance(self, action: str, text: str) -> None:
        """`action` was taken and `text` observed (the history keeps what the prompt shows)."""
        self.actions = [*self.actions, action][-(HISTORY_OBSERVATIONS - 1) :]
        self.observations = [*self.observations, observation_sentence(text)][-HISTORY_OBSERVATIONS:]

    def prompt(self) -> str:
        return glam_prompt(self.phrases, self.mission, self.observations, self.actions)
