"""ELLM's reward threshold for the gateway's embedding model: how similar are matching and
non-matching (transition caption, suggestion) pairs?

    .venv/bin/python -m llmrl.recipes.ellm.studies.threshold [--embed-model minilm]

Embeds, through the gateway, the transition captions of CrafterText (ELLM's goal phrases) and
phrasings a language model may suggest for them, and prints: every distinct pair of goals
(non-matching: a reward above the threshold would pay one goal for another), and each goal's
paraphrases (matching, but worded differently). `--embed-model` is the recipe's key
(`EllmConfig.embed_model`: none, the gateway's default). The last line is a JSON object with
the largest non-matching cosine, the paraphrases' cosines and the share of them that each
candidate threshold accepts.
"""

from __future__ import annotations

import argparse
import itertools
import json
import sys
from collections.abc import Mapping
from typing import Any

import numpy as np

from llmrl.llm_gateway.client import connect
from llmrl.recipes.ellm.config import EllmConfig
from llmrl.recipes.options import add_model_options, parse_model_options
from llmrl.simulator.envs.crafter.vocabulary import GOALS

# the recipe's keys this study takes
RECIPE_KEYS = ["embed_model"]

# Wordings a model may use for each transition caption (written for this check).
PARAPHRASES: dict[str, tuple[str, ...]] = {
    "chop tree": ("collect wood", "cut down a tree", "chop a tree", "get wood", "chop wood"),
    "chop grass": ("collect sapling", "cut grass", "collect a sapling", "gather grass"),
    "drink water": ("drink some water", "drink from the lake", "collect water", "drink"),
    "eat plant": ("eat the plant", "eat a ripe plant", "harvest plant"),
    "attack cow": ("eat cow", "kill the cow", "attack the cow", "hunt cow", "hit cow"),
    "attack zombie": ("kill zombie", "fight the zombie", "attack the zombie", "defeat zombie"),
    "attack skeleton": ("kill skeleton", "fight skeleton", "defeat skeleton"),
    "sleep": ("go to sleep", "rest", "take a nap"),
    "place plant": ("plant sapling", "place sapling", "plant a sapling"),
    "place crafting table": ("make crafting table", "build a crafting table", "place table"),
    "make wood pickaxe": ("craft wood pickaxe", "make a wooden pickaxe", "craft a pickaxe"),
    "make wood sword": ("craft wood sword", "make a wooden sword", "craft a sword"),
    "mine stone": ("collect stone", "mine rock", "dig stone", "get stone"),
    "mine coal": ("collect coal", "dig coal", "get coal"),
    "place stone": ("put stone", "place a stone", "put down stone"),
    "make stone pickaxe": ("craft stone pickaxe", "make a stone pickaxe"),
    "make stone sword": ("craft stone sword", "make a stone sword"),
    "place furnace": ("build furnace", "make furnace", "build a furnace"),
    "mine iron": ("collect iron", "dig iron", "get iron"),
    "make iron pickaxe": ("craft iron pickaxe", "make an iron pickaxe"),
    "make iron sword": ("craft iron sword", "make an iron sword"),
    "mine diamond": ("collect diamond", "dig diamond", "get diamond"),
}
CANDIDATES = (0.5, 0.6, 0.7, 0.75, 0.8, 0.85, 0.9, 0.99)
GOAL_CAPTIONS = [*GOALS, "wake up"]


def texts() -> list[str]:
    """Every goal caption and paraphrase, once each."""
    return list(dict.fromkeys([*GOAL_CAPTIONS, *itertools.chain(*PARAPHRASES.values())]))


def unit_vectors(llm: Any, embed_model: str | None) -> dict[str, np.ndarray]:
    """{text: its embedding, normalised} for `texts()`, through the gateway (not cached)."""
    all_texts = texts()
    vectors = llm.embed(all_texts, model=embed_model, run_id="ellm-threshold", cache=False)
    vectors = vectors / np.linalg.norm(vectors, axis=1, keepdims=True)
    return dict(zip(all_texts, vectors, strict=True))


def similarities(vector: Mapping[str, np.ndarray]) -> dict[str, list[tuple]]:
    """The cosines the study prints: `distinct` (cosine, goal, goal) of every pair of distinct
    goals, `paraphrases` (cosine, goal, paraphrase), both highest first, and `confused`
    (paraphrase, its goal, the other goal closer to it) for the paraphrases closer to another
    goal than to their own."""

    def cos(a: str, b: str) -> float:
        return float(vector[a] @ vector[b])

    goals = GOAL_CAPTIONS
    distinct = sorted(
        ((cos(a, b), a, b) for a, b in itertools.combinations(goals, 2)), reverse=True
    )
    paraphrases = sorted(
        ((cos(goal, text), goal, text) for goal, texts_ in PARAPHRASES.items() for text in texts_),
        reverse=True,
    )
    confused = [
        (text, goal, max(goals, key=lambda g: cos(g, text)))
        for _, goal, text in paraphrases
        if max(goals, key=lambda g: cos(g, text)) not in (goal, text)
    ]
    return {"distinct": distinct, "paraphrases": paraphrases, "confused": confused}


def summary(found: Mapping[str, list[tuple]], embed_model: str | None) -> dict[str, Any]:
    """The JSON figures of `similarities`' pairs: the largest distinct-goal cosine, the
    paraphrases' cosines and what each candidate threshold accepts."""
    distinct, paraphrases = found["distinct"], found["paraphrases"]
    values = np.array([value for value, _, _ in paraphrases])
    return {
        "model": embed_model or "gateway default (all-MiniLM-L6-v2)",
        "max_distinct_goal_cosine": round(distinct[0][0], 3),
        "closest_distinct_goals": distinct[0][1:],
        "paraphrase_cosine": {
            "min": round(float(values.min()), 3),
            "median": round(float(np.median(values)), 3),
            "max": round(float(values.max()), 3),
        },
        "paraphrases_confused": len(found["confused"]),
        "accepted_share_of_paraphrases": {
            str(t): round(float((values >= t).mean()), 3) for t in CANDIDATES
        },
        "distinct_goal_pairs_accepted": {
            str(t): sum(value >= t for value, _, _ in distinct) for t in CANDIDATES
        },
    }


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    add_model_options(parser, EllmConfig, RECIPE_KEYS)
    _, config = parse_model_options(parser, EllmConfig, argv)
    with connect() as llm:
        vector = unit_vectors(llm, config.embed_model)
    found = similarities(vector)
    print("closest distinct goals (a reward >= threshold would pay one for the other):")
    for value, a, b in found["distinct"][:12]:
        print(f"  {value:.3f}  {a!r} / {b!r}")
    print("paraphrases (the same goal, other words):")
    for value, goal, text in found["paraphrases"]:
        print(f"  {value:.3f}  {goal!r} / {text!r}")
    # a paraphrase is "confused" when it is closer to another goal than to its own
    print(f"paraphrases closer to another goal than to their own: {len(found['confused'])}")
    for text, goal, other in found["confused"]:
        print(
            f"  {text!r}: {goal!r} {float(vector[goal] @ vector[text]):.3f} < "
            f"{other!r} {float(vector[other] @ vector[text]):.3f}"
        )
    print(json.dumps(summary(found, config.embed_model)))
    return 0


if __name__ == "__main__":
    sys.exit(main())
