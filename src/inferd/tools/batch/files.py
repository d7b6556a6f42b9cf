"""Folders of files, one or more rows each: images, and KServe v2 JSON inference requests.

Files are taken in name order. A file that cannot be read is one bad row, reported with its
name; the others go on.

Images feed a model with a single image input: dims ``[C, H, W]`` or ``[H, W, C]`` with C 1
(grey) or 3 (RGB), or ``[H, W]`` (grey). The layout comes from the input's ``format``
(``FORMAT_NCHW`` / ``FORMAT_NHWC``) in the model's config, or from where the 1 or 3 stands
when only one place fits. Each image is converted to grey or RGB and resized to H x W; a UINT8
input gets the pixel values (0..255), a floating-point one gets them times ``--image-scale``.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import numpy as np

from inferd.codecs.v2_http import decode_infer_request
from inferd.core.model_spec import ModelSpec
from inferd.errors import InferdError, InvalidArgumentError
from inferd.tools.batch.blocks import IMAGE_SUFFIXES, Block
from inferd.tools.batch.rows import Column, InputPlan, shape_text

__all__ = ["ImageLayout", "ImageSource", "JsonSource", "image_layout"]


class ImageLayout:
    """How an image becomes the input's tensor."""

    def __init__(self, channels_first: bool | None, channels: int, height: int, width: int):
        self.channels_first = channels_first  # None: [H, W], no channel axis
        self.channels = channels
        self.height = height
        self.width = width


def _input_format(spec: ModelSpec, name: str) -> str:
    for entry in spec.config.get("input", []):
        if isinstance(entry, dict) and entry.get("name") == name:
            return str(entry.get("format", "FORMAT_NONE"))
    return "FORMAT_NONE"


def image_layout(spec: ModelSpec, plans: tuple[InputPlan, ...]) -> ImageLayout:
    """The layout of the model's one image input; InvalidArgumentError when it is unclear."""
    required = [p for p in plans if not p.optional]
    if len(required) != 1:
        raise InvalidArgumentError(
            f"a folder of images feeds a model with one input; '{spec.name}' needs "
            f"{len(required)} ({', '.join(p.name for p in required)})"
        )
    plan = required[0]
    dims = plan.dims
    if -1 in dims or len(dims) not in (2, 3):
        raise InvalidArgumentError(
            f"input '{plan.name}' of shape {shape_text(dims)} is not an image: images need fixed "
            "dims [C,H,W], [H,W,C] or [H,W]"
        )
    if len(dims) == 2:
        return ImageLayout(None, 1, dims[0], dims[1])
    declared = _input_format(spec, plan.name)
    first, last = dims[0] in (1, 3), dims[2] in (1, 3)
    if declared == "FORMAT_NCHW" or (declared == "FORMAT_NONE" and first and not last):
        if not first:
            raise InvalidArgumentError(f"input '{plan.name}' {shape_text(dims)}: C must be 1 or 3")
        return ImageLayout(True, dims[0], dims[1], dims[2])
    if declared == "FORMAT_NHWC" or (declared == "FORMAT_NONE" and last and not first):
        if not last:
            raise InvalidArgumentError(f"input '{plan.name}' {shape_text(dims)}: C must be 1 or 3")
        return ImageLayout(False, dims[2], dims[0], dims[1])
    raise InvalidArgumentError(
        f"cannot tell whether input '{plan.name}' {shape_text(dims)} is channels-first or "
        "channels-last; set format: FORMAT_NCHW or FORMAT_NHWC on it in the model's config"
    )


def _image_files(folder: Path) -> list[Path]:
    if not folder.is_dir():
        raise InvalidArgumentError(f"--input {folder}: a folder of images is expected")
    return sorted(p for p in folder.iterdir() if p.is_file() and p.suffix.lower() in IMAGE_SUFFIXES)


class ImageSource:
    def __init__(
        self, folder: Path, spec: ModelSpec, plans: tuple[InputPlan, ...], scale: float
    ) -> None:
        try:
            import PIL.Image  # noqa: F401
        except ImportError:
            raise InvalidArgumentError(
                "reading images needs Pillow: pip install 'inferd[batch]'"
            ) from None
        self._layout = image_layout(spec, plans)
        self._plan = next(p for p in plans if not p.optional)
        self._files = _image_files(folder)
        self._scale = scale
        self.rows = len(self._files)

    def _pixels(self, path: Path) -> np.ndarray[Any, Any]:
        from PIL import Image

        lay = self._layout
        with Image.open(path) as image:
            converted = image.convert("L" if lay.channels == 1 else "RGB")
            resized = converted.resize((lay.width, lay.height), Image.Resampling.BILINEAR)
            pixels = np.asarray(resized, dtype=np.uint8)
        if lay.channels_first is None:
            return pixels
        if pixels.ndim == 2:
            pixels = pixels[:, :, None]
        return np.transpose(pixels, (2, 0, 1)) if lay.channels_first else pixels

    def read(self, start: int, stop: int) -> Block:
        lay = self._layout
        shape = (
            (lay.height, lay.width)
            if lay.channels_first is None
            else (lay.channels, lay.height, lay.width)
            if lay.channels_first
            else (lay.height, lay.width, lay.channels)
        )
        integer = self._plan.datatype.dtype.kind in "iu"
        out = np.zeros((stop - start, *shape), dtype=np.uint8 if integer else np.float32)
        errors: dict[int, str] = {}
        for offset, path in enumerate(self._files[start:stop]):
            try:
                pixels = self._pixels(path)
            except (OSError, ValueError) as exc:
                errors[offset] = f"file {path.name}: not a readable image ({exc})"
                continue
            out[offset] = pixels if integer else pixels.astype(np.float32) * self._scale
        return Block(start, stop - start, {self._plan.name: out}, errors)

    def close(self) -> None:
        self._files = []


class JsonSource:
    """``*.json`` KServe v2 inference requests; a request's batch is its rows."""

    def __init__(self, folder: Path, spec: ModelSpec) -> None:
        if not folder.is_dir():
            raise InvalidArgumentError(f"--input {folder}: a folder of *.json requests is expected")
        self._spec = spec
        self._files = sorted(p for p in folder.iterdir() if p.suffix.lower() == ".json")
        self._starts: list[int] = []
        rows = 0
        for path in self._files:
            self._starts.append(rows)
            decoded = self._decode(path)
            rows += decoded[1] if isinstance(decoded, tuple) else 1
        self.rows = rows

    def _decode(self, path: Path) -> tuple[dict[str, np.ndarray[Any, Any]], int] | str:
        """The request's inputs and its row count, or why the file is a bad row."""
        try:
            request = decode_infer_request(self._spec.name, "", path.read_bytes(), None)
        except (InferdError, OSError) as exc:
            return f"file {path.name}: {getattr(exc, 'message', exc)}"
        if self._spec.max_batch_size == 0:
            return request.inputs, 1
        counts = {a.shape[0] if a.ndim else -1 for a in request.inputs.values()}
        if len(counts) != 1 or -1 in counts:
            return f"file {path.name}: its inputs do not share one batch dimension"
        return request.inputs, counts.pop()

    def read(self, start: int, stop: int) -> Block:
        names = [t.name for t in self._spec.inputs]
        columns: dict[str, list[Any]] = {name: [None] * (stop - start) for name in names}
        errors: dict[int, str] = {}
        index = max(0, _last_at_or_before(self._starts, start))
        while index < len(self._files) and self._starts[index] < stop:
            first = self._starts[index]
            decoded = self._decode(self._files[index])
            count = decoded[1] if isinstance(decoded, tuple) else 1
            for row in range(max(first, start), min(first + count, stop)):
                offset = row - start
                if isinstance(decoded, str):
                    errors[offset] = decoded
                    continue
                inputs = decoded[0]
                for name in names:
                    if name in inputs:
                        array = inputs[name]
                        columns[name][offset] = (
                            array if self._spec.max_batch_size == 0 else array[row - first]
                        )
            index += 1
        present: dict[str, Column] = {
            name: values for name, values in columns.items() if any(v is not None for v in values)
        }
        for plan in self._spec.inputs:
            if not plan.optional and plan.name not in present:
                present[plan.name] = [None] * (stop - start)
        return Block(start, stop - start, present, errors)

    def close(self) -> None:
        self._files = []


def _last_at_or_before(starts: list[int], row: int) -> int:
    import bisect

    return bisect.bisect_right(starts, row) - 1
