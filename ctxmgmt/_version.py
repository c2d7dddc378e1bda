"""The package's version (its own module: a module that states it imports nothing)."""

__version__ = "0.1.0"
