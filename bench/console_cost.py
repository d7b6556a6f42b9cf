"""What an open web console costs the serving path, and how fast its page is with many models.

**Cost.** The small MLP (bench/models.py, ``repos/mlp-on``) served by one ``inferd serve``;
wrk drives ``POST /v2/models/mlp/infer`` (JSON) at concurrency 32. Rounds alternate in the same
run: without a console, then with one console page's event stream open
(``/console/api/events?model=mlp``, read by a client thread as a browser tab would), three of
each. The script prints each round's throughput and the ratio of the means (the goal: with the
console within 2 % of without).

**Page.** With ``--page``, a repository of ``--models`` (default 300) small ONNX models, all
loaded, and Debian's headless Chromium (Selenium): the time from navigation start to the models
table rendered and the page answering input (the console marks each finished view on
``document.body``), over ``--loads`` loads (the goal: within 1 s).

**Event cost.** With ``--event-cost``, the work the server does for one tick's event (a
statistics snapshot of every model and the window's figures, as JSON; the streams share it, so
this is the cost of all pages open on one model), timed in process in CPU time, with 1 and
``--models`` models loaded: a figure that does not depend on how busy the machine is.

    python bench/console_cost.py [--seconds 5] [--rounds 3] [--page | --event-cost] [--models 300]
"""

from __future__ import annotations

import argparse
import http.client
import json
import socket
import statistics
import tempfile
import threading
from pathlib import Path

from generators import wrk  # bench/ is on sys.path: the script's own folder
from models import build, model_inputs, repo_dir

from inferd.testing import running_server

CONCURRENCY = 32


class ConsoleTab:
    """One console page's event stream, read on a thread until closed (as a browser reads it)."""

    def __init__(self, http_url: str, model: str) -> None:
        host, port = http_url.rsplit(":", 1)
        self._conn = http.client.HTTPConnection(host, int(port), timeout=30)
        self._conn.request("GET", f"/console/api/events?model={model}")
        self._reply = self._conn.getresponse()
        assert self._reply.status == 200, self._reply.status
        self.events = 0
        self._thread = threading.Thread(target=self._read, daemon=True)
        self._thread.start()

    def _read(self) -> None:
        try:
            for line in self._reply:
                if line.startswith(b"data: "):
                    json.loads(line[6:])  # what the page does with each event
                    self.events += 1
        except (OSError, ValueError, AttributeError):
            pass  # closed under the reader (http.client raises AttributeError then)

    def close(self) -> None:
        sock = self._conn.sock
        if sock is not None:
            sock.shutdown(socket.SHUT_RDWR)  # ends the reader's blocking read
        self._conn.close()
        self._thread.join(5)


def cost(seconds: int, rounds: int) -> None:
    build(["mlp"])
    body = {
        "inputs": [
            {
                "name": name,
                "shape": list(array.shape),
                "datatype": "FP32",
                "data": array.ravel().tolist(),
            }
            for name, array in model_inputs("mlp").items()
        ]
    }
    with tempfile.TemporaryDirectory() as scratch, running_server([repo_dir("mlp", "on")]) as s:
        request = Path(scratch) / "body.json"
        request.write_text(json.dumps(body))
        url = f"http://{s.http_url}/v2/models/mlp/infer"
        figures: dict[str, list[float]] = {"without console": [], "with console": []}
        for i in range(rounds):
            for kind in figures:
                tab = ConsoleTab(s.http_url, "mlp") if kind == "with console" else None
                try:
                    result = wrk(url, request, CONCURRENCY, seconds, Path(scratch))
                finally:
                    if tab is not None:
                        tab.close()
                if "error" in result:
                    raise SystemExit(f"wrk failed: {result['error']}")
                figures[kind].append(result["throughput"])
                extra = f", {tab.events} console events read" if tab is not None else ""
                print(f"round {i + 1} {kind:>16}: {result['throughput']:9.1f} req/s{extra}")
        off = statistics.mean(figures["without console"])
        on = statistics.mean(figures["with console"])
        with_, without = figures["with console"], figures["without console"]
        pairs = [w / o for w, o in zip(with_, without, strict=True)]
        print(f"mean without console: {off:.1f} req/s; with console: {on:.1f} req/s")
        print(f"ratio of the means with/without: {on / off:.4f} (goal: >= 0.98)")
        print(f"ratio per round: {', '.join(f'{r:.3f}' for r in pairs)}")


IDENTITY_CONFIG = """
platform: "onnxruntime_onnx"
max_batch_size: 8
instance_group [ { count: 1, kind: KIND_CPU } ]
input [ { name: "x", data_type: TYPE_FP32, dims: [ 4 ] } ]
output [ { name: "y", data_type: TYPE_FP32, dims: [ 4 ] } ]
"""


def _identity_model() -> bytes:
    from onnx import TensorProto, helper

    x = helper.make_tensor_value_info("x", TensorProto.FLOAT, ["batch", 4])
    y = helper.make_tensor_value_info("y", TensorProto.FLOAT, ["batch", 4])
    graph = helper.make_graph([helper.make_node("Identity", ["x"], ["y"])], "identity", [x], [y])
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])
    model.ir_version = 8
    return bytes(model.SerializeToString())


def _identity_repository(repo: Path, models: int) -> None:
    model = _identity_model()
    for i in range(models):
        (repo / f"model_{i:03d}" / "1").mkdir(parents=True)
        (repo / f"model_{i:03d}" / "config.pbtxt").write_text(IDENTITY_CONFIG)
        (repo / f"model_{i:03d}" / "1" / "model.onnx").write_bytes(model)


def page(models: int, loads: int) -> None:
    from selenium import webdriver

    with tempfile.TemporaryDirectory() as scratch:
        repo = Path(scratch) / "models"
        _identity_repository(repo, models)
        args = ["--model-control-mode", "explicit", "--load-model", "*"]
        with running_server([repo], args, startup_timeout_s=900) as s:
            options = webdriver.ChromeOptions()
            options.binary_location = "/usr/bin/chromium"
            for arg in ("--headless=new", "--no-sandbox", "--disable-dev-shm-usage"):
                options.add_argument(arg)
            service = webdriver.ChromeService(executable_path="/usr/bin/chromedriver")
            driver = webdriver.Chrome(options=options, service=service)
            try:
                took = []
                for _ in range(loads + 1):  # the first load warms the browser's caches
                    driver.get("about:blank")
                    driver.get(f"http://{s.http_url}/console/")
                    script = (
                        "const done = arguments[0]; (function wait() {"
                        " if (document.body.dataset.rendered) done(performance.now());"
                        " else setTimeout(wait, 5); })();"
                    )
                    took.append(driver.execute_async_script(script))
                rows = driver.execute_script(
                    "return document.querySelectorAll('#models tbody tr').length"
                )
            finally:
                driver.quit()
        took = took[1:]
        print(f"{models} models, {rows} rows in the table")
        print(
            f"page interactive after: median {statistics.median(took):.0f} ms, "
            f"max {max(took):.0f} ms over {loads} loads (goal: < 1000 ms)"
        )


def event_cost(models: int, events: int) -> None:
    """The server's own work for one event of one open page, timed in process (CPU time)."""
    import asyncio
    import logging
    import time

    import orjson

    from inferd.frontends.console.app import ConsoleApp, ConsoleInfo
    from inferd.repository.records import ControlMode
    from inferd.server.config import ServerConfig
    from inferd.server.server import Server

    async def run(repo: Path) -> None:
        config = ServerConfig(
            model_repositories=(repo,),
            allow_http=False,
            allow_grpc=False,
            allow_metrics=False,
            model_control_mode=ControlMode.EXPLICIT,
            load_models=("*",),
        )
        server = Server(config)
        await server.start()
        try:
            app = ConsoleApp(
                server.engine,
                info=ConsoleInfo("explicit", {}),
                log=logging.getLogger("bench"),
            )
            prev = app.sample()
            start = time.process_time()
            for _ in range(events):
                cur = app.sample()
                orjson.dumps(app.event(prev, cur, "model_000"))
                prev = cur
            took_us = (time.process_time() - start) / events * 1e6
        finally:
            await server.stop()
        print(
            f"{models} models: {took_us:.0f} us of CPU per event; one open page costs "
            f"{took_us / 1e4:.3f} % of one core (one event a second)"
        )

    with tempfile.TemporaryDirectory() as scratch:
        repo = Path(scratch) / "models"
        _identity_repository(repo, models)
        asyncio.run(run(repo))


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--seconds", type=int, default=5, help="wrk's window per round")
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--page", action="store_true", help="measure the page, not the cost")
    parser.add_argument("--models", type=int, default=300)
    parser.add_argument("--loads", type=int, default=5)
    parser.add_argument(
        "--event-cost", action="store_true", help="time one event's work in process"
    )
    args = parser.parse_args()
    if args.event_cost:
        for count in (1, args.models):
            event_cost(count, 200)
    elif args.page:
        page(args.models, args.loads)
    else:
        cost(args.seconds, args.rounds)


if __name__ == "__main__":
    main()
