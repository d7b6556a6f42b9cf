"""One copy of an ONNX model's weights for all of its sessions (inferd.backends.ort_weights)."""

from __future__ import annotations

import json
import subprocess
import sys
import textwrap
from pathlib import Path

import numpy as np
import onnx
import onnxruntime as ort
import pytest
from google.protobuf.message import DecodeError
from onnx import TensorProto, helper, numpy_helper
from onnx_graphs import save, with_weights

from inferd.backends.base import LoadContext
from inferd.backends.onnxruntime import OnnxRuntimeBackend, OnnxRuntimeModel
from inferd.backends.ort_weights import NotShareable, SharedWeights, first_session, mapped_ranges
from inferd.codecs.model_config import parse_pbtxt, spec_from_proto
from inferd.core.inference import InferRequest
from inferd.core.model_spec import InstanceGroupSpec
from inferd.errors import ConfigError, InferdError, ModelLoadError

CPU = ["CPUExecutionProvider"]


def _weighted(rows: int = 300) -> onnx.ModelProto:
    """float32, float16 and int64 weights, large and small: matrix products' weights (which ONNX
    Runtime repacks), a Gather table and an int64 list (which it keeps as they are), and one
    weight that two nodes use."""
    rng = np.random.default_rng(3)
    w1 = rng.standard_normal((16, 64)).astype(np.float32)
    half = rng.standard_normal((64, 64)).astype(np.float16)
    table = rng.standard_normal((rows, 64)).astype(np.float32)
    weights = [
        numpy_helper.from_array(w1, "w1"),
        numpy_helper.from_array(np.full(64, 0.5, np.float32), "b"),  # 256 bytes: inline
        numpy_helper.from_array(half, "half"),
        numpy_helper.from_array(table, "table"),
        # 1600 bytes of int64
        numpy_helper.from_array(np.linspace(0, rows - 1, 200).astype(np.int64), "ids"),
        numpy_helper.from_array(np.array([0], np.int64), "axis"),
    ]
    nodes = [
        helper.make_node("MatMul", ["X", "w1"], ["h"]),
        helper.make_node("Add", ["h", "b"], ["hb"]),
        helper.make_node("Relu", ["hb"], ["r"]),
        helper.make_node("Cast", ["half"], ["full"], to=TensorProto.FLOAT),
        helper.make_node("MatMul", ["r", "full"], ["m"]),
        helper.make_node("Shape", ["X"], ["rows"]),  # not a constant: nothing folded away
        helper.make_node("Gather", ["table", "rows"], ["g"]),
        helper.make_node("ReduceSum", ["g", "axis"], ["gs"], keepdims=0),
        helper.make_node("Gather", ["ids", "rows"], ["picked"]),
        helper.make_node("Cast", ["picked"], ["pf"], to=TensorProto.FLOAT),
        helper.make_node("ReduceSum", ["pf", "axis"], ["ps"], keepdims=1),
        helper.make_node("Add", ["m", "gs"], ["mg0"]),
        helper.make_node("Add", ["mg0", "ps"], ["mg"]),
        helper.make_node("MatMul", ["mg", "full"], ["Y"]),
    ]
    return with_weights(nodes, [_io("X", 16)], [_io("Y", 64)], weights)


def _io(name: str, width: int) -> onnx.ValueInfoProto:
    return helper.make_tensor_value_info(name, TensorProto.FLOAT, ["N", width])


def _x() -> np.ndarray:
    return np.random.default_rng(5).standard_normal((4, 16)).astype(np.float32)


def test_sessions_built_on_shared_weights_answer_as_the_file_does(tmp_path: Path) -> None:
    path = save(_weighted(), tmp_path / "1" / "model.onnx")
    expected = ort.InferenceSession(str(path), providers=CPU).run(None, {"X": _x()})[0]
    shared = SharedWeights(path)
    shared.share(shared.weights)
    # the large weights left the model the sessions parse; the small ones stayed inside
    stripped = onnx.ModelProto.FromString(shared.model)
    inline = {t.name for t in stripped.graph.initializer if t.HasField("raw_data")}
    assert inline == {"b", "axis"}
    assert shared.nbytes == 16 * 64 * 4 + 64 * 64 * 2 + 300 * 64 * 4 + 200 * 8
    assert len(shared.model) < 1024
    sessions = [
        ort.InferenceSession(shared.model, shared.apply(ort.SessionOptions()), providers=CPU)
        for _ in range(3)
    ]
    for session in sessions:
        np.testing.assert_array_equal(session.run(None, {"X": _x()})[0], expected)


def test_a_file_without_large_weights_inside_is_not_shared(tmp_path: Path) -> None:
    model = _weighted()
    small = save(model, tmp_path / "small" / "model.onnx")
    with pytest.raises(NotShareable, match="no weight of 100000 bytes or more"):
        SharedWeights(small, min_bytes=100_000)
    outside = tmp_path / "outside" / "model.onnx"
    outside.parent.mkdir()
    onnx.save_model(model, str(outside), save_as_external_data=True, location="w.bin")
    with pytest.raises(NotShareable, match="no weight"):
        SharedWeights(outside)
    (tmp_path / "empty.onnx").write_bytes(b"")
    with pytest.raises(NotShareable):
        SharedWeights(tmp_path / "empty.onnx")


def test_a_damaged_file_is_refused_by_the_reader(tmp_path: Path) -> None:
    blob = _weighted().SerializeToString()
    cut = tmp_path / "cut.onnx"
    cut.write_bytes(blob[: len(blob) // 2])
    with pytest.raises((NotShareable, DecodeError)):
        SharedWeights(cut)
    garbage = tmp_path / "garbage.onnx"
    garbage.write_bytes(b"\xff" * 4096)
    with pytest.raises((NotShareable, DecodeError)):
        SharedWeights(garbage)


def _matmuls() -> onnx.ModelProto:
    rng = np.random.default_rng(4)
    weights = [rng.standard_normal(s).astype(np.float32) for s in ((16, 256), (256, 64))]
    nodes = [
        helper.make_node("MatMul", ["X", "a"], ["h"]),
        helper.make_node("MatMul", ["h", "b"], ["Y"]),
    ]
    named = [numpy_helper.from_array(w, n) for w, n in zip(weights, "ab", strict=True)]
    return with_weights(nodes, [_io("X", 16)], [_io("Y", 64)], named)


def test_the_weights_onnxruntime_keeps_are_shared_and_those_it_repacks_are_not(
    tmp_path: Path,
) -> None:
    """A Gather's table stays as it is in every session: shared. A matrix product's weight
    each session repacks into a buffer of its own: read from the file by each, kept by none.
    Either way no session maps the file once the sessions are built."""
    path = save(_weighted(), tmp_path / "mixed" / "model.onnx")
    expected = ort.InferenceSession(str(path), providers=CPU).run(None, {"X": _x()})[0]
    weights = SharedWeights(path)
    assert first_session(weights, ort.SessionOptions(), CPU, 0) is None  # it kept some
    assert "table" in weights.shared
    assert "w1" not in weights.shared
    sessions = [
        ort.InferenceSession(weights.model, weights.apply(ort.SessionOptions()), providers=CPU)
        for _ in range(2)
    ]
    assert mapped_ranges(path) == set()
    for session in sessions:
        np.testing.assert_array_equal(session.run(None, {"X": _x()})[0], expected)
    # the answer is kept for the file: no session built to find it out again
    again = SharedWeights(path)
    assert first_session(again, ort.SessionOptions(), CPU, 0) is None
    assert again.shared == weights.shared

    only_products = save(_matmuls(), tmp_path / "products" / "model.onnx")
    weights = SharedWeights(only_products)
    first = first_session(weights, ort.SessionOptions(), CPU, 0)
    assert first is not None  # nothing to share: the session serves
    assert weights.shared == frozenset()
    assert mapped_ranges(only_products) == set()
    expected = ort.InferenceSession(str(only_products), providers=CPU).run(None, {"X": _x()})[0]
    np.testing.assert_array_equal(first.run(None, {"X": _x()})[0], expected)


def _load(tmp_path: Path, config: str, model: onnx.ModelProto | None = None) -> OnnxRuntimeModel:
    model_dir = tmp_path / "m"
    save(model or _weighted(), model_dir / "1" / "model.onnx")
    text = f"""
        name: "m" backend: "onnxruntime" max_batch_size: 0
        default_model_filename: "model.onnx"
        input [{{ name: "X" data_type: TYPE_FP32 dims: [-1, 16] }}]
        output [{{ name: "Y" data_type: TYPE_FP32 dims: [-1, 64] }}]
        {config}
    """
    spec = spec_from_proto(parse_pbtxt(text, "m"))
    ctx = LoadContext(spec=spec, version=1, model_dir=model_dir, version_dir=model_dir / "1")
    return OnnxRuntimeBackend().load(ctx)


def _answer(instance: object) -> np.ndarray:
    [result] = instance.execute([InferRequest(model_name="m", inputs={"X": _x()})])  # type: ignore[attr-defined]
    assert not isinstance(result, InferdError), result
    return np.asarray(result["Y"])


@pytest.mark.parametrize(
    ("config", "shared"),
    [
        ("instance_group [{ count: 2 kind: KIND_CPU }]", True),
        ("instance_group [{ count: 1 kind: KIND_CPU }]", False),  # one session: nothing to share
        (
            'instance_group [{ count: 2 kind: KIND_CPU }] parameters { key: "share_weights" '
            'value: { string_value: "false" } }',
            False,
        ),
        (
            'instance_group [{ count: 1 kind: KIND_CPU }] parameters { key: "share_weights" '
            'value: { string_value: "true" } }',
            True,
        ),
    ],
)
def test_the_backend_shares_a_models_weights_as_the_config_says(
    tmp_path: Path, config: str, shared: bool
) -> None:
    expected = ort.InferenceSession(_weighted().SerializeToString(), providers=CPU).run(
        None, {"X": _x()}
    )[0]
    model = _load(tmp_path, config)
    assert (model.weights is not None) is shared
    group = InstanceGroupSpec(name="g", kind="KIND_CPU", count=2)
    for index in range(2):
        np.testing.assert_array_equal(_answer(model.create_instance(group, index)), expected)


def test_a_bad_share_weights_value_is_refused(tmp_path: Path) -> None:
    with pytest.raises(ConfigError, match="share_weights"):
        _load(tmp_path, 'parameters { key: "share_weights" value: { string_value: "maybe" } }')
    with pytest.raises(ConfigError, match="did you mean 'share_weights'"):
        _load(tmp_path, 'parameters { key: "share_weight" value: { string_value: "1" } }')


def test_a_file_overwritten_after_the_load_changes_no_answer_until_the_next_load(
    tmp_path: Path,
) -> None:
    model = _load(tmp_path, "instance_group [{ count: 2 kind: KIND_CPU }]")
    group = InstanceGroupSpec(name="g", kind="KIND_CPU", count=2)
    instances = [model.create_instance(group, i) for i in range(2)]  # as a load builds them
    before = [_answer(instance) for instance in instances]
    (tmp_path / "m" / "1" / "model.onnx").write_bytes(b"not a model any more")
    for instance, answer in zip(instances, before, strict=True):
        np.testing.assert_array_equal(_answer(instance), answer)


def test_a_damaged_model_still_fails_its_load_with_onnxruntimes_reason(tmp_path: Path) -> None:
    blob = _weighted().SerializeToString()
    (tmp_path / "m" / "1").mkdir(parents=True)
    (tmp_path / "m" / "1" / "model.onnx").write_bytes(blob[: len(blob) // 2])
    with pytest.raises(ModelLoadError, match="onnxruntime could not create a session"):
        OnnxRuntimeBackend().load(
            LoadContext(
                spec=spec_from_proto(
                    parse_pbtxt(
                        'name: "m" backend: "onnxruntime" max_batch_size: 0 '
                        'default_model_filename: "model.onnx" '
                        "instance_group [{ count: 2 kind: KIND_CPU }]",
                        "m",
                    )
                ),
                version=1,
                model_dir=tmp_path / "m",
                version_dir=tmp_path / "m" / "1",
            )
        )


_RESIDENT = textwrap.dedent(
    """
    import json, sys
    from pathlib import Path
    import numpy as np
    import onnxruntime as ort
    from inferd.backends.ort_weights import SharedWeights, first_session, mapped_ranges

    def resident():
        for line in open("/proc/self/status"):
            if line.startswith("VmRSS"):
                return int(line.split()[1]) * 1024

    path, shared = Path(sys.argv[1]), sys.argv[2] == "1"
    cpu = ["CPUExecutionProvider"]
    ort.InferenceSession(sys.argv[3], providers=cpu)  # the runtime's libraries in
    before = resident()
    sessions = []
    if shared:
        weights = SharedWeights(path)
        first = first_session(weights, ort.SessionOptions(), cpu, 0)
        sessions += [] if first is None else [first]
    while len(sessions) < 3:
        if shared:
            options = weights.apply(ort.SessionOptions())
            sessions.append(ort.InferenceSession(weights.model, options, providers=cpu))
        else:
            sessions.append(ort.InferenceSession(str(path), providers=cpu))
    for session in sessions:  # every weight's pages touched
        session.run(None, {"X": np.ones((1, 16), np.float32)})
    print(json.dumps([resident() - before, len(mapped_ranges(path))]))
    """
)


def test_three_sessions_hold_one_copy_of_the_weights(tmp_path: Path) -> None:
    """A 48 MiB Gather table (ONNX Runtime does not repack it): three sessions built from the
    file hold three copies, three built on shared weights one. Each way in its own process."""
    path = save(_weighted(rows=196_608), tmp_path / "big" / "model.onnx")
    warm = save(_weighted(), tmp_path / "warm" / "model.onnx")
    grown = {}
    for shared in ("0", "1"):
        out = subprocess.run(
            [sys.executable, "-c", _RESIDENT, str(path), shared, str(warm)],
            capture_output=True,
            text=True,
            check=True,
            timeout=120,
        )
        grown[shared], mapped = json.loads(out.stdout)
        grown[shared] /= 1 << 20
        assert mapped == 0  # no session reads the file once built
    assert grown["0"] > 130, grown  # three copies of 48 MiB
    assert grown["1"] < 80, grown  # one


def test_a_weight_outside_the_version_folder_is_refused_as_before(tmp_path: Path) -> None:
    """The sessions are built from bytes, with the version folder as the one external data
    may come from: a weight that names a file outside it fails the load, shared or not."""
    model = _weighted()
    secret = np.arange(64, dtype=np.float32)
    (tmp_path / "secret.bin").write_bytes(secret.tobytes())
    outside = numpy_helper.from_array(secret, "outside")
    outside.ClearField("raw_data")
    outside.data_location = TensorProto.EXTERNAL
    for key, value in (("location", "../../../secret.bin"), ("offset", "0"), ("length", "256")):
        entry = outside.external_data.add()
        entry.key, entry.value = key, value
    model.graph.initializer.append(outside)
    model.graph.node.append(helper.make_node("Identity", ["outside"], ["leak"]))
    model.graph.output.append(helper.make_tensor_value_info("leak", TensorProto.FLOAT, [64]))
    for share in ("true", "false"):
        with pytest.raises(ModelLoadError, match="escapes model directory"):
            _load(
                tmp_path / share,
                "instance_group [{ count: 2 kind: KIND_CPU }] parameters { key: "
                f'"share_weights" value: {{ string_value: "{share}" }} }}',
                model,
            )
