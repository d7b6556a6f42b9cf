"""The web console in a real headless Chromium (Debian's ``chromium`` and ``chromedriver``,
driven by Selenium) against a real ``inferd serve``.

The server has the ``digits`` example (built by the project's own builder), two add/sub models,
one model whose name is HTML, and one broken model (UNAVAILABLE), in explicit mode with an
admin token. ``tritonclient`` is the oracle for the index, the answers and the actions.

Screenshots are taken on every run; with ``INFERD_CONSOLE_SCREENSHOTS=DIR`` they are also copied
to ``DIR`` (the pictures in docs/console.md come from ``DIR=docs/images``).
"""

from __future__ import annotations

import os
import shutil
import threading
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import numpy as np
import pytest
import tritonclient.http as httpclient
from PIL import Image
from tritonclient.utils import InferenceServerException

from inferd.examples.digits_models import build_digits
from inferd.testing import ServerProcess, running_server
from tests.helpers.models import write_add_sub

pytestmark = pytest.mark.e2e

CHROMIUM = Path("/usr/bin/chromium")
CHROMEDRIVER = Path("/usr/bin/chromedriver")
if not (CHROMIUM.exists() and CHROMEDRIVER.exists()):
    pytest.skip(
        "the console's browser tests need Debian's chromium and chromium-driver "
        "(apt-get install chromium chromium-driver)",
        allow_module_level=True,
    )
webdriver = pytest.importorskip("selenium.webdriver", reason="needs selenium (the test extra)")
from selenium.common.exceptions import (  # noqa: E402
    NoSuchElementException,
    StaleElementReferenceException,
)
from selenium.webdriver.common.by import By  # noqa: E402
from selenium.webdriver.support.ui import WebDriverWait  # noqa: E402

TOKEN = "console-admin-token"
HTML_NAME = "<img src=x onerror=window.pwned=1>"
WAIT_S = 30.0  # a bound against hanging, far above what each step takes


@pytest.fixture(scope="module")
def repo(tmp_path_factory: pytest.TempPathFactory) -> Path:
    root = tmp_path_factory.mktemp("console") / "models"
    root.mkdir()
    build_digits("digits", root / "digits")
    write_add_sub(root, "simple")
    write_add_sub(root, "spare")  # unloaded and loaded again by the action test
    write_add_sub(root, HTML_NAME)
    broken = root / "broken"
    (broken / "1").mkdir(parents=True)
    (broken / "config.pbtxt").write_text('name: "broken"\nplatform: "onnxruntime_onnx"\n')
    (broken / "1" / "model.onnx").write_bytes(b"this is not an ONNX file")
    return root


@pytest.fixture(scope="module")
def server(repo: Path, tmp_path_factory: pytest.TempPathFactory) -> Iterator[ServerProcess]:
    token_file = tmp_path_factory.mktemp("token") / "admin-token"
    token_file.write_text(TOKEN)
    args = [
        "--model-control-mode",
        "explicit",
        "--load-model",
        "*",
        "--exit-on-error=false",
        "--admin-token-file",
        str(token_file),
    ]
    with running_server([repo], args) as proc:
        yield proc


@pytest.fixture(scope="module")
def client(server: ServerProcess) -> Iterator[httpclient.InferenceServerClient]:
    c = httpclient.InferenceServerClient(server.http_url)
    try:
        yield c
    finally:
        c.close()


@pytest.fixture(scope="module")
def browser() -> Iterator[Any]:
    options = webdriver.ChromeOptions()
    options.binary_location = str(CHROMIUM)
    for arg in ("--headless=new", "--no-sandbox", "--disable-dev-shm-usage", "--disable-gpu"):
        options.add_argument(arg)
    options.add_argument("--window-size=1400,1000")
    options.set_capability("goog:loggingPrefs", {"browser": "ALL"})
    service = webdriver.ChromeService(executable_path=str(CHROMEDRIVER))
    driver = webdriver.Chrome(options=options, service=service)
    try:
        yield driver
    finally:
        driver.quit()


@pytest.fixture
def page(browser: Any, server: ServerProcess) -> Iterator[Any]:
    """The browser on a fresh console page; fails the test on any script error or CSP report
    (network refusals the test provokes are allowed)."""
    browser.get("about:blank")
    browser.get_log("browser")  # drop what earlier tests left
    browser.get(f"http://{server.http_url}/console/")
    yield browser
    errors = [
        entry["message"]
        for entry in browser.get_log("browser")
        if entry["level"] == "SEVERE" and "Failed to load resource" not in entry["message"]
    ]
    assert not errors, errors


def wait_for(browser: Any, check: Callable[[Any], Any], what: str) -> Any:
    waiting = WebDriverWait(
        browser,
        WAIT_S,
        poll_frequency=0.1,
        ignored_exceptions=(NoSuchElementException, StaleElementReferenceException),
    )
    return waiting.until(check, f"waiting for {what}")


def screenshot(browser: Any, name: str, tmp_path: Path) -> None:
    shot = tmp_path / f"console-{name}.png"
    assert browser.save_screenshot(str(shot))
    assert shot.stat().st_size > 1000
    target = os.environ.get("INFERD_CONSOLE_SCREENSHOTS")
    if target:
        Path(target).mkdir(parents=True, exist_ok=True)
        shutil.copyfile(shot, Path(target) / shot.name)


def rendered(browser: Any) -> int:
    """How many times the page has rendered a view (it re-renders after a token or action)."""
    return int(browser.execute_script("return document.body.dataset.rendered || 0"))


def use_token(browser: Any, token: str) -> None:
    wait_for(browser, rendered, "the first view")
    before = rendered(browser)
    field = browser.find_element(By.ID, "token")
    field.clear()
    field.send_keys(token)
    browser.find_element(By.ID, "token-use").click()
    wait_for(browser, lambda b: rendered(b) > before, "the view with the token")


def table_rows(browser: Any) -> dict[tuple[str, str], dict[str, str]]:
    """The models table as the page shows it, read in one script (the live stream re-renders
    the table every second)."""
    found = browser.execute_script(
        """return [...document.querySelectorAll('#models tbody tr')].map((tr) => [
            tr.querySelector('td.col-name').textContent, tr.dataset.version, tr.dataset.state,
            tr.querySelector('td.col-reason').textContent])"""
    )
    return {(n, v): {"state": s, "reason": r} for n, v, s, r in found}


def open_model(browser: Any, server: ServerProcess, name: str) -> None:
    wait_for(browser, lambda b: b.find_element(By.ID, "model-filter"), "the table").send_keys(name)
    wait_for(browser, lambda b: b.find_element(By.LINK_TEXT, name).click() or True, "the link")
    wait_for(browser, lambda b: b.find_element(By.ID, "model-title").text == name, "the page")


def index_of(client: httpclient.InferenceServerClient) -> dict[tuple[str, str], dict[str, Any]]:
    index = client.get_model_repository_index(headers={"Authorization": f"Bearer {TOKEN}"})
    return {(m["name"], m.get("version", "")): m for m in index}


def test_the_models_table_matches_the_repository_index(
    page: Any, server: ServerProcess, client: httpclient.InferenceServerClient, tmp_path: Path
) -> None:
    # without the token the index is not the page's to show: the loaded versions only
    wait_for(page, lambda b: b.find_elements(By.ID, "index-note"), "the note")
    ready = {k for k, m in index_of(client).items() if m.get("state") == "READY"}
    assert set(table_rows(page)) == ready
    use_token(page, TOKEN)
    wait_for(page, lambda b: not b.find_elements(By.ID, "index-note"), "the whole index")
    index = index_of(client)
    rows = table_rows(page)
    assert set(rows) == set(index)
    for key, row in rows.items():
        assert row["state"] == index[key].get("state", ""), key
    assert len(index) == 5
    page.find_element(By.CSS_SELECTOR, 'th[data-key="state"]').click()  # sortable
    states = page.execute_script(
        "return [...document.querySelectorAll('#models tbody tr')].map((tr) => tr.dataset.state)"
    )
    assert states == sorted(states)
    assert len(states) == 5
    page.find_element(By.ID, "model-filter").send_keys("dig")  # filterable
    wait_for(page, lambda b: len(table_rows(b)) == 1, "the filter")
    assert list(table_rows(page)) == [("digits", "1")]
    page.find_element(By.ID, "model-filter").clear()
    page.find_element(By.ID, "model-filter").send_keys(" ")
    wait_for(page, lambda b: float(b.find_element(By.ID, "srv-rps").text) >= 0, "the stream")
    screenshot(page, "overview", tmp_path)


def test_an_unavailable_model_shows_its_reason(
    page: Any, client: httpclient.InferenceServerClient
) -> None:
    use_token(page, TOKEN)
    [(key, expected)] = [(k, m) for k, m in index_of(client).items() if k[0] == "broken"]
    assert expected["state"] == "UNAVAILABLE"
    assert expected["reason"]
    wait_for(page, lambda b: key in table_rows(b), "the broken model's row")
    assert table_rows(page)[key] == {"state": "UNAVAILABLE", "reason": expected["reason"]}


def test_a_model_name_with_html_renders_as_text(page: Any, server: ServerProcess) -> None:
    wait_for(page, lambda b: b.find_elements(By.CSS_SELECTOR, "#models td.col-name"), "the table")
    assert HTML_NAME in {name for name, _ in table_rows(page)}
    assert not page.find_elements(By.CSS_SELECTOR, "#models img, main img")
    open_model(page, server, HTML_NAME)
    assert not page.find_elements(By.CSS_SELECTOR, "main img")
    assert page.execute_script("return window.pwned === undefined")


def _digit_image() -> tuple[np.ndarray, int]:
    from sklearn.datasets import load_digits

    digits = load_digits()
    return digits.data[7].astype(np.float32), int(digits.target[7])


def test_try_it_on_digits_shows_the_predicted_class(
    page: Any, server: ServerProcess, client: httpclient.InferenceServerClient, tmp_path: Path
) -> None:
    pixels, truth = _digit_image()
    tensor = httpclient.InferInput("input", [1, 64], "FP32")
    tensor.set_data_from_numpy(pixels.reshape(1, 64))
    oracle = client.infer("digits", [tensor])
    label = int(oracle.as_numpy("label").reshape(-1)[0])
    assert label == truth  # the example classifies this image right
    open_model(page, server, "digits")
    values = wait_for(
        page, lambda b: b.find_element(By.CSS_SELECTOR, "textarea.try-values"), "the form"
    )
    values.clear()
    values.send_keys(" ".join(str(float(v)) for v in pixels))
    page.find_element(By.ID, "try-send").click()
    wait_for(page, lambda b: b.find_elements(By.ID, "try-result"), "the answer")
    cells = dict(
        page.execute_script(
            """return [...document.querySelectorAll('#try-result tbody tr')].map(
                (tr) => [tr.cells[0].textContent, tr.cells[3].textContent])"""
        )
    )
    assert cells["label"] == f"[{label}]"
    assert page.find_element(By.ID, "try-predicted").text == str(label)
    assert len(page.find_elements(By.CSS_SELECTOR, "#try-topk .bar")) == 5
    curl = page.find_element(By.ID, "try-curl").get_attribute("textContent")
    assert "/v2/models/digits/infer" in curl
    assert '"name":"input"' in curl
    python = page.find_element(By.ID, "try-python").get_attribute("textContent")
    assert 'client.infer("digits", inputs)' in python
    assert "completed" in page.find_element(By.CSS_SELECTOR, "main").text
    pbtxt = page.find_element(By.ID, "config-pbtxt").text
    assert 'name: "digits"' in pbtxt
    assert "max_batch_size: 32" in pbtxt
    screenshot(page, "tryit", tmp_path)
    # the same digit as an 8x8 grey image (ink bright), scaled back to 0..16 by the form
    picture = tmp_path / "digit.png"
    grey = np.round(pixels.reshape(8, 8) * 255 / 16).astype(np.uint8)
    Image.fromarray(grey).save(picture)  # 8-bit grey
    values.clear()
    page.find_element(By.CSS_SELECTOR, "input.try-max").clear()
    page.find_element(By.CSS_SELECTOR, "input.try-max").send_keys("16")
    page.find_element(By.CSS_SELECTOR, "input.try-image").send_keys(str(picture))
    wait_for(page, lambda b: len(values.get_attribute("value").split()) == 64, "the pixels")
    read = np.array([float(v) for v in values.get_attribute("value").split()])
    np.testing.assert_allclose(read, pixels, atol=0.05)
    page.execute_script("document.getElementById('try-answer').textContent = ''")
    page.find_element(By.ID, "try-send").click()
    assert wait_for(page, lambda b: b.find_element(By.ID, "try-predicted").text, "an answer") == (
        str(label)
    )


def test_the_live_chart_updates_while_requests_flow(
    page: Any, server: ServerProcess, tmp_path: Path
) -> None:
    open_model(page, server, "simple")
    chart = wait_for(page, lambda b: b.find_element(By.ID, "chart"), "the chart")
    wait_for(page, lambda b: int(chart.get_attribute("data-samples") or 0) >= 1, "a first event")
    stop = threading.Event()

    def traffic() -> None:
        c = httpclient.InferenceServerClient(server.http_url)
        a = np.ones((1, 16), dtype=np.int32)
        inputs = [httpclient.InferInput(n, [1, 16], "INT32") for n in ("INPUT0", "INPUT1")]
        for tensor in inputs:
            tensor.set_data_from_numpy(a)
        try:
            while not stop.is_set():
                c.infer("simple", inputs)
                time.sleep(0.005)
        finally:
            c.close()

    worker = threading.Thread(target=traffic)
    worker.start()
    try:
        before = int(chart.get_attribute("data-samples") or 0)
        wait_for(page, lambda b: float(chart.get_attribute("data-last") or 0) > 0, "a rate")
        assert int(chart.get_attribute("data-samples") or 0) > before
        assert float(page.find_element(By.ID, "m-rps").text) > 0
        wait_for(page, lambda b: b.find_element(By.ID, "m-p99").text != "—", "a p99")
        wait_for(page, lambda b: b.find_elements(By.ID, "batch-table"), "batch sizes")
        wait_for(page, lambda b: int(chart.get_attribute("data-samples") or 0) >= before + 4, "4 s")
        screenshot(page, "model", tmp_path)
    finally:
        stop.set()
        worker.join()
    wait_for(page, lambda b: float(chart.get_attribute("data-last") or 1) == 0, "the rate to fall")


def test_an_action_without_the_token_is_refused_and_with_it_succeeds(
    page: Any, server: ServerProcess, client: httpclient.InferenceServerClient
) -> None:
    assert client.is_model_ready("spare")
    open_model(page, server, "spare")
    assert not page.find_elements(By.ID, "actions")  # no token: no buttons
    with pytest.raises(InferenceServerException) as refused:  # and the API refuses anyway
        client.unload_model("spare")
    assert "401" in str(refused.value.status()) or "Bearer" in str(refused.value)
    use_token(page, "not-the-token")
    page.find_element(By.ID, "act-unload").click()
    result = wait_for(page, lambda b: _outcome(b, "unload"), "an outcome")
    assert "unload refused: 401" in result
    assert "admin token" in result
    assert client.is_model_ready("spare")
    use_token(page, TOKEN)
    page.find_element(By.ID, "act-unload").click()
    assert wait_for(page, lambda b: _outcome(b, "unload"), "an outcome") == "unload: done"
    assert not client.is_model_ready("spare")
    wait_for(page, lambda b: b.find_element(By.ID, "act-load"), "the buttons").click()
    assert wait_for(page, lambda b: _outcome(b, "load"), "an outcome") == "load: done"
    assert client.is_model_ready("spare")


def _outcome(browser: Any, action: str) -> str | None:
    """The action's outcome once shown (the page re-renders after each action)."""
    text = browser.execute_script(
        "const p = document.getElementById('action-result'); return p ? p.textContent : ''"
    )
    return text if text.startswith((f"{action}:", f"{action} refused")) else None
