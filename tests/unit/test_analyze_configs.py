"""A candidate applied to a model's config: only the named fields change, the text parses back
through inferd's own config parser, and the written model loads and answers."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import numpy as np
import pytest

from inferd.cli.perf_inprocess import running_engine
from inferd.codecs.model_config import parse_json_config, parse_pbtxt, to_json_dict
from inferd.core.inference import InferRequest
from inferd.errors import InvalidArgumentError
from inferd.tools.analyze.configs import (
    apply_candidate,
    candidate_of,
    facts_of,
    load_base_config,
    override_json,
    pbtxt_text,
    write_config,
)
from inferd.tools.analyze.space import Candidate

EXAMPLES = Path(__file__).resolve().parents[2] / "examples" / "models"
TUNED = Candidate(3, 4, True, 250, (2, 4), 1, 1)


@pytest.fixture
def simple_repo(tmp_path: Path) -> Path:
    repo = tmp_path / "repo"
    shutil.copytree(EXAMPLES / "simple", repo / "simple")
    return repo


def test_a_candidate_changes_only_its_fields() -> None:
    base = load_base_config(EXAMPLES / "simple", None)
    config = apply_candidate(base, TUNED)
    assert candidate_of(config) == TUNED
    rendered, original = to_json_dict(config), to_json_dict(base)
    for field in ("instance_group", "max_batch_size", "dynamic_batching", "parameters"):
        rendered.pop(field, None)
        original.pop(field, None)
    assert rendered == original
    assert to_json_dict(base) == to_json_dict(load_base_config(EXAMPLES / "simple", None))


def test_turning_batching_and_threads_off_again() -> None:
    base = apply_candidate(load_base_config(EXAMPLES / "simple", None), TUNED)
    plain = apply_candidate(base, Candidate(1, 8, False))
    assert plain.WhichOneof("scheduling_choice") is None
    assert dict(plain.parameters) == {}
    assert candidate_of(plain) == Candidate(1, 8, False)


def test_the_text_and_the_override_parse_back_the_same() -> None:
    config = apply_candidate(load_base_config(EXAMPLES / "digits", None), TUNED)
    text = pbtxt_text(config, "chosen by a test\nsecond line")
    assert text.startswith("# chosen by a test\n# second line\n")
    assert parse_pbtxt(text, "written") == config
    assert parse_json_config(override_json(config), "override") == config
    assert json.loads(override_json(config))["parameters"]["intra_op_thread_count"] == {
        "string_value": "1"
    }


def test_facts_of_the_examples() -> None:
    simple = facts_of(load_base_config(EXAMPLES / "simple", None))
    assert (simple.max_batch_size, simple.onnxruntime, simple.batches) == (8, True, True)
    sequence = facts_of(load_base_config(EXAMPLES / "simple_sequence", None))
    assert not sequence.batches


def test_written_copy_keeps_the_model_and_the_original_stays(
    simple_repo: Path, tmp_path: Path
) -> None:
    original = (simple_repo / "simple" / "config.pbtxt").read_text()
    config = apply_candidate(load_base_config(simple_repo / "simple", None), TUNED)
    out = tmp_path / "out"
    path = write_config(simple_repo / "simple", config, "tuned", output_repository=out)
    assert path == out / "simple" / "config.pbtxt"
    assert (out / "simple" / "1" / "model.onnx").is_file()
    assert (simple_repo / "simple" / "config.pbtxt").read_text() == original
    with pytest.raises(InvalidArgumentError, match="--apply"):
        write_config(simple_repo / "simple", config, "", output_repository=simple_repo)


def test_in_place_keeps_the_first_original_as_a_backup(simple_repo: Path) -> None:
    model_dir = simple_repo / "simple"
    original = (model_dir / "config.pbtxt").read_text()
    base = load_base_config(model_dir, None)
    write_config(model_dir, apply_candidate(base, TUNED), "first", output_repository=None)
    write_config(
        model_dir, apply_candidate(base, Candidate(2, 8, False)), "second", output_repository=None
    )
    assert (model_dir / "config.pbtxt.orig").read_text() == original
    assert candidate_of(load_base_config(model_dir, None)) == Candidate(2, 8, False)


async def test_the_written_model_loads_and_answers(simple_repo: Path, tmp_path: Path) -> None:
    config = apply_candidate(load_base_config(simple_repo / "simple", None), TUNED)
    out = tmp_path / "out"
    write_config(simple_repo / "simple", config, "tuned", output_repository=out)
    async with running_engine(out, "simple") as engine:
        spec = engine.model_config("simple")
        assert spec.max_batch_size == 4
        assert spec.instance_groups[0].count == 3
        assert spec.dynamic_batching is not None
        assert spec.dynamic_batching.max_queue_delay_us == 250
        assert spec.dynamic_batching.preferred_batch_sizes == (2, 4)
        ones = np.ones((1, 16), dtype=np.int32)
        request = InferRequest(model_name="simple", inputs={"INPUT0": ones, "INPUT1": ones})
        response = await engine.infer(request)
        assert np.array_equal(response.outputs["OUTPUT0"], ones * 2)


async def test_a_model_without_config_pbtxt_starts_from_the_served_config(tmp_path: Path) -> None:
    repo, out = tmp_path / "repo", tmp_path / "out"
    (repo / "auto" / "1").mkdir(parents=True)
    shutil.copy(EXAMPLES / "simple" / "1" / "model.onnx", repo / "auto" / "1" / "model.onnx")
    async with running_engine(repo, "auto") as engine:
        served = dict(engine.model_config("auto").config)
    base = load_base_config(repo / "auto", served)
    assert base.name == "auto"
    assert base.max_batch_size > 0  # the server found the batch dimension
    tuned = Candidate(1, 4, True, 100)
    write_config(repo / "auto", apply_candidate(base, tuned), "", output_repository=out)
    async with running_engine(out, "auto") as engine:
        spec = engine.model_config("auto")
        assert spec.max_batch_size == 4
        assert spec.dynamic_batching is not None
        assert spec.dynamic_batching.max_queue_delay_us == 100
