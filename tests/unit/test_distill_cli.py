"""``inferd distill`` end to end: an encoder and a classifier distilled from the command line,
options refused in one line before any work, and Ctrl-C leaving nothing written."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import numpy as np
import pytest

from inferd.cli.main import main

torch = pytest.importorskip("torch")
pytest.importorskip("transformers")

from distill_models import build_digits_teacher, build_tiny_bert, digits_rows  # noqa: E402

from inferd.tools.optimize.corpus import docstring_sentences  # noqa: E402
from tests.helpers.signals import ctrl_c_reachable  # noqa: E402


@pytest.fixture(autouse=True)
def _one_thread() -> Iterator[None]:
    """Models this small train fastest on one thread; the setting is restored after."""
    threads = torch.get_num_threads()
    torch.set_num_threads(1)
    yield
    torch.set_num_threads(threads)


@pytest.fixture(scope="module")
def sentences_file(tmp_path_factory: pytest.TempPathFactory) -> Path:
    path = tmp_path_factory.mktemp("text") / "sentences.txt"
    path.write_text("\n".join(docstring_sentences(160, packages=False)) + "\n")
    return path


@pytest.fixture(scope="module")
def tiny_bert(tmp_path_factory: pytest.TempPathFactory, sentences_file: Path) -> Path:
    sentences = sentences_file.read_text().splitlines()
    return build_tiny_bert(tmp_path_factory.mktemp("tiny-bert"), sentences)


@pytest.fixture(scope="module")
def classifier(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, Path]:
    """A digits teacher and an .npz of its rows with labels."""
    images, labels = digits_rows()
    folder = tmp_path_factory.mktemp("digits")
    teacher = build_digits_teacher(folder / "teacher.onnx", images, labels)
    data = folder / "digits.npz"
    np.savez(data, pixels=images, label=labels)
    return teacher, data


def test_help_explains_the_command(capsys: pytest.CaptureFixture[str]) -> None:
    with pytest.raises(SystemExit) as exit_info:
        main(["distill", "--help"])
    assert exit_info.value.code == 0
    text = capsys.readouterr().out
    for expected in ("--student SPEC", "layers=N", "hidden=AxB", "docstrings", "exit codes"):
        assert expected in text


def test_an_encoder_is_distilled_from_the_command_line(
    tiny_bert: Path, sentences_file: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    out = tmp_path / "student"
    code = main(
        [
            "distill",
            str(tiny_bert),
            "--student",
            "layers=2",
            "--data",
            str(sentences_file),
            "--output",
            str(out),
            "--epochs",
            "2",
            "--batch-size",
            "16",
            "--held-out",
            "30",
            "--max-seq-len",
            "40",
            "--learning-rate",
            "1e-3",
            "--quiet",
        ]
    )
    printed = capsys.readouterr()
    assert code == 0, printed.err
    assert sorted(p.name for p in out.iterdir()) == ["distill.json", "model.onnx"]
    record = json.loads((out / "distill.json").read_text())
    assert record["kind"] == "encoder"
    assert record["recipe"]["student"] == "layers=2"
    assert record["recipe"]["held_out_sentences"] == 30
    figures = record["held_out"]
    assert figures["after"]["mean_cosine"] > figures["before"]["mean_cosine"]
    assert "held-out (30 sentences): mean cosine to the teacher" in printed.out
    assert f"wrote {out / 'model.onnx'}" in printed.out

    # a second run does not replace the student unless told to
    again = [
        "distill",
        str(tiny_bert),
        "--student",
        "layers=2",
        "--data",
        str(sentences_file),
        "--output",
        str(out),
    ]
    assert main(again) == 2
    assert "exists: give --force" in capsys.readouterr().err


@pytest.mark.parametrize(
    ("extra", "message"),
    [
        (["--student", "layers=4"], "the teacher has 4 layers; a student has fewer"),
        (["--student", "hidden=8"], "unknown key 'hidden'"),
        (["--student", "layers=2", "--temperature", "2"], "--temperature apply only to"),
        (["--student", "layers=2", "--epochs", "0"], "--epochs must be at least 1"),
    ],
)
def test_bad_encoder_options_are_one_line_and_write_nothing(
    tiny_bert: Path,
    sentences_file: Path,
    tmp_path: Path,
    capsys: pytest.CaptureFixture[str],
    extra: list[str],
    message: str,
) -> None:
    out = tmp_path / "never"
    args = ["distill", str(tiny_bert), "--data", str(sentences_file), "--output", str(out)]
    assert main([*args, *extra, "--quiet"]) == 2
    err = capsys.readouterr().err
    assert message in err
    assert err.count("\n") == 1
    assert err.startswith("inferd distill: error: ")
    assert not out.exists()


def test_a_classifier_is_distilled_from_the_command_line(
    classifier: tuple[Path, Path], tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    teacher, data = classifier
    out = tmp_path / "mlp"
    code = main(
        [
            "distill",
            str(teacher),
            "--student",
            "hidden=24",
            "--data",
            str(data),
            "--output",
            str(out),
            "--epochs",
            "8",
            "--quiet",
        ]
    )
    printed = capsys.readouterr()
    assert code == 0, printed.err
    record = json.loads((out / "distill.json").read_text())
    assert record["kind"] == "classifier"
    after = record["held_out"]["after"]
    assert after["agreement"] >= 0.85
    assert after["accuracy"] >= 0.8  # the labels were found under 'label'
    assert record["recipe"]["held_out_rows"] == len(digits_rows()[0]) // 5
    assert "agreement with the teacher" in printed.out

    wrong = [
        "distill",
        str(teacher),
        "--student",
        "hidden=8",
        "--data",
        str(data),
        "--output",
        str(tmp_path / "x"),
        "--max-seq-len",
        "8",
    ]
    assert main(wrong) == 2
    assert "--max-seq-len apply only to an encoder teacher" in capsys.readouterr().err


def test_ctrl_c_during_training_writes_nothing(tiny_bert: Path, tmp_path: Path) -> None:
    data = tmp_path / "many.txt"
    data.write_text(
        "".join(f"Sentence {i} is one more line of the corpus text.\n" for i in range(200))
    )
    out = tmp_path / "interrupted"
    command = [
        sys.executable,
        "-m",
        "inferd.cli.main",
        "distill",
        str(tiny_bert),
        "--student",
        "layers=2",
        "--data",
        str(data),
        "--output",
        str(out),
        "--epochs",
        "500",
        "--batch-size",
        "8",
        "--held-out",
        "10",
    ]
    env = {**os.environ, "PYTHONUNBUFFERED": "1", "OMP_NUM_THREADS": "1"}
    with subprocess.Popen(
        command,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        env=env,
        preexec_fn=ctrl_c_reachable,
    ) as process:
        assert process.stdout is not None
        for line in process.stdout:  # the line printed as training starts
            if line.startswith("training"):
                break
        process.send_signal(signal.SIGINT)
        _, err = process.communicate(timeout=60)
    assert process.returncode == 130, err
    assert "interrupted; nothing was written" in err
    assert not out.exists()
