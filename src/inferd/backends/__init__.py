"""Runtimes behind the :mod:`inferd.backends.base` protocols, one module each."""
