"""The OpenAPI document of the HTTP API, and property-based fuzzing of a live server with it.

The document must be a valid OpenAPI document that lists exactly the routes the server matches
(:mod:`inferd.frontends.http.routes`). Schemathesis then generates requests from it, valid and
invalid (positive and negative modes), for every operation, against a real ``inferd serve``
process (explicit model control, uploads off): no answer may be a server error, and every
answer must match the document (status, content type, body schema, headers). Afterwards the
process is alive, answers liveness, and its memory grew within the bound of ``conftest.py``.

Generation is derandomized, so every CI run sends the same requests.
"""

from __future__ import annotations

import re
import time
from importlib.resources import files
from typing import Any

import hypothesis
import hypothesis.errors
import pytest
import schemathesis
import yaml
from hypothesis import strategies as st
from openapi_spec_validator import validate as validate_openapi

from inferd.frontends.http.routes import METHOD, Endpoint, match_route
from inferd.testing import ServerProcess
from tests.fuzz.conftest import (
    FUZZ_MODELS,
    Tally,
    assert_server_healthy,
    rss_bytes,
)

pytestmark = pytest.mark.timeout(300)

#: examples per operation and generation mode (the run sends about 17 operations x 2 modes x
#: this many requests, fewer where an operation has little to vary)
EXAMPLES_PER_OPERATION = 60

#: names that exist, so that requests also reach the models and the load/unload paths
_REAL_NAMES = st.sampled_from(FUZZ_MODELS)


def _document() -> dict[str, Any]:
    text = (files("inferd.frontends.http") / "openapi.yaml").read_text(encoding="utf-8")
    loaded = yaml.safe_load(text)
    assert isinstance(loaded, dict)
    return loaded


def _operations(document: dict[str, Any]) -> list[tuple[str, str]]:
    return [
        (method.upper(), path)
        for path, item in document["paths"].items()
        for method in item
        if method in ("get", "put", "post", "delete", "patch", "head", "options")
    ]


# -- the document -------------------------------------------------------------------------------


def test_openapi_document_is_valid() -> None:
    document = _document()
    validate_openapi(document)
    assert document["openapi"].startswith("3.")
    schema = schemathesis.openapi.from_dict(document)
    operations = [result.ok() for result in schema.get_all_operations()]
    assert len(operations) == len(_operations(document))


def test_openapi_document_lists_exactly_the_served_routes() -> None:
    """Every path of the document reaches the endpoint its method serves, and every endpoint of
    the router has an operation in the document."""
    covered: set[Endpoint] = set()
    for method, template in _operations(_document()):
        path = template.replace("{model_name}", "some_model").replace("{model_version}", "3")
        route = match_route(path, method)
        assert route is not None, f"{method} {template} is not a route of the server"
        assert route.method == method, f"{template}: the server serves {route.method}, not {method}"
        covered.add(route.endpoint)
    missing = set(Endpoint) - covered
    assert not missing, f"endpoints missing from openapi.yaml: {sorted(e.value for e in missing)}"
    assert set(METHOD) == set(Endpoint)


# -- fuzzing ------------------------------------------------------------------------------------

_UNSUPPORTED = re.compile(r"not support|unsupported", re.IGNORECASE)


def _strategy(operation: Any, mode: schemathesis.GenerationMode) -> Any:
    """Generated cases, half of them with a model name (and version 1) that exists."""
    fixed: list[Any] = [operation.as_strategy(mode)]
    names = {p.name for p in operation.path_parameters}
    if "model_name" in names:

        def with_real_name(name: str) -> Any:
            path = {"model_name": name}
            if "model_version" in names:
                path["model_version"] = "1"
            return operation.as_strategy(mode, path_parameters=path)

        fixed.append(_REAL_NAMES.flatmap(with_real_name))
    # "/v2/models/stats" is the statistics of all models, another operation of the document
    return st.one_of(fixed).filter(lambda case: case.path_parameters.get("model_name") != "stats")


def _run_operation(
    operation: Any,
    mode: schemathesis.GenerationMode,
    base_url: str,
    checks: list[Any],
    tally: Tally,
    examples: int = EXAMPLES_PER_OPERATION,
) -> None:
    @hypothesis.settings(
        max_examples=examples,
        derandomize=True,
        database=None,
        deadline=None,
        suppress_health_check=list(hypothesis.HealthCheck),
        phases=[hypothesis.Phase.explicit, hypothesis.Phase.generate, hypothesis.Phase.shrink],
        report_multiple_bugs=False,
    )
    @hypothesis.given(case=_strategy(operation, mode))
    def run(case: Any) -> None:
        try:
            response = case.call(base_url=base_url, timeout=30)
        except Exception:
            tally.record("no answer")
            raise
        tally.record(response.status_code)
        if response.status_code == 501:  # UNSUPPORTED: only for the features the document names
            assert operation.path.endswith("/infer"), f"501 from {operation.label}"
            assert _UNSUPPORTED.search(response.text), response.text
        case.validate_response(response, checks=checks)

    try:
        run()
    except hypothesis.errors.Unsatisfiable:
        # an operation without parameters or body has nothing to make invalid
        if mode is not schemathesis.GenerationMode.NEGATIVE:
            raise
    except (Exception, schemathesis.errors.FailureGroup) as exc:
        notes = "\n".join(getattr(exc, "__notes__", ()))
        tally.fail(f"{operation.label} [{mode.value}]: {str(exc)[:3000]}\n{notes[:2000]}")


def test_http_api_fuzz(fuzz_server: ServerProcess) -> None:
    """Schemathesis against the live server, every operation, positive and negative data."""
    base_url = f"http://{fuzz_server.http_url}"
    config = schemathesis.Config.from_dict(
        {
            "checks": {
                # 501 is UNSUPPORTED (shared memory, raw binary requests), checked above
                "not_a_server_error": {"expected-statuses": ["2xx", "3xx", "4xx", "501"]},
            }
        }
    )
    schema = schemathesis.openapi.from_dict(_document(), config=config)
    checks = [
        schemathesis.checks.not_a_server_error,
        schemathesis.checks.status_code_conformance,
        schemathesis.checks.content_type_conformance,
        schemathesis.checks.response_schema_conformance,
        schemathesis.checks.response_headers_conformance,
    ]
    operations = [result.ok() for result in schema.get_all_operations()]
    tally = Tally("schemathesis HTTP API fuzz")

    started = time.monotonic()
    # warm-up: a few valid requests per operation, so that the memory baseline includes what a
    # first request allocates once (codecs, the models' first runs)
    for operation in operations:
        _run_operation(
            operation, schemathesis.GenerationMode.POSITIVE, base_url, checks, tally, examples=3
        )
    rss_before = rss_bytes(fuzz_server.process.pid)
    for mode in (schemathesis.GenerationMode.POSITIVE, schemathesis.GenerationMode.NEGATIVE):
        for operation in operations:
            _run_operation(operation, mode, base_url, checks, tally)
    elapsed = time.monotonic() - started

    growth = assert_server_healthy(fuzz_server, rss_before)
    print(f"\n{tally.report(elapsed, growth)}")
    assert not tally.failures, "\n\n".join(tally.failures)
