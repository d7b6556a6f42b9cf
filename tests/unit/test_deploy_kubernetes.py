"""The Kustomize overlays in deploy/kubernetes build, validate against Kubernetes' own schemas,
and agree with inferd: the arguments parse with its parser, the ports match its flags, the drain
fits in the grace period, and the HPA reads metrics the adapter rules serve."""

from __future__ import annotations

import re
import shutil
from pathlib import Path
from typing import Any

import kubernetes_validate
import pytest

from tests.helpers.deploy import (
    KUBERNETES,
    OVERLAYS,
    Manifest,
    adapter_metric_names,
    inferd_container,
    iter_containers,
    kustomize,
    load_yaml,
    one,
    pod_spec,
    serve_args,
)

# the oldest Kubernetes the manifests are written for (gRPC probes, autoscaling/v2, PDB's
# unhealthyPodEvictionPolicy), and the newest whose schemas kubernetes-validate ships
KUBERNETES_VERSIONS = ("1.30", kubernetes_validate.latest_version())
CUSTOM_KINDS = {"ServiceMonitor"}
PROBE_PATHS = {"/v2/health/live", "/v2/health/ready"}


@pytest.fixture(scope="module")
def built() -> dict[str, list[Manifest]]:
    return {overlay: kustomize(KUBERNETES / "overlays" / overlay) for overlay in OVERLAYS}


@pytest.fixture(scope="module")
def grpc_probes(tmp_path_factory: pytest.TempPathFactory) -> list[Manifest]:
    """The base with the grpc-probes component, as an overlay would use it."""
    folder = tmp_path_factory.mktemp("grpc-overlay")
    for name in ("base", "components"):
        shutil.copytree(KUBERNETES / name, folder / name)
    (folder / "overlay").mkdir()
    (folder / "overlay" / "kustomization.yaml").write_text(
        "apiVersion: kustomize.config.k8s.io/v1beta1\nkind: Kustomization\n"
        "resources: [../base]\ncomponents: [../components/grpc-probes]\n"
    )
    return kustomize(folder / "overlay")


def _all(built: dict[str, list[Manifest]]) -> list[tuple[str, Manifest]]:
    return [(overlay, obj) for overlay, objects in built.items() for obj in objects]


def test_every_overlay_builds_the_expected_objects(built: dict[str, list[Manifest]]) -> None:
    kinds = {overlay: sorted(o["kind"] for o in objects) for overlay, objects in built.items()}
    assert kinds["dev"] == ["Deployment", "Namespace", "PodDisruptionBudget", "Service"]
    expected = [
        "ConfigMap",
        "Deployment",
        "HorizontalPodAutoscaler",
        "Namespace",
        "PodDisruptionBudget",
        "Service",
        "ServiceMonitor",
    ]
    assert kinds["prod"] == expected
    assert kinds["gpu"] == expected
    for overlay, objects in built.items():
        namespace = one(objects, "Namespace")["metadata"]["name"]
        for obj in objects:
            if obj["kind"] != "Namespace":
                assert obj["metadata"]["namespace"] == namespace, (overlay, obj["kind"])


@pytest.mark.parametrize("version", KUBERNETES_VERSIONS)
def test_objects_validate_against_the_kubernetes_schemas(
    built: dict[str, list[Manifest]], grpc_probes: list[Manifest], version: str
) -> None:
    objects = [*_all(built), *(("grpc-probes", o) for o in grpc_probes)]
    checked = 0
    for overlay, obj in objects:
        if obj["kind"] in CUSTOM_KINDS:
            continue  # a CRD: checked structurally below
        try:
            kubernetes_validate.validate(obj, version, strict=True)
        except kubernetes_validate.ValidationError as exc:
            pytest.fail(f"{overlay}: {obj['kind']}/{obj['metadata']['name']}: {exc.message}")
        checked += 1
    assert checked >= 15


def test_service_monitor_structure(built: dict[str, list[Manifest]]) -> None:
    for overlay in ("prod", "gpu"):
        objects = built[overlay]
        monitor = one(objects, "ServiceMonitor")
        assert monitor["apiVersion"] == "monitoring.coreos.com/v1"
        assert set(monitor["spec"]) == {"selector", "endpoints"}
        service = one(objects, "Service")
        labels = service["metadata"]["labels"]
        assert monitor["spec"]["selector"]["matchLabels"].items() <= labels.items()
        port_names = {p["name"] for p in service["spec"]["ports"]}
        for endpoint in monitor["spec"]["endpoints"]:
            assert set(endpoint) <= {"port", "path", "interval", "scrapeTimeout"}
            assert endpoint["port"] in port_names
            assert endpoint["path"] == "/metrics"


def test_container_arguments_are_inferd_serve_flags(built: dict[str, list[Manifest]]) -> None:
    (base,) = [d for d in load_yaml(KUBERNETES / "base" / "deployment.yaml")]
    for overlay, objects in built.items():
        container = inferd_container(one(objects, "Deployment"))
        # the same server everywhere (tests/e2e/test_deploy_probes.py runs the base's arguments)
        assert container["args"] == inferd_container(base)["args"], overlay
        args = serve_args(container)
        assert args.func.__name__ == "run_serve", overlay
        ports = {p["name"]: p["containerPort"] for p in container["ports"]}
        assert ports == {
            "http": args.http_port,
            "grpc": args.grpc_port,
            "metrics": args.metrics_port,
        }, overlay
        mounts = {m["mountPath"]: m for m in container["volumeMounts"]}
        for repository in map(str, args.model_repository):
            assert repository in mounts, f"{overlay}: {repository} is not a mounted volume"
            assert mounts[repository].get("readOnly") is True


def test_service_ports_reach_the_container(built: dict[str, list[Manifest]]) -> None:
    for overlay, objects in built.items():
        deployment = one(objects, "Deployment")
        container = inferd_container(deployment)
        by_name = {p["name"]: p["containerPort"] for p in container["ports"]}
        service = one(objects, "Service")
        for port in service["spec"]["ports"]:
            assert port["targetPort"] in by_name, (overlay, port)
            assert port["port"] == by_name[port["targetPort"]], (overlay, port)
        pod_labels = deployment["spec"]["template"]["metadata"]["labels"]
        assert service["spec"]["selector"].items() <= pod_labels.items()
        assert deployment["spec"]["selector"]["matchLabels"].items() <= pod_labels.items()
        pdb = one(objects, "PodDisruptionBudget")
        assert pdb["spec"]["selector"]["matchLabels"].items() <= pod_labels.items()


def _probe_handler(probe: dict[str, Any]) -> str:
    handlers = [k for k in ("httpGet", "grpc", "tcpSocket", "exec") if k in probe]
    assert len(handlers) == 1, f"a probe needs exactly one handler, found {handlers}"
    return handlers[0]


def test_probes(built: dict[str, list[Manifest]], grpc_probes: list[Manifest]) -> None:
    variants = {**{k: one(v, "Deployment") for k, v in built.items()}}
    variants["grpc-probes"] = one(grpc_probes, "Deployment")
    for variant, deployment in variants.items():
        container = inferd_container(deployment)
        args = serve_args(container)
        ports = {p["name"]: p["containerPort"] for p in container["ports"]}
        probes = {k: container[k] for k in ("startupProbe", "livenessProbe", "readinessProbe")}
        for kind, probe in probes.items():
            handler = _probe_handler(probe)
            if handler == "httpGet":
                assert probe["httpGet"]["path"] in PROBE_PATHS, (variant, kind)
                assert ports[probe["httpGet"]["port"]] == args.http_port, (variant, kind)
            else:
                assert (variant, kind, handler) == ("grpc-probes", "readinessProbe", "grpc")
                assert probe["grpc"]["port"] == args.grpc_port
        assert probes["livenessProbe"]["httpGet"]["path"] == "/v2/health/live"
        if variant != "grpc-probes":
            assert probes["readinessProbe"]["httpGet"]["path"] == "/v2/health/ready"
        # the startup probe allows minutes of model loading before liveness takes over
        startup = probes["startupProbe"]
        assert startup["periodSeconds"] * startup["failureThreshold"] >= 300


def test_grace_period_covers_the_pre_stop_pause_and_the_drain(
    built: dict[str, list[Manifest]],
) -> None:
    for overlay, objects in built.items():
        deployment = one(objects, "Deployment")
        container = inferd_container(deployment)
        command = container["lifecycle"]["preStop"]["exec"]["command"]
        assert Path(command[0]).name == "sleep"
        pause = float(command[1])
        assert pause >= 5, "endpoint removal needs a few seconds to reach every proxy"
        drain = serve_args(container).exit_timeout_secs
        grace = pod_spec(deployment)["terminationGracePeriodSeconds"]
        assert grace > pause + drain, overlay


def test_containers_run_unprivileged_with_resources(built: dict[str, list[Manifest]]) -> None:
    for overlay, objects in built.items():
        deployment = one(objects, "Deployment")
        pod = pod_spec(deployment)
        assert pod["securityContext"]["runAsNonRoot"] is True
        assert pod["securityContext"]["runAsUser"] >= 1000
        assert pod["automountServiceAccountToken"] is False
        volumes = {v["name"] for v in pod["volumes"]}
        for name, container in iter_containers([deployment]):
            context = container["securityContext"]
            assert context["allowPrivilegeEscalation"] is False, (overlay, name)
            assert context["readOnlyRootFilesystem"] is True, (overlay, name)
            assert context["capabilities"]["drop"] == ["ALL"], (overlay, name)
            resources = container["resources"]
            assert {"cpu", "memory"} <= resources["requests"].keys(), (overlay, name)
            assert "memory" in resources["limits"], (overlay, name)
            for mount in container.get("volumeMounts", []):
                assert mount["name"] in volumes, (overlay, name, mount)
            image = container["image"]
            assert re.search(r":[\w.-]+$|@sha256:", image), f"{overlay}: {image} has no tag"
        mounts = {m["mountPath"] for m in inferd_container(deployment)["volumeMounts"]}
        assert {"/dev/shm", "/tmp"} <= mounts  # Python models' shared memory; a writable /tmp


def test_models_come_from_object_storage_or_the_image(built: dict[str, list[Manifest]]) -> None:
    for overlay, objects in built.items():
        fetch = pod_spec(one(objects, "Deployment"))["initContainers"]
        assert [c["name"] for c in fetch] == ["fetch-models"]
        if overlay == "dev":
            assert fetch[0]["command"][0] == "cp"  # the example repository bundled in the image
            assert fetch[0]["image"] == inferd_container(one(objects, "Deployment"))["image"]
            continue
        assert fetch[0]["image"].startswith("rclone/rclone:")
        assert fetch[0]["args"][-2:] == ["$(MODEL_SOURCE)", "/models"]
        source = one(objects, "ConfigMap")
        assert source["data"]["MODEL_SOURCE"].startswith("store:")
        assert fetch[0]["envFrom"][0]["configMapRef"]["name"] == source["metadata"]["name"]


def test_autoscaler_reads_inferd_metrics_with_cpu_as_fallback(
    built: dict[str, list[Manifest]],
) -> None:
    served = adapter_metric_names()
    for overlay in ("prod", "gpu"):
        objects = built[overlay]
        hpa = one(objects, "HorizontalPodAutoscaler")
        deployment = one(objects, "Deployment")
        target = hpa["spec"]["scaleTargetRef"]
        assert (target["kind"], target["name"]) == ("Deployment", deployment["metadata"]["name"])
        assert "replicas" not in deployment["spec"], "the HPA owns the replica count"
        metrics = hpa["spec"]["metrics"]
        assert [m["type"] for m in metrics] == ["Pods", "Resource"]
        pods = metrics[0]["pods"]
        assert pods["metric"]["name"] == "inferd_pending_requests"
        assert pods["metric"]["name"] in served, "no prometheus-adapter rule serves this metric"
        assert pods["target"]["type"] == "AverageValue"
        assert float(pods["target"]["averageValue"]) > 0
        assert metrics[1]["resource"]["name"] == "cpu"
        assert 1 <= hpa["spec"]["minReplicas"] < hpa["spec"]["maxReplicas"]
