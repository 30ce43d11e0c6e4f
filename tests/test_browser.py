"""Notebooks 03 and 08 as a user meets them: JupyterLab 4 in headless Chromium, the tiny preset.

Notebook 03 opens without a "Select Kernel" dialog and unmodified (JupyterLab started as `make lab`
starts it, `populora_nb.lab`), Run All shows the step by hand's tables and
the dashboard as a figure and a table (not a widget repr, no "Error displaying widget", no error
output), and after save, kernel shutdown and reopening, the dashboard cell still shows its figure
and "run complete". Notebook 08's explorer renders its controls and record, a filter changes the
table, and the reopened notebook still shows the record of the last selection.

Needs Debian's `chromium` (`make test` installs it when root) and the `playwright` package (the
`dev` extra); `playwright install` is never run: the system Chromium is launched by path.
Screenshots go to $BROWSER_SHOTS (default test-artifacts/browser/), kept when the test fails.
"""

import json
import os
import shutil
import socket
import subprocess
import sys
import time
import urllib.request
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[1]
SHOTS = Path(os.environ.get("BROWSER_SHOTS", REPO / "test-artifacts" / "browser"))
CHROMIUM = shutil.which("chromium") or shutil.which("chromium-browser")
TOKEN = "populora-browser-test"
NOTEBOOK = "03_population.ipynb"

pytestmark = [
    pytest.mark.slow,
    pytest.mark.skipif(
        CHROMIUM is None, reason="no chromium on PATH: `apt-get install chromium` (make test does it as root)"
    ),
]


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def _api(base: str, path: str, method: str = "GET"):
    req = urllib.request.Request(f"{base}{path}", method=method, headers={"Authorization": f"token {TOKEN}"})
    with urllib.request.urlopen(req, timeout=10) as r:
        body = r.read()
    return json.loads(body) if body else None


@pytest.fixture
def lab(tmp_path):
    """JupyterLab on a free localhost port, serving a copy of notebooks/ (runs go to tmp_path/runs)."""
    root = tmp_path / "notebooks"
    shutil.copytree(REPO / "notebooks", root, ignore=shutil.ignore_patterns(".ipynb_checkpoints"))
    settings = tmp_path / "settings" / "@jupyterlab" / "notebook-extension"
    settings.mkdir(parents=True)
    # Render every cell (JupyterLab 4 defers off-screen cells), so the page holds every output.
    (settings / "tracker.jupyterlab-settings").write_text(json.dumps({"windowingMode": "none"}))
    news = tmp_path / "settings" / "@jupyterlab" / "apputils-extension"
    news.mkdir(parents=True)
    (news / "notification.jupyterlab-settings").write_text(json.dumps({"fetchNews": "false"}))  # no news toast
    port = _free_port()
    env = {
        **os.environ,
        "POPULORA_PRESET": "tiny",
        "JUPYTER_CONFIG_DIR": str(tmp_path / "config"),
        "JUPYTERLAB_SETTINGS_DIR": str(tmp_path / "settings"),
        "JUPYTERLAB_WORKSPACES_DIR": str(tmp_path / "ws"),
    }
    log = open(tmp_path / "lab.log", "w")
    proc = subprocess.Popen(
        [
            sys.executable,
            "-m",
            "jupyterlab",
            "--no-browser",
            "--ip=127.0.0.1",
            f"--port={port}",
            f"--IdentityProvider.token={TOKEN}",
            f"--ServerApp.root_dir={root}",
            "--LabApp.expose_app_in_browser=True",
            "--ServerApp.contents_manager_class=populora_nb.lab.NotebookContents",  # as `make lab` starts it
            "--LabApp.news_url=None",
            "--LabApp.check_for_updates_class=jupyterlab.NeverCheckForUpdate",
            *(["--allow-root"] if os.geteuid() == 0 else []),
        ],
        cwd=root,
        env=env,
        stdout=log,
        stderr=subprocess.STDOUT,
    )
    base = f"http://127.0.0.1:{port}"
    try:
        for _ in range(120):
            try:
                _api(base, "/api/status")
                break
            except OSError:
                if proc.poll() is not None:
                    pytest.fail(f"jupyter lab exited: {(tmp_path / 'lab.log').read_text()[-2000:]}")
                time.sleep(0.5)
        yield base, root
    finally:
        proc.terminate()
        try:
            proc.wait(timeout=20)
        except subprocess.TimeoutExpired:
            proc.kill()
        log.close()


def _open(page, base: str, notebook: str = NOTEBOOK) -> None:
    page.goto(f"{base}/lab/tree/{notebook}?token={TOKEN}&reset")
    page.wait_for_selector(".jp-NotebookPanel .jp-Cell", timeout=60_000)
    # The kernel starts from the notebook's kernelspec: the toolbar names it; no dialog asks for one.
    page.wait_for_function(
        "() => document.querySelector('.jp-NotebookPanel .jp-KernelName')?.textContent.includes('Python 3')",
        timeout=60_000,
    )
    page.wait_for_timeout(1500)
    dialogs = page.locator(".jp-Dialog")
    assert dialogs.count() == 0, f"a dialog opened with the notebook: {dialogs.first.inner_text()}"
    # opened, its kernel connected, nothing run: not marked modified (`populora_nb.lab`)
    assert not page.evaluate("() => window.jupyterapp.shell.currentWidget.context.model.dirty")


def _save_and_stop(page, base: str, path: Path) -> dict:
    """Save the open notebook, stop every kernel, close every tab; the notebook as saved on disk."""
    page.evaluate("window.jupyterapp.commands.execute('docmanager:save')")
    page.wait_for_timeout(2000)
    for kernel in _api(base, "/api/kernels"):
        _api(base, f"/api/kernels/{kernel['id']}", method="DELETE")
    page.evaluate("window.jupyterapp.commands.execute('application:close-all')")
    page.wait_for_timeout(1000)
    return json.loads(path.read_text())


def _dashboard_cell(page):
    return page.locator(".jp-CodeCell", has_text="dash = Dashboard(").first


def test_notebook_03_in_jupyterlab_runs_and_keeps_its_dashboard(lab):
    from playwright.sync_api import sync_playwright

    base, root = lab
    SHOTS.mkdir(parents=True, exist_ok=True)
    with sync_playwright() as p:
        browser = p.chromium.launch(executable_path=CHROMIUM, args=["--no-sandbox", "--disable-gpu"])
        page = browser.new_page(viewport={"width": 1280, "height": 1000})
        try:
            _open(page, base)
            page.screenshot(path=SHOTS / "01_opened.png")

            # not awaited: the command's promise resolves only when every cell has run
            page.evaluate("() => { window.jupyterapp.commands.execute('notebook:run-all-cells'); }")
            cell = _dashboard_cell(page)
            # from the first second, the dashboard says what is happening
            cell.get_by_text("0/3 steps done").wait_for(timeout=60_000)
            # while it runs: the dashboard is a figure and a table, not a widget or its text repr
            cell.get_by_text("1/3 steps done").wait_for(timeout=180_000)
            cell.locator(".jp-OutputArea-output img").first.wait_for(timeout=30_000)  # the head updates first
            cell.locator(".jp-OutputArea-output table").first.wait_for(timeout=30_000)
            page.wait_for_timeout(500)
            cell.scroll_into_view_if_needed()
            cell.screenshot(path=SHOTS / "02_running.png")
            page.wait_for_function(
                "() => [...document.querySelectorAll('.jp-OutputArea-output')]"
                ".some(e => e.textContent.includes('rows with a rating'))",
                timeout=180_000,
            )  # the last cell's line: every cell ran
            outputs = cell.locator(".jp-OutputArea").inner_text()
            assert "run complete (3/3)" in outputs
            text = page.locator(".jp-NotebookPanel").inner_text()
            for bad in ("Error displaying widget", "Traceback", "VBox(children", "IntProgress"):
                assert bad not in text, bad
            assert page.locator(".jp-OutputArea-output[data-mime-type='application/vnd.jupyter.error']").count() == 0
            cell.scroll_into_view_if_needed()
            cell.screenshot(path=SHOTS / "03_finished_dashboard.png")
            # the step by hand: a stage's product renders as a table (the ratings, with the rule behind each)
            by_hand = page.locator(".jp-CodeCell", has_text="step_tables.ratings_table(").first
            table = by_hand.locator(".jp-OutputArea-output table").first
            table.wait_for(timeout=30_000)
            assert "rules (matches)" in table.inner_text() and "Δμ" in table.inner_text()
            by_hand.scroll_into_view_if_needed()
            by_hand.screenshot(path=SHOTS / "06_by_hand_ratings.png")

            # save, stop the kernel, reopen: the record is still there
            saved = _save_and_stop(page, base, root / NOTEBOOK)
            assert saved["metadata"]["kernelspec"]["name"] == "python3"
            _open(page, base)
            cell = _dashboard_cell(page)
            cell.locator(".jp-OutputArea-output img").first.wait_for(timeout=30_000)
            outputs = cell.locator(".jp-OutputArea").inner_text()
            assert "run complete (3/3)" in outputs and "Error displaying widget" not in outputs
            cell.scroll_into_view_if_needed()
            cell.screenshot(path=SHOTS / "04_reopened_dashboard.png")
            page.screenshot(path=SHOTS / "05_reopened_page.png")
        except Exception:
            page.screenshot(path=SHOTS / "failure.png", full_page=True)
            raise
        finally:
            browser.close()


def _top(locator) -> None:
    """Scroll ``locator`` to the top of the notebook's viewport (a cell taller than the window
    cannot be shot whole: the notebook panel scrolls, not the page)."""
    locator.evaluate("e => e.scrollIntoView({block: 'start'})")
    locator.page.wait_for_timeout(500)


def _wait_idle(page) -> None:
    """Until the status bar says the kernel is idle (every queued execution, widget callbacks included, done)."""
    page.wait_for_function(
        "() => [...document.querySelectorAll('.jp-StatusBar-TextItem')].some(e => e.textContent.includes('Idle'))",
        timeout=60_000,
    )


def _explorer_cell(page):
    return page.locator(".jp-CodeCell", has_text="ex = Explorer(").first


def test_notebook_08_explorer_filters_live_and_leaves_its_record(lab):
    from playwright.sync_api import sync_playwright

    base, root = lab
    notebook = "08_explore.ipynb"
    SHOTS.mkdir(parents=True, exist_ok=True)
    with sync_playwright() as p:
        browser = p.chromium.launch(executable_path=CHROMIUM, args=["--no-sandbox", "--disable-gpu"])
        page = browser.new_page(viewport={"width": 1400, "height": 1100})
        try:
            _open(page, base, notebook)
            _wait_idle(page)  # connected first, or Run All may find no kernel to send the cells to
            page.evaluate("() => { window.jupyterapp.commands.execute('notebook:run-all-cells'); }")
            page.wait_for_function(
                "() => [...document.querySelectorAll('.jp-OutputArea-output')]"
                ".some(e => e.textContent.includes('same programs'))",
                timeout=240_000,
            )  # the last cell's line: every cell ran
            last = page.locator(".jp-OutputArea-output", has_text="same programs")
            assert "same programs False" not in " ".join(last.all_inner_texts())  # each table row is its record
            cell = _explorer_cell(page)
            cell.locator(".widget-dropdown").first.wait_for(timeout=30_000)  # the live controls
            record = cell.locator(".jp-OutputArea-output", has_text="tasks match").first
            before = record.inner_text()
            assert "validity valid" in before and "population" in before
            cell.locator(".jp-OutputArea-output img").first.wait_for(timeout=30_000)
            assert page.locator(".jp-OutputArea-output[data-mime-type='application/vnd.jupyter.error']").count() == 0
            _top(cell.locator(".jp-OutputArea-child").first)
            page.screenshot(path=SHOTS / "08_explorer_live.png")

            # a filter changes the table: only T1's code_o tasks
            cell.locator(".widget-dropdown", has_text="kind").locator("select").select_option("code_o")
            cell.locator(".widget-dropdown", has_text="member").locator("select").select_option("T1")
            cell.get_by_text("member T1, kind code_o").first.wait_for(timeout=30_000)
            after = cell.locator(".jp-OutputArea-output", has_text="tasks match").first.inner_text()
            assert after != before and "baseline: 0 of" in after
            rows = cell.locator("table.populora-explorer tr")
            assert rows.count() > 1 and "code_i" not in cell.locator("table.populora-explorer").last.inner_text()
            _wait_idle(page)  # the figure is redrawn after the table: shoot once both show the filter
            page.wait_for_timeout(500)
            _top(cell.locator(".jp-OutputArea-child").first)
            page.screenshot(path=SHOTS / "08_explorer_filtered.png")
            _top(cell.locator(".jp-OutputArea-output img").first)
            page.screenshot(path=SHOTS / "08_explorer_filtered_figure.png")

            # save, stop the kernel, reopen: the record of the last selection is still there
            saved = _save_and_stop(page, base, root / notebook)
            outputs = [o for c in saved["cells"] if "ex = Explorer(" in "".join(c["source"]) for o in c["outputs"]]
            assert any("member T1, kind code_o" in "".join(o.get("data", {}).get("text/html", "")) for o in outputs)
            _open(page, base, notebook)
            cell = _explorer_cell(page)
            cell.locator(".jp-OutputArea-output img").first.wait_for(timeout=30_000)
            text = cell.locator(".jp-OutputArea").inner_text()
            assert "member T1, kind code_o" in text and "tasks match" in text
            _top(cell.locator(".jp-OutputArea-child").first)
            page.screenshot(path=SHOTS / "08_explorer_reopened.png")
        except Exception:
            page.screenshot(path=SHOTS / "08_failure.png", full_page=True)
            raise
        finally:
            browser.close()
