"""The tiny-model helpers under the name the learner and llm-personalize tests import them by;
they live in tests/tiny_llm.py, shared with the gateway tests."""

from tiny_llm import make_tiny_llama, tiny_gateway_settings

__all__ = ["make_tiny_llama", "tiny_gateway_settings"]
