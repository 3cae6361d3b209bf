"""BabyAI-Text (as in GLAM, Carta et al. 2023): minigrid's BabyAI levels with the agent's
view described in words, the six text actions, task mixes and held-out test variants."""
