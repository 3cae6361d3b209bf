"""LLM backends, one file each, registered with `@registry.register_backend(name)`.

A backend maps a gateway request in and a response out for one configured model; the gateway
core (gateway.py) owns everything around the call: validation, cache, ledger and budgets,
retries with backoff, fallback, timeouts and metrics.
"""
