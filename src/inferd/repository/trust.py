"""What a client may not decide: code in uploaded files, and what a model's loader trusts.

Anything that can run code when a model loads or answers a request counts as code, judged by
the bytes and by the effective configuration, never by a file's name alone:

- Python files (``.py``, bytecode), and any config selecting the ``python`` backend or naming a
  Python environment (``EXECUTION_ENV_PATH``);
- pickles: by name (``.pkl``, ``.pickle``, ``.joblib``) and by content (a pickle stream's
  protocol header, or an older stream that imports a callable);
- zip archives, whatever their name: TorchScript, ``torch.save`` and ``torch.export`` files are
  zip archives holding pickles and code; the one zip format that is not code is a skops file
  whose types all lie in skops' own safe set;
- native code: shared libraries and programs (``.so``, ``.dll``, ``.dylib``; ELF, Mach-O and PE
  headers), configs naming libraries or custom operators;
- configs whose backend or platform runs code by design (PyTorch, TensorRT plans, Python).

Parameters that widen what a loader trusts (``backends/trust.py``) come only from the operator's
repository: a load request's ``config`` override that sets one is refused by name.
"""

from __future__ import annotations

import io
import os
import pickletools
import zipfile
from collections.abc import Callable

from inferd.backends.sklearn import skops_untrusted_types
from inferd.backends.trust import trusting_parameters
from inferd.codecs.model_config import ModelConfig, parse_json_config
from inferd.errors import InferdError, ModelLoadError, PermissionDeniedError, UnavailableError

_PYTHON_SUFFIXES = frozenset({".py", ".pyc", ".pyo", ".pyw", ".pyd", ".pyz"})
_PICKLE_SUFFIXES = frozenset({".pkl", ".pickle", ".joblib"})
_LIBRARY_SUFFIXES = frozenset({".so", ".dylib", ".dll"})
_TORCH_SUFFIXES = frozenset({".pt", ".pt2", ".pth", ".ptl"})
#: file names whose loading runs code, by suffix (the content is judged too)
CODE_SUFFIXES = _PYTHON_SUFFIXES | _PICKLE_SUFFIXES | _LIBRARY_SUFFIXES | _TORCH_SUFFIXES

#: backends and platforms whose models are code by design
CODE_BACKENDS = frozenset({"python", "pytorch", "torch", "tensorrt"})
CODE_PLATFORMS = frozenset({"pytorch_libtorch", "torch_export", "torch", "tensorrt_plan"})
#: config parameters only Python models read; their presence means the model runs Python
PYTHON_PARAMETERS = frozenset({"EXECUTION_ENV_PATH"})
#: parts of a parameter name that point a loader at a library or custom operators
LIBRARY_NAME_PARTS = ("librar", "plugin", "custom_op", "op_lib", "extension_path")

# the first four bytes of native programs and libraries: ELF, Mach-O (both byte orders, 32 and
# 64 bits, and universal binaries); PE files are told by their two headers
_NATIVE_MAGIC = frozenset(
    {
        b"\x7fELF",
        b"\xfe\xed\xfa\xce",
        b"\xfe\xed\xfa\xcf",
        b"\xce\xfa\xed\xfe",
        b"\xcf\xfa\xed\xfe",
        b"\xca\xfe\xba\xbe",
    }
)
# a zip archive's first local file header, or the end record of an empty one
_ZIP_MAGIC = (b"PK\x03\x04", b"PK\x05\x06")
# pickle opcodes that import a callable (what a malicious stream needs to run anything)
_PICKLE_IMPORTS = frozenset({"GLOBAL", "STACK_GLOBAL", "INST"})
# a stream with a protocol header is a pickle once this many opcodes (or its STOP) parse
_PICKLE_PROBE_OPS = 8

BackendForPlatform = Callable[[str], str | None]


def file_runs_code(path: str, content: bytes) -> str | None:
    """What ``content`` (uploaded as ``path``) is when loading it can run code, else None."""
    name = path.rsplit("/", 1)[-1].lower()
    suffix = os.path.splitext(name)[1]
    if suffix in _PYTHON_SUFFIXES:
        return "a Python file"
    if suffix in _PICKLE_SUFFIXES:
        return "a pickle"
    if suffix in _LIBRARY_SUFFIXES or ".so." in name:
        return "a native library"
    if suffix in _TORCH_SUFFIXES:
        return "a PyTorch file (TorchScript and torch.save files hold pickles and code)"
    return content_runs_code(content)


def content_runs_code(content: bytes) -> str | None:
    """What ``content`` is, judged by its bytes alone, when loading it can run code."""
    if content[:4] in _NATIVE_MAGIC or _is_pe(content):
        return "a native library or program"
    if _is_pickle(content):
        return "a pickle stream"
    if content.startswith(_ZIP_MAGIC) or zipfile.is_zipfile(io.BytesIO(content)):
        return _zip_runs_code(content)
    return None


def _is_pe(content: bytes) -> bool:
    """A Windows program or DLL: ``MZ`` and, where its header points, ``PE\\0\\0``."""
    if not content.startswith(b"MZ") or len(content) < 0x40:
        return False
    offset = int.from_bytes(content[0x3C:0x40], "little")
    return content[offset : offset + 4] == b"PE\x00\x00"


def _is_pickle(content: bytes) -> bool:
    """A pickle stream: a protocol 2+ header followed by valid opcodes, or an older stream that
    imports a callable and checks out (stack and marks) up to its STOP. Nothing is unpickled."""
    if len(content) >= 2 and content[0] == 0x80 and 2 <= content[1] <= 5:
        try:
            for count, (opcode, _arg, _pos) in enumerate(pickletools.genops(content)):
                if opcode.name == "STOP" or count + 1 >= _PICKLE_PROBE_OPS:
                    return True
        except Exception:  # pickletools raises ValueError and others on bytes that are no pickle
            return False
        return False
    try:
        imports = any(op.name in _PICKLE_IMPORTS for op, _arg, _pos in pickletools.genops(content))
        if imports:
            pickletools.dis(content, out=io.StringIO())  # checks the stack, stops at STOP
    except Exception:
        return False
    return imports


def _zip_runs_code(content: bytes) -> str | None:
    try:
        with zipfile.ZipFile(io.BytesIO(content)) as archive:
            names = archive.namelist()
    except (zipfile.BadZipFile, zipfile.LargeZipFile, OSError, ValueError, EOFError):
        if content.startswith(_ZIP_MAGIC):
            return "an archive that cannot be checked (it starts as a zip archive)"
        return None  # zip's end marker by chance inside other bytes: no zip reader opens it
    if any(n.endswith((".pkl", ".py")) or "/code/" in f"/{n}" for n in names):
        return "a PyTorch archive (TorchScript, torch.save or torch.export: pickles and code)"
    if "schema.json" in names:
        try:
            untrusted = skops_untrusted_types(content)
        except UnavailableError:
            return "a skops file that cannot be checked here (skops is not installed)"
        except ModelLoadError:
            return "a zip archive (TorchScript and torch.export files are zip archives)"
        if untrusted:
            return (
                f"a skops file building types beyond skops' safe set ({', '.join(untrusted)}), "
                "which can run code"
            )
        return None
    return "a zip archive (TorchScript and torch.export files are zip archives)"


def config_runs_code(config: ModelConfig, backend_for_platform: BackendForPlatform) -> str | None:
    """What in ``config`` (a ``ModelConfig``) makes the model run code, else None."""
    backend = config.backend or (backend_for_platform(config.platform) if config.platform else "")
    if backend and backend.lower() in CODE_BACKENDS:
        return f"the {backend} backend"
    if config.platform.lower() in CODE_PLATFORMS:
        return f"platform {config.platform}"
    if len(config.model_operations.op_library_filename):
        return "model_operations (custom operator libraries)"
    for key in sorted(config.parameters):
        if key in PYTHON_PARAMETERS:
            return f"parameter {key}"
        value = config.parameters[key].string_value.strip().lower()
        names_library = any(part in key.lower() for part in LIBRARY_NAME_PARTS)
        if names_library or value.endswith(tuple(_LIBRARY_SUFFIXES)) or ".so." in value:
            return f"parameter {key} (a library)"
    return None


def check_client_config(name: str, config_json: str) -> None:
    """Refuse a load request's ``config`` override (JSON) that sets a parameter widening what a
    loader trusts: those come only from the repository's own configuration, whether or not
    files are uploaded. A ``config`` that does not parse is left to be reported where it is
    read."""
    try:
        config = parse_json_config(config_json, f"override for '{name}'")
    except InferdError:
        return
    found = trusting_parameters(config.parameters)
    if found:
        listed = ", ".join(f"'{key}'" for key in found)
        what = f"parameters {listed} widen" if len(found) > 1 else f"parameter {listed} widens"
        raise PermissionDeniedError(
            f"failed to load '{name}': {what} what the model's loader trusts, so it is read "
            "only from the model repository's config.pbtxt, never from a load request's 'config'"
        )


__all__ = [
    "CODE_BACKENDS",
    "CODE_PLATFORMS",
    "CODE_SUFFIXES",
    "LIBRARY_NAME_PARTS",
    "PYTHON_PARAMETERS",
    "check_client_config",
    "config_runs_code",
    "content_runs_code",
    "file_runs_code",
]
