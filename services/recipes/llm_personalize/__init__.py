"""`llm-personalize`: LLM-Personalize (Han et al. 2024) on the Housekeep simulator."""
