"""inferd: a fast, Triton-compatible inference server and toolkit."""

__all__ = ["__version__"]

__version__ = "0.1.0"
