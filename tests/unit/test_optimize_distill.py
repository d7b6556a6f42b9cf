"""Distillation: a tiny BERT distilled to half its layers gets closer to its teacher than the
student it started as, exported with the served encoder's interface; a classifier MLP learns a
digits teacher's outputs; student specs and the layers a student starts from."""

from __future__ import annotations

import warnings
from collections.abc import Iterator
from pathlib import Path

import numpy as np
import onnxruntime as ort
import pytest
from hypothesis import given
from hypothesis import strategies as st

from inferd.errors import InvalidArgumentError
from inferd.tools.optimize.students import (
    parse_classifier_spec,
    parse_encoder_spec,
    pick_layers,
)

torch = pytest.importorskip("torch")
transformers = pytest.importorskip("transformers")
tokenizers = pytest.importorskip("tokenizers")

from distill_models import build_digits_teacher, build_tiny_bert, digits_rows  # noqa: E402

from inferd.tools.optimize.corpus import docstring_sentences, split_corpus  # noqa: E402
from inferd.tools.optimize.data import Dataset  # noqa: E402
from inferd.tools.optimize.distill import (  # noqa: E402
    EncoderSettings,
    SentenceEncoder,
    distill_encoder,
    export_encoder,
    length_batches,
    load_encoder_teacher,
)
from inferd.tools.optimize.distill_classifier import (  # noqa: E402
    ClassifierSettings,
    distill_classifier,
    export_classifier,
    load_classifier_teacher,
)
from inferd.tools.optimize.students import EncoderSpec, encoder_student  # noqa: E402


@pytest.fixture(autouse=True)
def _one_thread() -> Iterator[None]:
    """Models this small train fastest on one thread; the setting is restored after."""
    threads = torch.get_num_threads()
    torch.set_num_threads(1)
    yield
    torch.set_num_threads(threads)


# ---------------------------------------------------------------------------------------------
# specs and layers


@given(st.integers(1, 48).flatmap(lambda m: st.tuples(st.just(m), st.integers(1, m))))
def test_picked_layers_are_distinct_in_range_and_keep_the_last(sizes: tuple[int, int]) -> None:
    teacher, student = sizes
    picked = pick_layers(teacher, student)
    assert len(picked) == student
    assert picked == sorted(set(picked))
    assert picked[-1] == teacher - 1
    assert picked[0] >= 0
    if student > 1:
        assert picked[0] == 0


def test_picked_layers_follow_distilbert() -> None:
    assert pick_layers(12, 6) == [0, 2, 4, 7, 9, 11]
    assert pick_layers(6, 3) == [0, 3, 5]
    with pytest.raises(InvalidArgumentError):
        pick_layers(4, 5)


def test_student_specs_are_parsed_or_refused_in_one_line() -> None:
    assert parse_encoder_spec("layers=3", 6).layers == 3
    assert parse_classifier_spec("hidden=128x64").hidden == (128, 64)
    assert parse_classifier_spec("hidden=0").hidden == ()
    bad = [
        ("layers=6", "has 6 layers"),
        ("layers=0", "positive whole number"),
        ("layers", "key=value"),
        ("hidden=3", "unknown key 'hidden'"),
        ("layers=2,layers=3", "given twice"),
    ]
    for text, message in bad:
        with pytest.raises(InvalidArgumentError, match=message):
            parse_encoder_spec(text, 6)
    with pytest.raises(InvalidArgumentError, match="each hidden size"):
        parse_classifier_spec("hidden=64xfoo")


def test_length_batches_take_every_index_once() -> None:
    lengths = [(i * 7) % 23 for i in range(203)]
    batches = length_batches(lengths, 16, torch.Generator().manual_seed(0))
    assert sorted(i for b in batches for i in b) == list(range(203))
    assert all(len(b) <= 16 for b in batches)
    assert sum(len(b) < 16 for b in batches) <= 1


# ---------------------------------------------------------------------------------------------
# encoders


@pytest.fixture(scope="module")
def sentences() -> list[str]:
    return docstring_sentences(360, packages=False)


@pytest.fixture(scope="module")
def tiny_bert(tmp_path_factory: pytest.TempPathFactory, sentences: list[str]) -> Path:
    return build_tiny_bert(tmp_path_factory.mktemp("tiny-bert"), sentences)


def test_a_student_starts_from_the_teachers_embeddings_and_layers(tiny_bert: Path) -> None:
    _, bert = load_encoder_teacher(tiny_bert)
    student, picked = encoder_student(bert, EncoderSpec(2))
    assert picked == [0, 3]
    assert len(student.encoder.layer) == 2
    assert len(bert.encoder.layer) == 4  # the teacher is left whole
    for mine, index in zip(student.encoder.layer, picked, strict=True):
        theirs = bert.encoder.layer[index].state_dict()
        for name, value in mine.state_dict().items():
            assert torch.equal(value, theirs[name]), name
    assert torch.equal(
        student.embeddings.word_embeddings.weight, bert.embeddings.word_embeddings.weight
    )
    assert student.encoder.layer[0] is not bert.encoder.layer[0]  # a copy, trained on its own


def test_a_tiny_bert_distilled_to_half_its_layers_beats_the_untrained_student(
    tiny_bert: Path, sentences: list[str], tmp_path: Path
) -> None:
    corpus = split_corpus(sentences, 60, "docstrings")
    settings = EncoderSettings(epochs=3, batch_size=16, max_seq_len=48, learning_rate=1e-3)
    run = distill_encoder(tiny_bert, corpus, "layers=2", settings)
    assert run.before.sentences == run.after.sentences == 60
    assert run.after.mean_cosine > run.before.mean_cosine + 0.05
    assert run.after.min_cosine > run.before.min_cosine
    assert run.recipe["initialised_from_teacher_layers"] == [0, 3]
    assert run.recipe["train_sentences"] == 300

    path = tmp_path / "student.onnx"
    error = export_encoder(run, path, 48)
    assert error < 1e-4
    session = ort.InferenceSession(str(path), providers=["CPUExecutionProvider"])
    inputs = {i.name: (i.type, i.shape) for i in session.get_inputs()}
    assert inputs == {
        "input_ids": ("tensor(int64)", ["batch", "seq"]),
        "attention_mask": ("tensor(int64)", ["batch", "seq"]),
    }
    (output,) = session.get_outputs()
    assert (output.name, output.type, output.shape) == (
        "sentence_embedding",
        "tensor(float)",
        ["batch", 32],
    )
    # the exported student gives what the trained student gives, at any batch and length
    tokenizer, _ = load_encoder_teacher(tiny_bert)
    tokens = tokenizer(
        list(corpus.held_out[:5]),
        padding="max_length",
        max_length=40,
        truncation=True,
        return_tensors="np",
    )
    feeds = {k: tokens[k].astype(np.int64) for k in ("input_ids", "attention_mask")}
    (embedding,) = session.run(None, feeds)
    assert embedding.shape == (5, 32)
    np.testing.assert_allclose(np.linalg.norm(embedding, axis=1), 1.0, rtol=1e-5)
    with torch.no_grad():
        want = run.student(*(torch.from_numpy(feeds[k]) for k in ("input_ids", "attention_mask")))
    np.testing.assert_allclose(embedding, want.numpy(), atol=1e-4)


def test_the_sentence_embedding_ignores_padding(tiny_bert: Path) -> None:
    tokenizer, bert = load_encoder_teacher(tiny_bert)
    encoder = SentenceEncoder(bert).eval()
    short = tokenizer(["Return the number of items."], return_tensors="pt")
    padded = tokenizer(
        ["Return the number of items."], padding="max_length", max_length=30, return_tensors="pt"
    )
    with torch.no_grad():
        a = encoder(short["input_ids"], short["attention_mask"])
        b = encoder(padded["input_ids"], padded["attention_mask"])
    np.testing.assert_allclose(a.numpy(), b.numpy(), atol=1e-5)


# ---------------------------------------------------------------------------------------------
# classifiers


@pytest.fixture(scope="module")
def digits() -> tuple[np.ndarray, np.ndarray]:
    return digits_rows()


@pytest.fixture(scope="module")
def digits_teacher(
    tmp_path_factory: pytest.TempPathFactory, digits: tuple[np.ndarray, np.ndarray]
) -> Path:
    return build_digits_teacher(tmp_path_factory.mktemp("teacher") / "digits.onnx", *digits)


@pytest.mark.parametrize("labelled", [False, True])
def test_a_classifier_student_learns_the_teachers_outputs(
    digits_teacher: Path, digits: tuple[np.ndarray, np.ndarray], tmp_path: Path, labelled: bool
) -> None:
    images, labels = digits
    teacher = load_classifier_teacher(digits_teacher)
    assert (teacher.input.name, teacher.input.dims, teacher.output) == (
        "pixels",
        (64,),
        "probabilities",
    )
    data = Dataset({"pixels": images}, labels if labelled else None, "digits")
    settings = ClassifierSettings(epochs=8, batch_size=64)
    run = distill_classifier(teacher, data, "hidden=24", 300, settings)
    assert run.probabilities
    assert run.after["agreement"] > run.before["agreement"]
    assert run.after["agreement"] >= 0.85
    assert ("accuracy" in run.after) is labelled
    if labelled:
        assert run.after["accuracy"] >= 0.8
    assert run.recipe["train_rows"] == len(images) - 300

    path = tmp_path / "student.onnx"
    export_classifier(run, path)
    session = ort.InferenceSession(str(path), providers=["CPUExecutionProvider"])
    assert [(i.name, i.shape) for i in session.get_inputs()] == [("pixels", ["batch", 64])]
    assert [(o.name, o.shape) for o in session.get_outputs()] == [("probabilities", ["batch", 10])]
    (probabilities,) = session.run(None, {"pixels": images[:7]})
    np.testing.assert_allclose(probabilities.sum(axis=1), 1.0, rtol=1e-5)


def test_a_torchscript_teacher_from_a_repository_folder(
    tmp_path: Path, digits: tuple[np.ndarray, np.ndarray]
) -> None:
    images, _ = digits
    folder = tmp_path / "digits_ts"
    (folder / "1").mkdir(parents=True)
    model = torch.nn.Sequential(torch.nn.Linear(64, 10)).eval()
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", DeprecationWarning)
        torch.jit.save(torch.jit.script(model), str(folder / "1" / "model.pt"))
    (folder / "config.pbtxt").write_text(
        'name: "digits_ts"\nplatform: "pytorch_libtorch"\nmax_batch_size: 8\n'
        'input [{ name: "INPUT__0" data_type: TYPE_FP32 dims: [ 64 ] }]\n'
        'output [{ name: "OUTPUT__0" data_type: TYPE_FP32 dims: [ 10 ] }]\n'
    )
    teacher = load_classifier_teacher(folder)
    assert (teacher.input.name, teacher.output) == ("INPUT__0", "OUTPUT__0")
    with torch.no_grad():
        want = model(torch.from_numpy(images[:3])).numpy()
    np.testing.assert_allclose(teacher.run(images[:3]), want, rtol=1e-6)
    with pytest.raises(InvalidArgumentError, match=r"give an \.onnx file"):
        load_classifier_teacher(tmp_path)
