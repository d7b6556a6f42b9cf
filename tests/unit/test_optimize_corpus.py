"""The distillation corpus: prose sentences from docstrings (read, never imported), a user's text
file or Parquet column, and a held-out split that does not depend on the order."""

from __future__ import annotations

import random
from pathlib import Path

import pytest

from inferd.errors import InvalidArgumentError
from inferd.tools.optimize.corpus import (
    docstring_sentences,
    load_sentences,
    prose_sentences,
    read_sentences,
    split_corpus,
)

DOC = """Return the number of items waiting in the queue. The count is a snapshot only.

Example::

    >>> queue.size()
    3

:param timeout: how long to wait for an item before giving up entirely
- a bullet point that should never count as a sentence of prose.

Read more at https://example.org/docs/queue.html about how queues work here.
Calls ``close()`` on the transport before the loop ends and returns.
Too short here.
The café serves coffee with milk and sugar every single morning.
This paragraph is wrapped
over several lines and still reads as one sentence of English prose.
"""


def test_only_plain_prose_sentences_are_kept() -> None:
    assert list(prose_sentences(DOC)) == [
        "Return the number of items waiting in the queue.",
        "This paragraph is wrapped over several lines and still reads as one sentence of "
        "English prose.",
    ]


def _package(root: Path) -> Path:
    (root / "pkg" / "tests").mkdir(parents=True)
    (root / "pkg" / "__init__.py").write_text(
        '"""Tools that count the sheep in a field at night without waking them."""\n'
        "import a_module_that_does_not_exist  # the corpus reads files, it never imports them\n"
        "raise SystemExit('imported')\n"
    )
    (root / "pkg" / "farm.py").write_text(
        "class Barn:\n"
        '    """A barn keeps the animals warm and dry during the long winter.\n\n'
        '    Tools that count the sheep in a field at night without waking them.\n    """\n\n'
        "    def open(self):\n"
        '        """Open the large wooden doors of the barn in the morning."""\n'
    )
    (root / "pkg" / "tests" / "test_farm.py").write_text(
        '"""Checks that the barn doors open and close as the farmer expects."""\n'
    )
    (root / "pkg" / "broken.py").write_text('"""Not python at all because of this line.\n')
    return root


def test_docstring_sentences_read_files_skip_tests_and_duplicates(tmp_path: Path) -> None:
    sentences = docstring_sentences(roots=[_package(tmp_path)])
    assert sorted(sentences) == [
        "A barn keeps the animals warm and dry during the long winter.",
        "Open the large wooden doors of the barn in the morning.",
        "Tools that count the sheep in a field at night without waking them.",
    ]
    assert docstring_sentences(roots=[tmp_path]) == sentences  # the same order every time
    assert len(docstring_sentences(2, roots=[tmp_path])) == 2


def test_the_standard_library_gives_distinct_english_sentences() -> None:
    first = docstring_sentences(300, packages=False)
    assert len(first) == 300
    assert len({s.casefold() for s in first}) == 300
    assert all(s[0].isupper() and s.endswith(".") and s.isascii() for s in first)
    assert docstring_sentences(300, packages=False) == first


def test_a_text_file_gives_its_distinct_lines(tmp_path: Path) -> None:
    path = tmp_path / "s.txt"
    path.write_text("  first   sentence here \n\nsecond one\nfirst sentence here\n")
    assert read_sentences(path) == ["first sentence here", "second one"]
    (tmp_path / "empty.txt").write_text("\n \n")
    with pytest.raises(InvalidArgumentError, match="holds no sentences"):
        read_sentences(tmp_path / "empty.txt")
    with pytest.raises(InvalidArgumentError, match="no such file"):
        read_sentences(tmp_path / "missing.txt")
    with pytest.raises(InvalidArgumentError, match="only for Parquet"):
        read_sentences(path, column="text")


def test_a_parquet_column_gives_its_sentences(tmp_path: Path) -> None:
    pa = pytest.importorskip("pyarrow")
    pq = pytest.importorskip("pyarrow.parquet")
    path = tmp_path / "s.parquet"
    pq.write_table(pa.table({"id": [1, 2, 3], "text": ["one here", "two here", "one here"]}), path)
    assert read_sentences(path) == ["one here", "two here"]
    assert read_sentences(path, "text") == ["one here", "two here"]
    with pytest.raises(InvalidArgumentError, match="does not hold text"):
        read_sentences(path, "id")
    with pytest.raises(InvalidArgumentError, match="has no column 'body'"):
        read_sentences(path, "body")
    two = tmp_path / "two.parquet"
    pq.write_table(pa.table({"a": ["x"], "b": ["y"]}), two)
    with pytest.raises(InvalidArgumentError, match="name the text column"):
        read_sentences(two)


def test_the_held_out_split_is_disjoint_and_ignores_the_order() -> None:
    sentences = [f"Sentence number {i} of the corpus." for i in range(200)]
    corpus = split_corpus(sentences, 20, "test")
    assert len(corpus.held_out) == 20
    assert len(corpus.train) == 180
    assert not set(corpus.held_out) & set(corpus.train)
    shuffled = sentences[:]
    random.Random(4).shuffle(shuffled)
    assert set(split_corpus(shuffled, 20, "test").held_out) == set(corpus.held_out)
    with pytest.raises(InvalidArgumentError, match="too few"):
        split_corpus(sentences[:20], 20, "test")
    with pytest.raises(InvalidArgumentError, match="at least one"):
        split_corpus(sentences, 0, "test")


def test_load_sentences_takes_a_file_and_a_limit(tmp_path: Path) -> None:
    path = tmp_path / "s.txt"
    path.write_text("".join(f"line {i}\n" for i in range(50)))
    corpus = load_sentences(str(path), held_out=5, limit=30)
    assert (len(corpus.train), len(corpus.held_out), corpus.source) == (25, 5, str(path))
    builtin = load_sentences("docstrings", held_out=10, limit=60)
    assert (len(builtin.train), len(builtin.held_out)) == (50, 10)
