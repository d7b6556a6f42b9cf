"""Which runtime serves a model: a registry built by the composition root, never a global.

Runtimes are registered lazily (a factory, called the first time a model needs it) so that
optional, heavy runtimes are imported only when a model uses them, and a missing one fails with
the ``pip install`` command that brings it in.
"""

from __future__ import annotations

import importlib
import importlib.metadata
import logging
import threading
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from typing import Any

from inferd.backends.base import Backend
from inferd.core.model_spec import ModelSpec
from inferd.errors import ConfigError, UnavailableError

log = logging.getLogger(__name__)

ENTRY_POINT_GROUP = "inferd.backends"

BackendFactory = Callable[[], Backend]

#: platforms served by a scheduler alone, with no runtime (the repository builds them)
NO_RUNTIME_PLATFORMS = frozenset({"ensemble"})


@dataclass(slots=True)
class _Entry:
    name: str
    platforms: tuple[str, ...]
    factory: BackendFactory
    extra: str | None
    backend: Backend | None = None
    platforms_known: bool = True  # False for entry points until they are imported
    install_hint: str | None = None  # overrides the ``inferd[extra]`` hint (plugins)
    lock: threading.Lock = field(default_factory=threading.Lock)  # one materialisation


class BackendRegistry:
    """Backends by config ``backend`` name, and by ``platform`` as a fallback.

    Models load on several threads at once; each backend is built once, under its own lock
    (a slow import of one runtime does not hold up the others). Registering is done by the
    composition root before any load.
    """

    def __init__(self) -> None:
        self._entries: dict[str, _Entry] = {}

    def register(self, backend: Backend) -> None:
        """Register a ready backend instance (replaces one of the same name)."""
        self._entries[backend.name] = _Entry(
            backend.name, tuple(backend.platforms), lambda: backend, None, backend
        )

    def register_lazy(
        self,
        name: str,
        factory: BackendFactory,
        *,
        platforms: tuple[str, ...] = (),
        extra: str | None = None,
        platforms_known: bool = True,
        install_hint: str | None = None,
    ) -> None:
        """Register a backend built on first use. ``extra`` names the ``inferd[extra]`` that
        installs its runtime; an ``ImportError`` from ``factory`` is reported with it (or with
        ``install_hint``, the command to run, when the runtime is not an inferd extra)."""
        self._entries[name] = _Entry(
            name, platforms, factory, extra, None, platforms_known, install_hint
        )

    def names(self) -> list[str]:
        return sorted(self._entries)

    def built(self, name: str) -> Backend | None:
        """The backend ``name`` if a model has already needed it (never builds one)."""
        entry = self._entries.get(name)
        return entry.backend if entry is not None else None

    def get(self, name: str) -> Backend:
        entry = self._entries.get(name)
        if entry is None:
            raise ConfigError(
                f"unsupported backend '{name}'; available backends: {self._available()}"
            )
        return self._materialise(entry)

    def for_config(self, config: Any) -> Backend:
        """The backend for a ``ModelConfig`` message (during auto-complete)."""
        return self.for_names(config.backend, config.platform)

    def for_spec(self, spec: ModelSpec) -> Backend:
        """The backend for a prepared model."""
        return self.for_names(spec.backend, spec.platform)

    def for_names(self, backend_name: str, platform: str) -> Backend:
        """The backend named ``backend_name``, else the one that serves ``platform``."""
        if backend_name:
            return self.get(backend_name)
        if platform in NO_RUNTIME_PLATFORMS:
            raise ConfigError(
                f"platform '{platform}' has no backend: its models run on other models' backends"
            )
        if platform:
            found = self.backend_name_for_platform(platform)
            if found is not None:
                return self.get(found)
            raise ConfigError(
                f"unsupported platform '{platform}'; available backends: {self._available()}"
            )
        raise ConfigError(
            "model configuration names neither a backend nor a platform; available backends: "
            f"{self._available()}"
        )

    def backend_name_for_platform(self, platform: str) -> str | None:
        """The registered backend that accepts ``platform``, importing entry points if needed."""
        for entry in self._entries.values():
            if entry.platforms_known and platform in entry.platforms:
                return entry.name
        for entry in list(self._entries.values()):
            if not entry.platforms_known:
                try:
                    self._materialise(entry)
                except UnavailableError:
                    continue
                if platform in entry.platforms:
                    return entry.name
        return None

    def _available(self) -> str:
        return ", ".join(self.names()) or "(none)"

    def _materialise(self, entry: _Entry) -> Backend:
        backend = entry.backend
        if backend is not None:
            return backend
        with entry.lock:
            if entry.backend is not None:
                return entry.backend
            return self._build(entry)

    def _build(self, entry: _Entry) -> Backend:
        try:
            backend = entry.factory()
        except ImportError as exc:
            hint = entry.install_hint or (
                f"pip install 'inferd[{entry.extra}]'" if entry.extra else "install it"
            )
            raise UnavailableError(
                f"backend '{entry.name}' needs a runtime that is not installed ({exc}); "
                f"to use it run: {hint}"
            ) from exc
        entry.platforms = tuple(backend.platforms)
        entry.platforms_known = True
        entry.backend = backend  # last: a reader that sees it sees the platforms too
        return backend


# name, "module:class", platforms it serves, the extra that installs its runtime
_BUILTINS: tuple[tuple[str, str, tuple[str, ...], str | None], ...] = (
    (
        "onnxruntime",
        "inferd.backends.onnxruntime:OnnxRuntimeBackend",
        ("onnxruntime_onnx",),
        "onnxruntime",
    ),
    (
        "pytorch",
        "inferd.backends.torch:TorchBackend",
        ("pytorch_libtorch", "torch_export"),
        "torch",
    ),
    ("fil", "inferd.backends.trees:TreeBackend", (), "trees"),
    ("sklearn", "inferd.backends.sklearn:SklearnBackend", (), "sklearn"),
    ("python", "inferd.backends.python:PythonBackend", (), None),
    ("openvino", "inferd.backends.openvino:OpenVinoBackend", (), "openvino"),
    ("llm", "inferd.backends.llm.runtime:LlmBackend", (), "llm"),
)


def _builtin_factory(target: str, options: Mapping[str, Any] | None = None) -> BackendFactory:
    module_name, _, attr = target.partition(":")
    kwargs = dict(options or {})

    def build() -> Backend:
        module = importlib.import_module(module_name)
        backend: Backend = getattr(module, attr)(**kwargs)
        return backend

    return build


def _entry_point_factory(ep: importlib.metadata.EntryPoint) -> BackendFactory:
    def build() -> Backend:
        target = ep.load()
        backend: Backend = target() if callable(target) else target
        return backend

    return build


def default_registry(
    *,
    load_entry_points: bool = True,
    backend_options: Mapping[str, Mapping[str, Any]] | None = None,
) -> BackendRegistry:
    """The built-in backends plus any installed plugin in the ``inferd.backends`` group.

    A plugin entry point names a zero-argument callable (typically the backend class) that
    returns a backend; it is imported when a model first needs it. Built-ins win name clashes.
    ``backend_options`` gives server-level settings to built-in backends as keyword arguments
    of their constructor, by backend name (e.g. ``{"sklearn": {"allow_pickle": True}}``).
    """
    options = backend_options or {}
    registry = BackendRegistry()
    if load_entry_points:
        for ep in importlib.metadata.entry_points(group=ENTRY_POINT_GROUP):
            dist = getattr(ep, "dist", None)
            hint = f"pip install '{dist.name}'" if dist is not None else None
            registry.register_lazy(
                ep.name, _entry_point_factory(ep), platforms_known=False, install_hint=hint
            )
    for name, target, platforms, extra in _BUILTINS:
        registry.register_lazy(
            name, _builtin_factory(target, options.get(name)), platforms=platforms, extra=extra
        )
    return registry
