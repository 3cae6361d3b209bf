"""Maps the services/ tree onto the `llmrl` import name; everything else is in pyproject.toml."""

from setuptools import find_packages, setup

setup(packages=["llmrl", *(f"llmrl.{name}" for name in find_packages("services"))])
