"""GLAM's generalisation tests (Carta et al. 2023) as variants of the BabyAI-Text envs.

An env made with `variant=<name>` rewrites the words the agent reads and acts with: the view
(`text`), the goal (`mission`) and the six action phrases (`skill` accepts the variant's
phrases and only those, `action_phrases` lists them, `oracle_plan` speaks them). The level,
its reward, and the symbolic entries (`image`, `direction`, `mission_tokens`) are those of the
untouched env, so a policy trained on the original words is tested on the same tasks in other
words. Doors and walls keep their names except where a row says otherwise.

| variant          | observations and goal                       | actions                   |
|------------------|---------------------------------------------|---------------------------|
| `none`           | unchanged (the training vocabulary)         | unchanged                 |
| `nouns`          | other real nouns: key->chair, ball->table,  | unchanged                 |
|                  | box->car                                    |                           |
| `colours`        | colours by synonyms: red->crimson...        | unchanged                 |
| `invented_nouns` | nouns by invented words: ball->dax,         | unchanged                 |
|                  | door->toma...                               |                           |
| `invented`       | nouns and colour adjectives by invented     | unchanged                 |
|                  | words: ball->dax, red->faze...              |                           |
| `goal`           | the goal reworded ("go to" -> "reach",      | unchanged                 |
|                  | "pick up" -> "grab"...); view unchanged     |                           |
| `actions`        | unchanged                                   | synonyms: "rotate left",  |
|                  |                                             | "move ahead", "take"...   |
| `french`         | French, from a word table                   | French ("tourne a gauche")|

Rewrites work on whole words, longest phrase first; English variants then fix the articles
("a"/"an") the new words need. French is written without diacritics ("a gauche", "cle"),
because the project's text spaces and the simulator's wire specs are ASCII; French noun
phrases are rebuilt whole (article, noun, colour, state, place) so that word order and gender
agree: "a locked blue door" -> "une porte bleue verrouillee".
"""

from __future__ import annotations

import re
from collections.abc import Callable, Mapping
from dataclasses import dataclass

ACTION_PHRASES = ("turn left", "turn right", "go forward", "pick up", "drop", "toggle")
Rewrite = Callable[[str], str]


def _identity(text: str) -> str:
    return text


def swap_words(table: Mapping[str, str]) -> Rewrite:
    """Replace each whole word or phrase of `table` (longest first) in one pass."""
    if not table:
        return _identity
    alternatives = "|".join(re.escape(key) for key in sorted(table, key=len, reverse=True))
    pattern = re.compile(rf"\b(?:{alternatives})\b")
    return lambda text: pattern.sub(lambda match: table[match.group(0)], text)


_ARTICLE = re.compile(r"\b([Aa]n?) (?=(\w))")


def fix_articles(text: str) -> str:
    """'a' before a consonant sound, 'an' before a vowel (by spelling, as `describe_object`)."""

    def article(match: re.Match[str]) -> str:
        word = "an" if match.group(2).lower() in "aeiou" else "a"
        return (word.capitalize() if match.group(1)[0] == "A" else word) + " "

    return _ARTICLE.sub(article, text)


def chain(*rewrites: Rewrite) -> Rewrite:
    def rewrite(text: str) -> str:
        for step in rewrites:
            text = step(text)
        return text

    return rewrite


@dataclass(frozen=True)
class Variant:
    """One generalisation test: how text, goal and action phrases are reworded."""

    name: str
    description: str
    text: Rewrite = _identity  # the view in words
    goal: Rewrite = _identity  # the mission
    actions: tuple[str, ...] = ACTION_PHRASES  # in minigrid's action order


def english(table: Mapping[str, str]) -> Rewrite:
    return chain(swap_words(table), fix_articles)


NOUNS = {"key": "chair", "ball": "table", "box": "car"}
COLOUR_SYNONYMS = {
    "red": "crimson",
    "green": "emerald",
    "blue": "azure",
    "purple": "violet",
    "yellow": "golden",
    "grey": "silver",
}
INVENTED_NOUNS = {"ball": "dax", "box": "blicket", "key": "wug", "door": "toma"}
INVENTED_ADJECTIVES = {
    "red": "faze",
    "green": "zorp",
    "blue": "mib",
    "purple": "plonk",
    "yellow": "tupa",
    "grey": "kiki",
}
GOAL_REWORDING = {
    "go to": "reach",
    "pick up": "grab",
    "put": "place",
    "next to": "beside",
    "open": "pull open",
    ", then": ", and afterwards",
    "after you": "once you have",
    "in front of you": "ahead of you",
    "behind you": "at your back",
    "on your left": "to your left",
    "on your right": "to your right",
}
ACTION_SYNONYMS = ("rotate left", "rotate right", "move ahead", "take", "release", "switch")

# -- French -------------------------------------------------------------------------------
FRENCH_NOUNS = {  # English noun -> (French noun, feminine?)
    "ball": ("balle", True),
    "box": ("boite", True),
    "key": ("cle", True),
    "door": ("porte", True),
    "object": ("objet", False),
}
FRENCH_COLOURS = {  # masculine, feminine
    "red": ("rouge", "rouge"),
    "green": ("vert", "verte"),
    "blue": ("bleu", "bleue"),
    "purple": ("violet", "violette"),
    "yellow": ("jaune", "jaune"),
    "grey": ("gris", "grise"),
}
FRENCH_STATES = {
    "open": ("ouvert", "ouverte"),
    "closed": ("ferme", "fermee"),
    "locked": ("verrouille", "verrouillee"),
}
FRENCH_PLACES = {
    "in front of you": "devant toi",
    "behind you": "derriere toi",
    "on your left": "a ta gauche",
    "on your right": "a ta droite",
}
FRENCH_WORDS = {  # what is left once noun phrases are French
    "You see nothing": "Tu ne vois rien",
    "You carry nothing": "Tu ne portes rien",
    "You see": "Tu vois",
    "You carry": "Tu portes",
    "a wall": "un mur",
    "steps": "pas",
    "step": "pas",
    "left": "a gauche",
    "right": "a droite",
    "forward": "devant",
    "and": "et",
    "go to": "va a",
    "pick up": "ramasse",
    "put": "pose",
    "next to": "a cote de",
    "open": "ouvre",
    "then": "puis",
    "after you": "apres que tu",
}
FRENCH_ACTIONS = ("tourne a gauche", "tourne a droite", "avance", "ramasse", "pose", "actionne")

_FRENCH_NOUN_PHRASE = re.compile(
    rf"\b(a|an|the) (?:({'|'.join(FRENCH_STATES)}) )?(?:({'|'.join(FRENCH_COLOURS)}) )?"
    rf"({'|'.join(FRENCH_NOUNS)})\b(?: ({'|'.join(FRENCH_PLACES)}))?"
)


def _french_noun_phrase(match: re.Match[str]) -> str:
    article, state, colour, noun, place = match.groups()
    word, feminine = FRENCH_NOUNS[noun]
    gender = 1 if feminine else 0
    if article == "the" and word[0] in "aeiou":
        words = [f"l'{word}"]
    elif article == "the":
        words = ["la" if feminine else "le", word]
    else:
        words = ["une" if feminine else "un", word]
    if colour:
        words.append(FRENCH_COLOURS[colour][gender])
    if state:
        words.append(FRENCH_STATES[state][gender])
    if place:
        words.append(FRENCH_PLACES[place])
    return " ".join(words)


_FRENCH_SWAP = swap_words(FRENCH_WORDS)


def french(text: str) -> str:
    """English BabyAI-Text (view or goal) in French, from the tables above."""
    return _FRENCH_SWAP(_FRENCH_NOUN_PHRASE.sub(_french_noun_phrase, text))


VARIANTS: dict[str, Variant] = {
    variant.name: variant
    for variant in (
        Variant("none", "the training vocabulary"),
        Variant("nouns", "nouns replaced by other real nouns", english(NOUNS), english(NOUNS)),
        Variant(
            "colours",
            "colours replaced by synonyms",
            english(COLOUR_SYNONYMS),
            english(COLOUR_SYNONYMS),
        ),
        Variant(
            "invented_nouns",
            "nouns replaced by invented words",
            english(INVENTED_NOUNS),
            english(INVENTED_NOUNS),
        ),
        Variant(
            "invented",
            "nouns and adjectives replaced by invented words",
            english({**INVENTED_NOUNS, **INVENTED_ADJECTIVES}),
            english({**INVENTED_NOUNS, **INVENTED_ADJECTIVES}),
        ),
        Variant("goal", "the goal reworded", goal=english(GOAL_REWORDING)),
        Variant("actions", "the six actions replaced by synonyms", actions=ACTION_SYNONYMS),
        Variant(
            "french", "observations, goal and actions in French", french, french, FRENCH_ACTIONS
        ),
    )
}


def variant_named(name: str) -> Variant:
    """The variant called `name`; a ValueError naming the variants otherwise."""
    if name not in VARIANTS:
        raise ValueError(f"unknown variant {name!r}; variants: {', '.join(VARIANTS)}")
    return VARIANTS[name]
