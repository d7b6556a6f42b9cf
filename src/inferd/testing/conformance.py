"""A conformance kit: the contract every backend must keep, as tests anyone can run.

Backend authors (built-in or third-party) describe one small model with a
:class:`ConformanceCase` and get the same contract checks the built-in backends pass::

    # tests/test_my_backend.py
    from inferd.testing.conformance import ConformanceCase, conformance_tests

    CASE = ConformanceCase(
        name="double",
        write_model=write_double_model,   # (version_dir) -> config.pbtxt text
        make_inputs=double_inputs,        # (rng, rows) -> {"X": array}
        check_outputs=check_doubled,      # (inputs, outputs) -> None, asserts
    )
    test_my_backend_conformance = conformance_tests(CASE)

``conformance_tests`` returns one pytest test parametrized over every check (ids
``<case>-<check>``); it imports pytest only when called. Without pytest, call
:func:`run_check` or :func:`run_all` with a scratch directory; a failed check raises
:class:`ConformanceError` (an ``AssertionError``).

The model is prepared exactly as the server prepares it (config read, auto-complete,
normalisation, validation), then loaded by the backend the registry picks for its config: the
installed plugins and built-ins of :func:`~inferd.backends.registry.default_registry`, or
``case.backend`` when given. The checks, in order (:data:`CHECKS`):

``single``
    load -> create_instance -> execute one request: one result, outputs with the config's
    data types and shapes, and ``check_outputs`` (if given) agrees.
``batch``
    several requests in one ``execute`` (different row counts when the model batches): one
    result per request, in order, each equal to what the request gives when run alone.
``bad_request_alone``
    a bad request between good ones fails alone, with an ``InferdError`` whose code is
    ``INVALID_ARGUMENT``; the good ones still succeed (and match their solo results).
``requested_outputs``
    a request asking for one output gets (at least) that output.
``timed``
    if the instance has ``execute_timed``: same results as ``execute``, phase times >= 0.
``threads``
    two instances of one model executing at the same time on two threads give the same
    results as one at a time (each instance runs on its own worker thread in the server).
``close``
    ``close`` is idempotent on instances and loaded models, and a closed instance answers
    with an ``InferdError`` (returned per request or raised), never a result or a crash.
``corrupt_file``
    ``Backend.load`` of a model whose files are garbage raises ``ModelLoadError`` whose
    message starts with ``failed to load '<model name>'``.
"""

from __future__ import annotations

import threading
from collections.abc import Callable, Iterator, Mapping, Sequence
from contextlib import contextmanager
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np

from inferd.backends.base import (
    Backend,
    ExecutionTimes,
    LoadContext,
    LoadedModel,
    ModelInstance,
    Result,
)
from inferd.backends.registry import BackendRegistry, default_registry
from inferd.core.inference import InferRequest, RequestedOutput
from inferd.core.model_spec import InstanceGroupSpec, ModelSpec
from inferd.errors import ErrorCode, InferdError, ModelLoadError

__all__ = [
    "CHECKS",
    "ConformanceCase",
    "ConformanceError",
    "LoadedCase",
    "conformance_tests",
    "load_case",
    "run_all",
    "run_check",
]

Array = np.ndarray[Any, Any]
Inputs = dict[str, Array]
Outputs = Mapping[str, Array]


class ConformanceError(AssertionError):
    """A backend broke the contract; the message says which check and how."""


@dataclass(frozen=True)
class ConformanceCase:
    """One model to run the contract over.

    ``write_model(version_dir)`` writes the model file(s) into ``<model>/1/`` and returns the
    text of ``config.pbtxt`` (may be partial when the backend auto-completes; it must name the
    backend, or the files must identify it). ``make_inputs(rng, rows)`` returns one request's
    inputs; ``rows`` is the batch dimension when the model batches (``max_batch_size > 0``) and
    1 otherwise; draw values from ``rng`` so that requests differ. Optional:

    - ``check_outputs(inputs, outputs)``: assert the outputs are right for the inputs.
    - ``make_bad_inputs(rng, rows)``: a request the model must refuse. By default the kit adds 1
      to the first fixed dimension of the first input that has one (and skips the check if no
      input has a fixed dimension).
    - ``corrupt_model(version_dir)``: spoil the model after its config is prepared. By default
      every file ``write_model`` wrote is overwritten with bytes that are no model format.
    - ``backend``: a zero-argument factory of the backend under test, registered over the
      default registry (use it for backends that are not installed as plugins).
    - ``rtol`` / ``atol``: tolerance when comparing batched with solo results.
    """

    name: str
    write_model: Callable[[Path], str]
    make_inputs: Callable[[np.random.Generator, int], Inputs]
    check_outputs: Callable[[Inputs, Outputs], None] | None = None
    make_bad_inputs: Callable[[np.random.Generator, int], Inputs] | None = None
    corrupt_model: Callable[[Path], None] | None = None
    backend: Callable[[], Backend] | None = None
    rtol: float = 1e-5
    atol: float = 1e-6
    skip: Mapping[str, str] = field(default_factory=dict)  # check name -> reason to skip

    def __str__(self) -> str:
        return self.name


@dataclass
class LoadedCase:
    """A case's model loaded for checking: call :meth:`instance` for more instances."""

    case: ConformanceCase
    spec: ModelSpec
    backend: Backend
    loaded: LoadedModel
    model_dir: Path
    instances: list[ModelInstance] = field(default_factory=list)

    @property
    def group(self) -> InstanceGroupSpec:
        groups = self.spec.instance_groups
        return groups[0] if groups else InstanceGroupSpec(self.spec.name, "KIND_CPU", 1)

    def instance(self) -> ModelInstance:
        made = self.loaded.create_instance(self.group, len(self.instances))
        self.instances.append(made)
        return made

    def rows(self, wanted: int) -> int:
        return wanted if self.spec.max_batch_size > 0 else 1

    def request(self, inputs: Inputs, outputs: Sequence[str] | None = None) -> InferRequest:
        return InferRequest(
            model_name=self.spec.name,
            inputs=inputs,
            outputs=None if outputs is None else [RequestedOutput(n) for n in outputs],
        )

    def close(self) -> None:
        for made in self.instances:
            made.close()
        self.loaded.close()


def _registry(case: ConformanceCase) -> BackendRegistry:
    registry = default_registry()
    if case.backend is not None:
        registry.register(case.backend())
    return registry


def _written_files(version_dir: Path) -> list[Path]:
    return sorted(p for p in version_dir.rglob("*") if p.is_file())


def _prepare(case: ConformanceCase, workdir: Path) -> tuple[ModelSpec, Path, BackendRegistry]:
    # The repository package sits above backends; imported here so that the kit prepares the
    # model exactly as the server does without making the backends package depend on it.
    from inferd.repository.loader import LoadOptions, prepare

    model_dir = workdir / case.name
    version_dir = model_dir / "1"
    version_dir.mkdir(parents=True, exist_ok=True)
    config_text = case.write_model(version_dir)
    (model_dir / "config.pbtxt").write_text(config_text, encoding="utf-8")
    registry = _registry(case)
    prepared = prepare(case.name, model_dir, registry, LoadOptions())
    return prepared.spec, model_dir, registry


def load_case(case: ConformanceCase, workdir: Path) -> LoadedCase:
    """Write, prepare and load the case's model under ``workdir`` (no instance yet)."""
    spec, model_dir, registry = _prepare(case, workdir)
    backend = registry.for_spec(spec)
    ctx = LoadContext(spec=spec, version=1, model_dir=model_dir, version_dir=model_dir / "1")
    return LoadedCase(case, spec, backend, backend.load(ctx), model_dir)


@contextmanager
def _loaded(case: ConformanceCase, workdir: Path) -> Iterator[LoadedCase]:
    loaded = load_case(case, workdir)
    try:
        yield loaded
    finally:
        loaded.close()


# -- assertions ---------------------------------------------------------------------------------


def _fail(check: str, message: str) -> ConformanceError:
    return ConformanceError(f"[{check}] {message}")


def _ok(check: str, result: Result, what: str) -> Outputs:
    if isinstance(result, InferdError):
        raise _fail(check, f"{what} failed: {type(result).__name__}: {result}")
    if not isinstance(result, Mapping):
        raise _fail(check, f"{what} returned {type(result).__name__}, not a dict of outputs")
    return result


def _results(check: str, instance: ModelInstance, requests: Sequence[InferRequest]) -> list[Result]:
    results = instance.execute(requests)
    if not isinstance(results, list) or len(results) != len(requests):
        count = len(results) if isinstance(results, Sequence) else type(results).__name__
        raise _fail(check, f"execute of {len(requests)} request(s) returned {count} result(s)")
    return results


def _check_shapes(check: str, lc: LoadedCase, outputs: Outputs, rows: int, what: str) -> None:
    """Every output is a config output with the config's data type and dims."""
    spec = lc.spec
    for name, array in outputs.items():
        tensor = spec.output_by_name.get(name)
        if tensor is None:
            raise _fail(check, f"{what}: output '{name}' is not in the model configuration")
        if not isinstance(array, np.ndarray):
            raise _fail(check, f"{what}: output '{name}' is a {type(array).__name__}, not ndarray")
        expected = tensor.datatype.dtype
        if array.dtype != expected:
            raise _fail(
                check,
                f"{what}: output '{name}' has dtype {array.dtype}, the config says "
                f"{tensor.datatype.config_name} ({expected})",
            )
        dims = [rows, *tensor.dims] if spec.max_batch_size > 0 else list(tensor.dims)
        fits = len(array.shape) == len(dims) and all(
            d == -1 or d == s for d, s in zip(dims, array.shape, strict=True)
        )
        if not fits:
            raise _fail(
                check,
                f"{what}: output '{name}' has shape {list(array.shape)}, the config allows {dims}",
            )


def _same(check: str, case: ConformanceCase, got: Outputs, want: Outputs, what: str) -> None:
    if set(got) != set(want):
        raise _fail(check, f"{what}: outputs {sorted(got)} differ from solo run {sorted(want)}")
    for name, array in want.items():
        other = got[name]
        if array.dtype == object or other.dtype == object:
            equal = array.shape == other.shape and array.tolist() == other.tolist()
        else:
            equal = array.shape == other.shape and bool(
                np.allclose(other, array, rtol=case.rtol, atol=case.atol, equal_nan=True)
            )
        if not equal:
            raise _fail(check, f"{what}: output '{name}' differs from the request run alone")


def _good(
    check: str, lc: LoadedCase, instance: ModelInstance, inputs: Inputs, rows: int, what: str
) -> Outputs:
    [result] = _results(check, instance, [lc.request(inputs)])
    outputs = _ok(check, result, what)
    _check_shapes(check, lc, outputs, rows, what)
    if lc.case.check_outputs is not None:
        try:
            lc.case.check_outputs(inputs, outputs)
        except AssertionError as exc:
            raise _fail(check, f"{what}: check_outputs: {exc}") from exc
    return outputs


def _bad_inputs(lc: LoadedCase, rng: np.random.Generator) -> Inputs | None:
    case = lc.case
    if case.make_bad_inputs is not None:
        return case.make_bad_inputs(rng, lc.rows(2))
    inputs = case.make_inputs(rng, lc.rows(2))
    offset = 1 if lc.spec.max_batch_size > 0 else 0
    for tensor in lc.spec.inputs:
        if tensor.name not in inputs:
            continue
        for axis, dim in enumerate(tensor.dims):
            if dim > 0:
                array = inputs[tensor.name]
                shape = list(array.shape)
                shape[axis + offset] += 1
                grown = np.resize(array, shape).astype(array.dtype)
                return {**inputs, tensor.name: grown}
    return None


# -- the checks ---------------------------------------------------------------------------------


def check_single(lc: LoadedCase, rng: np.random.Generator) -> None:
    instance = lc.instance()
    rows = lc.rows(1)
    _good("single", lc, instance, lc.case.make_inputs(rng, rows), rows, "a single request")


def check_batch(lc: LoadedCase, rng: np.random.Generator) -> None:
    instance = lc.instance()
    row_counts = [lc.rows(n) for n in (1, 3, 2, 1)]
    inputs = [lc.case.make_inputs(rng, rows) for rows in row_counts]
    solo = [
        _good("batch", lc, instance, x, rows, f"request {i} alone")
        for i, (x, rows) in enumerate(zip(inputs, row_counts, strict=True))
    ]
    results = _results("batch", instance, [lc.request(x) for x in inputs])
    for i, (result, rows, want) in enumerate(zip(results, row_counts, solo, strict=True)):
        got = _ok("batch", result, f"request {i} of a batch of {len(inputs)}")
        _check_shapes("batch", lc, got, rows, f"request {i} of the batch")
        _same("batch", lc.case, got, want, f"request {i} of the batch")


def check_bad_request_alone(lc: LoadedCase, rng: np.random.Generator) -> None:
    bad = _bad_inputs(lc, rng)
    if bad is None:
        return
    instance = lc.instance()
    rows = lc.rows(2)
    first, last = lc.case.make_inputs(rng, rows), lc.case.make_inputs(rng, rows)
    want = [
        _good("bad_request_alone", lc, instance, x, rows, "good request") for x in (first, last)
    ]
    results = _results(
        "bad_request_alone", instance, [lc.request(first), lc.request(bad), lc.request(last)]
    )
    error = results[1]
    if not isinstance(error, InferdError):
        raise _fail("bad_request_alone", "the bad request (index 1 of 3) did not fail")
    if error.code is not ErrorCode.INVALID_ARGUMENT:
        raise _fail(
            "bad_request_alone",
            f"the bad request failed with code {error.code.value} ({type(error).__name__}: "
            f"{error}), expected INVALID_ARGUMENT",
        )
    for index, result, solo in ((0, results[0], want[0]), (2, results[2], want[1])):
        got = _ok("bad_request_alone", result, f"good request {index} next to a bad one")
        _same("bad_request_alone", lc.case, got, solo, f"good request {index}")


def check_requested_outputs(lc: LoadedCase, rng: np.random.Generator) -> None:
    instance = lc.instance()
    name = lc.spec.outputs[0].name
    request = lc.request(lc.case.make_inputs(rng, lc.rows(1)), [name])
    [result] = _results("requested_outputs", instance, [request])
    got = _ok("requested_outputs", result, f"a request for output '{name}' only")
    if name not in got:
        raise _fail("requested_outputs", f"output '{name}' was requested but not produced")


def check_timed(lc: LoadedCase, rng: np.random.Generator) -> None:
    instance = lc.instance()
    execute_timed = getattr(instance, "execute_timed", None)
    if execute_timed is None:
        return
    rows = lc.rows(2)
    inputs = [lc.case.make_inputs(rng, rows) for _ in range(2)]
    want = [_good("timed", lc, instance, x, rows, "execute") for x in inputs]
    times = ExecutionTimes()
    results = execute_timed([lc.request(x) for x in inputs], times)
    if len(results) != len(inputs):
        raise _fail("timed", f"execute_timed of 2 requests returned {len(results)} results")
    for i, (result, solo) in enumerate(zip(results, want, strict=True)):
        _same("timed", lc.case, _ok("timed", result, f"request {i}"), solo, f"request {i}")
    if min(times.input_ns, times.infer_ns, times.output_ns) < 0:
        raise _fail("timed", f"negative phase times: {times}")


def check_threads(lc: LoadedCase, rng: np.random.Generator) -> None:
    instances = [lc.instance(), lc.instance()]
    rows = lc.rows(2)
    work = [[lc.case.make_inputs(rng, rows) for _ in range(8)] for _ in instances]
    want = [[_good("threads", lc, instances[0], x, rows, "serial run") for x in w] for w in work]
    got: list[list[Result]] = [[], []]
    failures: list[BaseException] = []
    start = threading.Barrier(len(instances))

    def worker(index: int) -> None:
        try:
            start.wait(timeout=30)
            for x in work[index]:
                got[index].extend(instances[index].execute([lc.request(x)]))
        except BaseException as exc:  # reported below, on the test's thread
            failures.append(exc)

    threads = [threading.Thread(target=worker, args=(i,)) for i in range(len(instances))]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(timeout=60)
    if failures:
        raise _fail("threads", f"concurrent execute raised {failures[0]!r}") from failures[0]
    for t, (results, solos) in enumerate(zip(got, want, strict=True)):
        for i, (result, solo) in enumerate(zip(results, solos, strict=True)):
            what = f"thread {t} request {i}"
            _same("threads", lc.case, _ok("threads", result, what), solo, what)


def check_close(lc: LoadedCase, rng: np.random.Generator) -> None:
    instance = lc.instance()
    request = lc.request(lc.case.make_inputs(rng, lc.rows(1)))
    _ok("close", _results("close", instance, [request])[0], "a request before close")
    instance.close()
    instance.close()
    try:
        results = instance.execute([request])
    except InferdError:
        pass
    except Exception as exc:
        raise _fail(
            "close", f"execute after close raised {type(exc).__name__}, not an InferdError: {exc}"
        ) from exc
    else:
        if len(results) != 1 or not isinstance(results[0], InferdError):
            raise _fail("close", f"execute after close answered {results!r}, not an error")
    lc.loaded.close()
    lc.loaded.close()


def _garble(version_dir: Path) -> None:
    for path in _written_files(version_dir):
        path.write_bytes(b"\x00this is not a model\xff" * 8)


def check_corrupt_file(case: ConformanceCase, workdir: Path) -> None:
    spec, model_dir, registry = _prepare(case, workdir)
    (case.corrupt_model or _garble)(model_dir / "1")
    backend = registry.for_spec(spec)
    ctx = LoadContext(spec=spec, version=1, model_dir=model_dir, version_dir=model_dir / "1")
    try:
        loaded = backend.load(ctx)
    except ModelLoadError as exc:
        prefix = f"failed to load '{spec.name}'"
        if not str(exc).startswith(prefix):
            raise _fail(
                "corrupt_file", f"the load error does not start with {prefix!r}: {exc}"
            ) from exc
        return
    except Exception as exc:
        raise _fail(
            "corrupt_file",
            f"loading a corrupt model raised {type(exc).__name__}, not ModelLoadError: {exc}",
        ) from exc
    loaded.close()
    raise _fail("corrupt_file", "a model whose files are garbage loaded without an error")


_InstanceCheck = Callable[[LoadedCase, np.random.Generator], None]

_INSTANCE_CHECKS: dict[str, _InstanceCheck] = {
    "single": check_single,
    "batch": check_batch,
    "bad_request_alone": check_bad_request_alone,
    "requested_outputs": check_requested_outputs,
    "timed": check_timed,
    "threads": check_threads,
    "close": check_close,
}

CHECKS: tuple[str, ...] = (*_INSTANCE_CHECKS, "corrupt_file")
"""Every check's name, in the order :func:`run_all` runs them."""


def run_check(case: ConformanceCase, check: str, workdir: Path, *, seed: int = 0) -> None:
    """Run one check over ``case`` in ``workdir`` (an empty scratch directory).

    Raises :class:`ConformanceError` when the backend breaks the contract; errors the backend
    raises where the contract does not allow one propagate as they are.
    """
    if check == "corrupt_file":
        check_corrupt_file(case, workdir)
        return
    run = _INSTANCE_CHECKS.get(check)
    if run is None:
        raise ValueError(f"unknown conformance check '{check}'; known: {', '.join(CHECKS)}")
    with _loaded(case, workdir) as lc:
        run(lc, np.random.default_rng(seed))


def run_all(case: ConformanceCase, workdir: Path) -> None:
    """Run every check (minus ``case.skip``), each in its own subdirectory of ``workdir``."""
    for check in CHECKS:
        if check not in case.skip:
            run_check(case, check, workdir / check)


def conformance_tests(*cases: ConformanceCase) -> Callable[..., None]:
    """One pytest test parametrized over ``cases`` x :data:`CHECKS`; assign it to a
    ``test_*`` name in a test module. Checks listed in ``case.skip`` are reported as skipped."""
    import pytest

    params = [
        pytest.param(
            case,
            check,
            id=f"{case.name}-{check}",
            marks=[pytest.mark.skip(reason=case.skip[check])] if check in case.skip else [],
        )
        for case in cases
        for check in CHECKS
    ]

    @pytest.mark.parametrize(("case", "check"), params)
    def test_backend_conformance(case: ConformanceCase, check: str, tmp_path: Path) -> None:
        run_check(case, check, tmp_path)

    return test_backend_conformance
