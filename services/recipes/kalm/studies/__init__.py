"""Studies beside the kalm recipe: its data, grounding and imagination measured directly."""
