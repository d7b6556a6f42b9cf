"""``/metrics?name[]=...`` answers only the named metrics, with the same values."""

from __future__ import annotations

import re
import urllib.parse

import numpy as np
import tritonclient.http as httpclient

from inferd.testing import ServerProcess
from tests.e2e.conftest import raw_request


def _names(text: str) -> set[str]:
    return {line.split("{")[0].split(" ")[0] for line in text.splitlines() if line[:1] != "#"}


def test_a_scrape_can_ask_for_some_metrics_only(server: ServerProcess) -> None:
    with httpclient.InferenceServerClient(server.http_url) as client:
        a = np.arange(16, dtype=np.int32).reshape(1, 16)
        inputs = [httpclient.InferInput(n, [1, 16], "INT32") for n in ("INPUT0", "INPUT1")]
        for x in inputs:
            x.set_data_from_numpy(a)
        client.infer("simple", inputs)

    everything = raw_request(server.metrics_url, "GET", "/metrics")
    assert everything.status == 200
    full = everything.body.decode()
    assert {"nv_inference_count", "inferd_server_ready", "process_cpu_seconds_total"} <= _names(
        full
    )

    query = urllib.parse.urlencode(
        [("name[]", "nv_inference_count"), ("name[]", "inferd_server_ready")]
    )
    some = raw_request(server.metrics_url, "GET", f"/metrics?{query}")
    assert some.status == 200
    assert some.headers["content-type"].startswith("text/plain")
    text = some.body.decode()
    assert _names(text) == {"nv_inference_count", "inferd_server_ready"}
    # the same figures as in the whole exposition
    pattern = r'^nv_inference_count\{model="simple",version="1"\} (\S+)$'
    counted = re.search(pattern, text, re.M)
    assert counted is not None
    assert float(counted[1]) >= 1.0
    assert re.search(pattern, full, re.M)[1] == counted[1]  # type: ignore[index]
    assert re.search(r"^inferd_server_ready 1\.0$", text, re.M)

    nothing = raw_request(server.metrics_url, "GET", "/metrics?name[]=no_such_metric")
    assert nothing.status == 200
    assert _names(nothing.body.decode()) == set()
