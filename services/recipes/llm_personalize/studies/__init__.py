"""llm-personalize's studies: diagnostics beside the recipe, each run with `python -m`."""
