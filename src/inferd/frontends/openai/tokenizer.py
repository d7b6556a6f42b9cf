"""A text model's tokenizer and chat template, read from the operator's files only.

Where they come from, first found wins: the folder given to ``inferd serve --tokenizer PATH``
(for every model), else the model's own folder (``<repository>/<model>/``, beside
``config.pbtxt``), then the folder of its loaded version (``<repository>/<model>/<version>/``,
where Hugging Face folders hold them), file by file:
``tokenizer.json`` (a Hugging Face ``tokenizers`` file) counts tokens and decodes prompts given as
token ids, and the chat template is ``chat_template.jinja`` or the ``chat_template`` of
``tokenizer_config.json``. Nothing a client sends names a path: the model name is checked by the
routes and must name a loaded model. A file in the repository that resolves outside the model's
folder (a symbolic link out of it) is refused, not read.

Files are read off the event loop, once per model version, and kept. Templates render as Hugging
Face renders them (``apply_chat_template``): Jinja2's immutable sandbox, ``trim_blocks`` and
``lstrip_blocks``, ``raise_exception``, a ``tojson`` filter, the special tokens of
``tokenizer_config.json`` and ``add_generation_prompt=True``.
"""

from __future__ import annotations

import asyncio
import json
from collections.abc import Sequence
from datetime import datetime
from pathlib import Path
from typing import Any

import jinja2
from jinja2.ext import loopcontrols
from jinja2.sandbox import ImmutableSandboxedEnvironment

from inferd.frontends.openai.errors import OpenAIError, invalid

TOKENIZER_FILE = "tokenizer.json"
CONFIG_FILE = "tokenizer_config.json"
TEMPLATE_FILE = "chat_template.jinja"
_SPECIAL = ("bos_token", "eos_token", "unk_token", "pad_token")


class _TemplateRaised(Exception):
    pass


def _raise_exception(message: str) -> None:
    raise _TemplateRaised(message)


def _tojson(value: Any, ensure_ascii: bool = False, indent: int | None = None, **_: Any) -> str:
    return json.dumps(value, ensure_ascii=ensure_ascii, indent=indent)


def _environment() -> ImmutableSandboxedEnvironment:
    env = ImmutableSandboxedEnvironment(
        trim_blocks=True, lstrip_blocks=True, extensions=[loopcontrols]
    )
    env.filters["tojson"] = _tojson
    env.globals["raise_exception"] = _raise_exception
    env.globals["strftime_now"] = lambda fmt: datetime.now().strftime(fmt)
    return env


class TextTokenizer:
    """One model's token counter and chat template (either may be missing)."""

    def __init__(
        self,
        model: str,
        tokenizer: Any | None,  # tokenizers.Tokenizer
        template: jinja2.Template | None,
        special: dict[str, str],
    ) -> None:
        self.model = model
        self._tokenizer = tokenizer
        self._template = template
        self._special = special

    @property
    def counts(self) -> bool:
        return self._tokenizer is not None

    def count(self, text: str) -> int:
        if self._tokenizer is None or not text:
            return 0
        return len(self._tokenizer.encode(text, add_special_tokens=False).ids)

    def count_prompt(self, text: str) -> int:
        """The tokens of a prompt as the model reads it: with the special tokens its tokenizer
        adds (a ``<s>`` first), as a vLLM-style runtime encodes ``text_input``."""
        if self._tokenizer is None:
            return 0
        return len(self._tokenizer.encode(text, add_special_tokens=True).ids)

    def decode(self, ids: Sequence[int], where: str) -> str:
        """The text of a prompt given as token ids; a 400 naming ``where`` for an id the
        model's vocabulary lacks, or when the model has no tokenizer. The special tokens that
        encoding adds (a leading ``<s>``) are left out: the model adds its own."""
        if self._tokenizer is None:
            raise OpenAIError(
                400,
                f"the model '{self.model}' has no tokenizer to decode token ids with: send the "
                f"prompt as text, or the operator can add {TOKENIZER_FILE} to its folder or "
                "start the server with --tokenizer PATH",
                param="prompt",
                code="tokenizer_missing",
            )
        size = self._tokenizer.get_vocab_size(with_added_tokens=True)
        bad = [i for i in ids if i >= size]
        if bad:
            raise invalid(
                f"'{where}' holds token id {bad[0]}, outside the model's vocabulary of {size}",
                "prompt",
            )
        added = self._tokenizer.encode("", add_special_tokens=True).ids
        body = list(ids)
        if added and body[: len(added)] == added:
            body = body[len(added) :]
        text: str = self._tokenizer.decode(body, skip_special_tokens=False)
        return text

    def truncate(self, text: str, max_tokens: int) -> tuple[str, bool]:
        """``text`` cut after its first ``max_tokens`` tokens, and whether it was cut."""
        if self._tokenizer is None or not text:
            return text, False
        encoding = self._tokenizer.encode(text, add_special_tokens=False)
        if len(encoding.ids) <= max_tokens:
            return text, False
        return text[: encoding.offsets[max_tokens - 1][1]], True

    def render(self, messages: list[dict[str, Any]]) -> str:
        if self._template is None:
            raise OpenAIError(
                400,
                f"the model '{self.model}' has no chat template: the operator can add "
                f"'chat_template' to its {CONFIG_FILE} or a {TEMPLATE_FILE} in its version "
                "folder or beside its config.pbtxt, or start the server with --tokenizer "
                "PATH; /v1/completions serves it without one",
                param="messages",
                code="chat_template_missing",
            )
        try:
            return self._template.render(
                messages=messages, add_generation_prompt=True, **self._special
            )
        except _TemplateRaised as exc:
            raise invalid(
                f"the model's chat template refused the messages: {exc}", "messages"
            ) from None
        except jinja2.TemplateError as exc:
            raise invalid(
                f"the model's chat template failed on the messages: {exc}", "messages"
            ) from None


def _confined(path: Path, within: Path | None) -> Path:
    if within is not None and not path.resolve().is_relative_to(within.resolve()):
        raise OpenAIError(
            500,
            f"the model's {path.name} resolves outside its folder {within} (a symbolic link out "
            "of it is refused; the operator can copy the file in)",
            code="tokenizer_outside_model_folder",
            type="server_error",
        )
    return path


def load_tokenizer(
    model: str, folder: Path | Sequence[Path] | None, within: Path | None = None
) -> TextTokenizer:
    """Read the files of ``folder`` (blocking: call it off the event loop). Given several
    folders, each file is taken from the first that has it (the chat template from the first
    that has one; ``tokenizer_config.json``'s keys merged, the first folder's winning); each
    file must resolve inside ``within`` when given."""
    if folder is None:
        return TextTokenizer(model, None, None, {})
    folders = [folder] if isinstance(folder, Path) else list(folder)
    tokenizer = None
    for place in folders:
        if (place / TOKENIZER_FILE).is_file():
            from tokenizers import Tokenizer

            tokenizer = Tokenizer.from_file(str(_confined(place / TOKENIZER_FILE, within)))
            break
    config: dict[str, Any] = {}
    source = None
    for place in reversed(folders):  # the first folder's keys and template win
        own: dict[str, Any] = {}
        if (place / CONFIG_FILE).is_file():
            path = _confined(place / CONFIG_FILE, within)
            loaded = json.loads(path.read_text(encoding="utf-8"))
            if isinstance(loaded, dict):
                own = loaded
        config.update(own)
        if (place / TEMPLATE_FILE).is_file():
            source = _confined(place / TEMPLATE_FILE, within).read_text(encoding="utf-8")
        else:
            source = _template_source(own.get("chat_template")) or source
    template = _environment().from_string(source) if source else None
    special = {}
    for name in _SPECIAL:
        value = config.get(name)
        if isinstance(value, dict):
            value = value.get("content")
        if isinstance(value, str):
            special[name] = value
    return TextTokenizer(model, tokenizer, template, special)


def _template_source(value: Any) -> str | None:
    if isinstance(value, str):
        return value
    if isinstance(value, list):  # named templates: the default one
        for entry in value:
            if isinstance(entry, dict) and entry.get("name") == "default":
                template = entry.get("template")
                return template if isinstance(template, str) else None
    return None


class TokenizerStore:
    """Each model's :class:`TextTokenizer`, loaded once off the event loop."""

    def __init__(self, repositories: Sequence[Path], override: Path | None = None) -> None:
        self._repositories = tuple(repositories)
        self._override = override
        self._loaded: dict[tuple[str, int | None], asyncio.Future[TextTokenizer]] = {}

    def _folders(self, model: str, version: int | None) -> tuple[list[Path], Path | None]:
        """The folders to read, first found first, and the folder their files must resolve
        inside: beside config.pbtxt (the operator's), then the version folder."""
        if self._override is not None:
            return [self._override], None
        for repository in self._repositories:
            model_dir = repository / model
            candidates = [model_dir]
            if version is not None:
                candidates.append(model_dir / str(version))
            found = [
                _confined(folder, model_dir)
                for folder in candidates
                if any((folder / f).is_file() for f in (TOKENIZER_FILE, CONFIG_FILE, TEMPLATE_FILE))
            ]
            if found:
                return found, model_dir
        return [], None

    def _load(self, model: str, version: int | None) -> TextTokenizer:
        folders, within = self._folders(model, version)
        return load_tokenizer(model, folders or None, within)

    async def get(self, model: str, version: int | None = None) -> TextTokenizer:
        """The tokenizer of ``model`` as its loaded ``version`` has it (read once per version)."""
        key = (model, version)
        pending = self._loaded.get(key)
        if pending is not None and pending.done() and pending.exception() is None:
            return pending.result()  # the common case: read before
        if pending is None:
            pending = asyncio.ensure_future(asyncio.to_thread(self._load, model, version))
            self._loaded[key] = pending
        try:
            return await asyncio.shield(pending)
        except Exception:
            if self._loaded.get(key) is pending:
                del self._loaded[key]  # a failed read is tried again next time
            raise


__all__ = ["TextTokenizer", "TokenizerStore", "load_tokenizer"]
