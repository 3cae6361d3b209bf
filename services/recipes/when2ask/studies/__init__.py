"""when2ask's studies: diagnostics beside the recipe, each run with `python -m` (see its doc)."""
