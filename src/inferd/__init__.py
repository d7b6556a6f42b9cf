"""inferd: a fast, Triton-compatible inference server and toolkit."""

__version__ = "0.1.0"
