"""Agents: the one conversation engine (:mod:`.conversation`), the agent loop over the
store (:mod:`.runner`), its tools (:mod:`.tools`).

The engine is what every entry point shares: the runner, the framework adapters, the
evaluation replay. Import from the submodules; this package imports nothing on its own,
so an adapter does not load the store.
"""
