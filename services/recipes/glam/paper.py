"""The paper's figures (Carta et al., ICML 2023, "GLAM"), in one place, beside ours.

None of these has been checked against the paper itself here: they are issue 11's summary
(second-hand, marked "†" in the table). The paper trains GFlan-T5-large (780M) on BabyAI-Text's
mixed tasks (`MixTrain`) for ~250k env steps; our runs use another model (SmolLM2-135M), other
levels and budgets two orders of magnitude smaller, so the figures are context, not targets.
Methods the summary gives no figure for are absent; add a figure only with its source.
"""

from __future__ import annotations

SOURCE = "issue 11's summary of Carta et al. (2023), not checked against the paper"

# method -> the paper's success on its training tasks, as the summary words it
PAPER_SUCCESS: dict[str, str] = {
    "glam": "~0.8 (GFlan-T5-large, MixTrain, ~250k steps)†",
    "npae": "low (same network, random weights)†",
    "drrn": "low†",
    "symbolic-ppo": "between NPAE/DRRN and GLAM†",
}

NOTES = (
    f"paper figures (†): {SOURCE}",
    "the original's maintainer reports Flan-T5-small near 0.2 success after ~10k steps with "
    "32 envs (†)",
    "the paper's generalisation figures are not reproduced here (not confirmed); the table "
    "gives ours as success and change relative to the training vocabulary, the paper's form",
)


def paper_success(method: str, test: str) -> str:
    """The paper's figure for `method` on its training tasks ("" for other tests)."""
    return PAPER_SUCCESS.get(method, "") if test == "train" else ""
