"""CrafterText: Crafter with ELLM's captions (`env.py`), their grammar (`captions.py`) and the
goal vocabulary that suggesters and the intrinsic reward share (`vocabulary.py`)."""
