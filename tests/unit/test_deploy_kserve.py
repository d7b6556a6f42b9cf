"""The KServe ServingRuntime runs ``inferd serve`` on KServe's ports with the v2 protocol, and the
example InferenceService uses it. KServe's kinds are CRDs that kubernetes-validate has no schema
for: their fields are checked here against KServe's API types, and the Kubernetes parts they
embed (containers, volumes) against Kubernetes' schemas."""

from __future__ import annotations

from typing import Any

import kubernetes_validate
import pytest

from tests.helpers.deploy import KSERVE, Manifest, load_yaml, serve_args

# fields of KServe's ServingRuntimeSpec and SupportedModelFormat (serving.kserve.io/v1alpha1)
RUNTIME_SPEC_FIELDS = {
    "supportedModelFormats",
    "multiModel",
    "disabled",
    "protocolVersions",
    "containers",
    "volumes",
    "nodeSelector",
    "affinity",
    "tolerations",
    "labels",
    "annotations",
    "imagePullSecrets",
    "hostIPC",
    "schedulerName",
    "workerSpec",
}
MODEL_FORMAT_FIELDS = {"name", "version", "autoSelect", "priority"}
PROTOCOLS = {"v1", "v2", "grpc-v1", "grpc-v2"}
# the formats inferd serves, by KServe's names
FORMATS = {"triton", "onnx", "pytorch", "xgboost", "lightgbm", "sklearn"}
# where KServe expects a v2 runtime: the storage initializer's folder, HTTP and gRPC ports
KSERVE_MODEL_DIR = "/mnt/models"
KSERVE_HTTP_PORT = 8080
KSERVE_GRPC_PORT = 9000


@pytest.fixture(scope="module")
def runtime() -> Manifest:
    (doc,) = load_yaml(KSERVE / "servingruntime.yaml")
    return doc


@pytest.fixture(scope="module")
def service() -> Manifest:
    (doc,) = load_yaml(KSERVE / "inferenceservice.yaml")
    return doc


def _validate_pod_parts(spec: dict[str, Any], version: str) -> None:
    pod = {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {"name": "check"},
        "spec": {"containers": spec["containers"], "volumes": spec.get("volumes", [])},
    }
    try:
        kubernetes_validate.validate(pod, version, strict=True)
    except kubernetes_validate.ValidationError as exc:
        pytest.fail(f"the runtime's containers or volumes: {exc.message}")


def test_serving_runtime_fields(runtime: Manifest) -> None:
    assert runtime["apiVersion"] == "serving.kserve.io/v1alpha1"
    assert runtime["kind"] == "ServingRuntime"
    spec = runtime["spec"]
    assert set(spec) <= RUNTIME_SPEC_FIELDS
    assert set(spec["protocolVersions"]) == {"v2", "grpc-v2"}
    assert set(spec["protocolVersions"]) <= PROTOCOLS
    names = set()
    for model_format in spec["supportedModelFormats"]:
        assert set(model_format) <= MODEL_FORMAT_FIELDS
        assert isinstance(model_format["version"], str)
        names.add(model_format["name"])
    assert names == FORMATS
    for version in ("1.30", kubernetes_validate.latest_version()):
        _validate_pod_parts(spec, version)


def test_serving_runtime_runs_inferd_where_kserve_expects_it(runtime: Manifest) -> None:
    (container,) = runtime["spec"]["containers"]
    assert container["name"] == "kserve-container"  # the container KServe fills in
    args = serve_args(container)
    assert [str(r) for r in args.model_repository] == [KSERVE_MODEL_DIR]
    assert (args.http_port, args.grpc_port) == (KSERVE_HTTP_PORT, KSERVE_GRPC_PORT)
    assert args.allow_http
    assert args.allow_grpc
    annotations = runtime["spec"]["annotations"]
    assert int(annotations["prometheus.kserve.io/port"]) == args.metrics_port
    assert annotations["prometheus.kserve.io/path"] == "/metrics"
    for kind, path in (
        ("readinessProbe", "/v2/health/ready"),
        ("livenessProbe", "/v2/health/live"),
    ):
        assert container[kind]["httpGet"] == {"path": path, "port": args.http_port}
    assert container["securityContext"]["runAsNonRoot"] is True
    mounts = {m["mountPath"]: m["name"] for m in container["volumeMounts"]}
    volumes = {v["name"] for v in runtime["spec"]["volumes"]}
    assert "/dev/shm" in mounts
    assert set(mounts.values()) <= volumes


def test_inference_service_uses_the_runtime(runtime: Manifest, service: Manifest) -> None:
    assert service["apiVersion"] == "serving.kserve.io/v1beta1"
    assert service["kind"] == "InferenceService"
    predictor = service["spec"]["predictor"]
    model = predictor["model"]
    assert model["runtime"] == runtime["metadata"]["name"]
    assert model["modelFormat"]["name"] in FORMATS
    assert model["protocolVersion"] in runtime["spec"]["protocolVersions"]
    assert model["storageUri"].split("://", 1)[0] in {"s3", "gs", "pvc", "https", "hdfs"}
    assert set(model) <= {"runtime", "modelFormat", "protocolVersion", "storageUri", "resources"}
    assert predictor["minReplicas"] <= predictor["maxReplicas"]
    container = {
        "name": "kserve-container",
        "image": "checked",
        "resources": model["resources"],
    }
    _validate_pod_parts({"containers": [container]}, kubernetes_validate.latest_version())
