"""Unlabelled English sentences to distil a sentence encoder on, offline.

:func:`docstring_sentences` reads the docstrings of the Python standard library and of the
installed packages (parsed with :mod:`ast`, nothing imported or run), keeps the paragraphs of
prose (not code examples, field lists or tables), splits them into sentences and keeps those that
read as plain English: a capital letter first, a full stop last, 6 to 40 words of letters,
no markup, code or addresses. Files are visited in an order fixed by their names' hashes, so a
limited corpus still draws on many modules, and the same installation gives the same sentences.

:func:`read_sentences` takes a user's text file (one sentence per line) or a Parquet column.
:func:`split_corpus` sets a fixed number aside for evaluation, chosen by each sentence's hash.
"""

from __future__ import annotations

import ast
import hashlib
import re
import sysconfig
from collections.abc import Iterable, Iterator, Sequence
from dataclasses import dataclass
from pathlib import Path

from inferd.errors import InvalidArgumentError, UnavailableError

__all__ = [
    "DOCSTRINGS",
    "Corpus",
    "docstring_sentences",
    "load_sentences",
    "prose_sentences",
    "read_sentences",
    "split_corpus",
]

#: the ``--data`` value that names the built-in corpus
DOCSTRINGS = "docstrings"

_SKIPPED_DIRS = frozenset(
    {"test", "tests", "testing", "idlelib", "site-packages", "_vendor", "vendored", "__pycache__"}
)
_MAX_FILE_BYTES = 1_000_000
_SENTENCE_END = re.compile(r"(?<=[.!?])\s+(?=[A-Z])")
_PARAGRAPH = re.compile(r"\n\s*\n")
_NOT_PROSE = re.compile(r"[`_=(){}\[\]<>#@\\/*|~^$%&+]|\.\.|https?|www\.|\be\.g\b|\bi\.e\b")
_WORD = re.compile(r"[A-Za-z]+(?:['-][A-Za-z]+)*")
_NON_PROSE_LINE = (" ", "\t", ">>>", "..", ":", "-", "*", "|", "+", "=", "#")


@dataclass(frozen=True)
class Corpus:
    train: tuple[str, ...]
    held_out: tuple[str, ...]
    source: str


def _paragraphs(doc: str) -> Iterator[str]:
    for paragraph in _PARAGRAPH.split(doc):
        lines = paragraph.strip("\n").splitlines()
        if not lines or any(line.startswith(_NON_PROSE_LINE) for line in lines):
            continue  # code, field lists, tables, bullet points
        if paragraph.rstrip().endswith("::"):
            continue
        yield " ".join(line.strip() for line in lines)


def _reads_as_english(sentence: str) -> bool:
    if not 30 <= len(sentence) <= 250 or not sentence.isascii():
        return False
    if not sentence[0].isupper() or not sentence.endswith(".") or _NOT_PROSE.search(sentence):
        return False
    words = sentence[:-1].split()
    if not 6 <= len(words) <= 40:
        return False
    plain = sum(1 for w in words if _WORD.fullmatch(w.strip(",;:'\"")))
    return plain >= 0.85 * len(words)


def prose_sentences(doc: str) -> Iterator[str]:
    """The sentences of a docstring that read as plain English (see the module's docstring)."""
    for paragraph in _paragraphs(doc):
        for part in _SENTENCE_END.split(paragraph):
            sentence = " ".join(part.split())
            if _reads_as_english(sentence):
                yield sentence


def _docstrings(path: Path) -> Iterator[str]:
    try:
        if path.stat().st_size > _MAX_FILE_BYTES:
            return
        tree = ast.parse(path.read_bytes())
    except (OSError, SyntaxError, ValueError):
        return
    for node in ast.walk(tree):
        if isinstance(node, ast.Module | ast.ClassDef | ast.FunctionDef | ast.AsyncFunctionDef):
            doc = ast.get_docstring(node, clean=True)
            if doc:
                yield doc


def _hash(text: str) -> bytes:
    return hashlib.blake2b(text.encode(), digest_size=8).digest()


def _source_files(roots: Sequence[Path]) -> list[Path]:
    files: list[tuple[bytes, Path]] = []
    for root in roots:
        for path in root.rglob("*.py"):
            relative = path.relative_to(root)
            if _SKIPPED_DIRS.isdisjoint(relative.parts[:-1]):
                files.append((_hash(f"{root.name}/{relative}"), path))
    files.sort()
    return [path for _, path in files]


def _default_roots(packages: bool) -> list[Path]:
    paths = sysconfig.get_paths()
    roots = [Path(paths["stdlib"])]
    if packages:
        roots += sorted({Path(paths["purelib"]), Path(paths["platlib"])})
    return [r for r in roots if r.is_dir()]


def _unique(sentences: Iterable[str], limit: int | None) -> list[str]:
    seen: set[str] = set()
    kept: list[str] = []
    for sentence in sentences:
        key = sentence.casefold()
        if key not in seen:
            seen.add(key)
            kept.append(sentence)
            if limit is not None and len(kept) >= limit:
                break
    return kept


def docstring_sentences(
    limit: int | None = None, *, packages: bool = True, roots: Sequence[Path] | None = None
) -> list[str]:
    """Up to ``limit`` distinct sentences from the docstrings under ``roots`` (default: the
    standard library, and the installed packages when ``packages``)."""
    files = _source_files(roots if roots is not None else _default_roots(packages))
    found = (s for path in files for doc in _docstrings(path) for s in prose_sentences(doc))
    return _unique(found, limit)


def read_sentences(path: Path, column: str | None = None) -> list[str]:
    """The distinct non-empty sentences of a text file (one a line) or of a Parquet column
    (``column``, or the table's only text column)."""
    if not path.is_file():
        raise InvalidArgumentError(f"{path}: no such file")
    if path.suffix == ".parquet":
        lines = _parquet_column(path, column)
    else:
        if column is not None:
            raise InvalidArgumentError(f"{path}: a column is named only for Parquet files")
        try:
            lines = path.read_text(encoding="utf-8").splitlines()
        except UnicodeDecodeError as exc:
            raise InvalidArgumentError(f"{path}: not UTF-8 text ({exc.reason})") from None
    sentences = _unique((" ".join(line.split()) for line in lines if line.strip()), None)
    if not sentences:
        raise InvalidArgumentError(f"{path}: holds no sentences")
    return sentences


def _parquet_column(path: Path, column: str | None) -> list[str]:
    try:
        import pyarrow as pa
        import pyarrow.parquet as pq
    except ImportError as exc:
        raise UnavailableError(
            "reading Parquet needs pyarrow: pip install 'inferd[optimize]'"
        ) from exc
    schema = pq.read_schema(path)
    texts = [
        f.name for f in schema if pa.types.is_string(f.type) or pa.types.is_large_string(f.type)
    ]
    if column is None:
        if len(texts) != 1:
            raise InvalidArgumentError(
                f"{path}: name the text column (--text-column); text columns: "
                f"{', '.join(texts) or 'none'}"
            )
        column = texts[0]
    elif column not in schema.names:
        raise InvalidArgumentError(
            f"{path}: has no column '{column}' (columns: {', '.join(schema.names)})"
        )
    elif column not in texts:
        raise InvalidArgumentError(f"{path}: column '{column}' does not hold text")
    values = pq.read_table(path, columns=[column]).column(column).to_pylist()
    return [v for v in values if isinstance(v, str)]


def split_corpus(sentences: Sequence[str], held_out: int, source: str) -> Corpus:
    """``held_out`` sentences set aside (those with the smallest hashes, so the choice does not
    depend on the order), the rest for training in their own order."""
    if held_out < 1:
        raise InvalidArgumentError(f"at least one held-out sentence is needed, got {held_out}")
    if len(sentences) < held_out + 1:
        raise InvalidArgumentError(
            f"{source}: {len(sentences)} sentences, too few to hold out {held_out} and train "
            "on the rest"
        )
    chosen = set(sorted(range(len(sentences)), key=lambda i: _hash(sentences[i]))[:held_out])
    return Corpus(
        train=tuple(s for i, s in enumerate(sentences) if i not in chosen),
        held_out=tuple(sentences[i] for i in sorted(chosen)),
        source=source,
    )


def load_sentences(
    data: str, held_out: int, limit: int | None = None, column: str | None = None
) -> Corpus:
    """The corpus ``--data`` names: ``docstrings`` for the built-in one (``limit`` sentences in
    all, held-out ones included), else a text or Parquet file (``limit`` applies to it too)."""
    if data == DOCSTRINGS and not Path(data).exists():
        sentences = docstring_sentences(limit)
        source = "docstrings of the standard library and installed packages"
    else:
        sentences = read_sentences(Path(data), column)
        if limit is not None:
            sentences = sentences[:limit]
        source = data
    return split_corpus(sentences, held_out, source)
