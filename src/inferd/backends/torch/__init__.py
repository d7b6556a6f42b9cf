"""The PyTorch backend (``pip install 'inferd[torch]'``): TorchScript and torch.export models."""

from __future__ import annotations

from inferd.backends.torch.backend import TorchBackend, TorchInstance, TorchModel
from inferd.backends.torch.settings import TorchSettings

__all__ = ["TorchBackend", "TorchInstance", "TorchModel", "TorchSettings"]
