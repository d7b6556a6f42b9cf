"""inferd inside other systems: a Ray Serve deployment of a model repository (``ray_serve``).

Integrations sit above the server (they build one) and below the CLI.
"""

__all__: list[str] = []
