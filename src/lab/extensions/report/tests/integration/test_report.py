"""`python -m lab.extensions.report` on real run and sweep dirs, opened in headless Chromium: the page draws (the
screenshot is not blank), runs without script errors, sorts its table on a header click and links files that exist."""

from __future__ import annotations

import io
import json
import os
import re
import shlex
import shutil
from pathlib import Path
from urllib.parse import unquote, urlparse

import numpy as np
import pytest
import yaml

from helpers import REPO, made_once, run_script, script_env
from warm_python import run_python

pytestmark = pytest.mark.slow


def report(*args: str):
    """The extension's command, as its page shows it."""
    return run_python(["-m", "lab.extensions.report", *args], cwd=REPO, env=script_env(), timeout=120)


CHROMIUM = next(filter(None, map(shutil.which, ("chromium", "chromium-browser", "google-chrome"))), None)
CHROMEDRIVER = shutil.which("chromedriver")


@pytest.fixture(scope="module")
def browser():
    if not (CHROMIUM and CHROMEDRIVER):
        if os.environ.get("CI"):  # .ci/run installs them: their absence there is a broken CI set-up, not a skip
            pytest.fail("chromium and chromedriver are missing: .ci/run should have installed them")
        pytest.skip("chromium and chromedriver are not installed (apt-get install chromium chromium-driver)")
    from selenium import webdriver
    from selenium.webdriver.chrome.service import Service

    options = webdriver.ChromeOptions()
    options.binary_location = CHROMIUM
    for flag in (
        "--headless=new",
        "--no-sandbox",
        "--disable-gpu",
        "--disable-dev-shm-usage",
        "--window-size=1400,1600",
    ):
        options.add_argument(flag)
    options.set_capability("goog:loggingPrefs", {"browser": "ALL"})
    driver = webdriver.Chrome(service=Service(CHROMEDRIVER), options=options)
    yield driver
    driver.quit()


@pytest.fixture(scope="module")
def evaluated_job(finished_sweep):
    """An eval run of the sweep's job 0 in the same outputs/ folder: the report must link its files."""

    def make() -> None:  # outputs/ is shared by the xdist workers: made by the first to ask
        ckpt = f"ckpt_path={finished_sweep}/0/checkpoints/best.pt"
        proc = run_script("eval.py", ckpt, "logger=none", f"hydra.run.dir={run_dir}")
        assert proc.returncode == 0, proc.stderr[-3000:]

    run_dir = finished_sweep.parents[2] / "eval" / "job0"
    return made_once(run_dir, make)


def _open(browser, page: Path) -> str:
    browser.get(page.as_uri())
    text = page.read_text()
    assert not re.search(r"""(src|href)=["']?(https?:)?//""", text), "the page must not fetch anything"
    _no_script_errors(browser)
    from PIL import Image

    shot = np.asarray(Image.open(io.BytesIO(browser.get_screenshot_as_png())).convert("L"), dtype=np.float64)
    assert (shot < 200).mean() > 0.005 and shot.std() > 5, "the screenshot is (nearly) blank"
    return text


def _no_script_errors(browser) -> None:
    """Neither the page's own error box (window "error" events) nor the browser's console saw an error."""
    errors = browser.find_element("id", "script-errors")
    assert errors.get_attribute("hidden") is not None and errors.get_attribute("textContent") == ""
    severe = [entry for entry in browser.get_log("browser") if entry["level"] == "SEVERE"]
    assert not severe, severe


def _linked_files(browser) -> list[Path]:
    hrefs = [a.get_attribute("href") for a in browser.find_elements("css selector", "a[href]")]
    assert all(h.startswith("file://") for h in hrefs), hrefs
    return [Path(unquote(urlparse(h).path)) for h in hrefs]


def _column(browser, index: int) -> list[str]:
    return [cell.text for cell in browser.find_elements("css selector", f"#jobs tbody tr td:nth-child({index + 1})")]


def test_sweep_report_draws_sorts_and_links_the_eval_run(finished_sweep, evaluated_job, browser, tmp_path):
    out = tmp_path / "elsewhere" / "sweep.html"  # links stay right relative to wherever the page is written
    out.parent.mkdir()
    proc = report(str(finished_sweep), "-o", str(out))
    assert proc.returncode == 0 and proc.stdout.strip() == f"report: {out}", proc.stdout + proc.stderr
    _open(browser, out)

    headers = [th.text for th in browser.find_elements("css selector", "#jobs thead th")]
    assert headers[:4] == ["rank", "job", "status", "optimizer.lr"] and "val/acc_best" in headers
    assert len(browser.find_elements("css selector", "svg.chart polyline")) >= 2 * 3  # 2 jobs x train curves
    assert sorted(_column(browser, 3)) == ["0.001", "0.03"]
    lr_header = browser.find_elements("css selector", "#jobs thead th")[3]
    lr_header.click()
    assert _column(browser, 3) == ["0.001", "0.03"] and lr_header.get_attribute("data-dir") == "asc"
    lr_header.click()
    assert _column(browser, 3) == ["0.03", "0.001"] and lr_header.get_attribute("data-dir") == "desc"
    _no_script_errors(browser)

    diff = browser.find_element("id", "config-diff").text
    assert "optimizer.lr" in diff and "0.001" in diff
    linked = _linked_files(browser)
    assert all(path.exists() for path in linked)
    assert finished_sweep / "0" / "checkpoints" / "best.pt" in linked
    assert {evaluated_job / "eval.json", evaluated_job / "confusion_matrix.png"} <= set(linked)


def test_run_report_links_the_export_and_marks_a_non_finite_loss(finished_run, finished_export, browser, tmp_path):
    run = tmp_path / "run"  # a copy whose loss went NaN at its last logged step
    shutil.copytree(finished_run, run, ignore=shutil.ignore_patterns("wandb", "*.pt"))
    lines = (run / "metrics.jsonl").read_text().splitlines()
    lines.append('{"step": 99, "epoch": 1, "train/loss": NaN}')
    (run / "metrics.jsonl").write_text("\n".join(lines) + "\n")
    for source in (finished_run, run):
        proc = report(str(source))
        assert proc.returncode == 0, proc.stdout + proc.stderr

    _open(browser, finished_run / "report.html")
    linked = _linked_files(browser)
    assert {finished_export / "model.onnx", finished_export / "export_manifest.json"} <= set(linked)
    assert finished_run / "checkpoints" / "best.pt" in linked and all(path.exists() for path in linked)

    _open(browser, run / "report.html")
    marks = browser.find_elements("css selector", "svg.chart text.nonfinite")
    assert len(marks) == 1 and "nan at step 99" in marks[0].get_attribute("textContent")


def test_the_reproduce_lines_of_a_run_are_its_commit_and_its_overrides(finished_run, browser):
    """What docs/run-dirs.md's *Reproduce a run* runs (tests/integration/test_reproduce.py gets the same losses from
    it)."""
    assert report(str(finished_run)).returncode == 0
    browser.get((finished_run / "report.html").as_uri())
    *lines, command = browser.find_element("id", "reproduce").text.splitlines()
    overrides = yaml.safe_load((finished_run / ".hydra" / "overrides.yaml").read_text())
    assert shlex.split(command) == ["python", "scripts/train.py", *overrides], command
    assert lines[0] == f"git checkout {json.loads((finished_run / 'summary.json').read_text())['git_commit']}"


def test_bad_input_is_one_line(tmp_path):
    (tmp_path / "empty").mkdir()
    for source, reason in ((tmp_path / "missing", "does not exist"), (tmp_path / "empty", "is empty")):
        proc = report(str(source))
        assert proc.returncode == 1 and proc.stderr.startswith(f"error: {source} {reason}: pass a run dir"), proc.stderr
        assert len(proc.stderr.strip().splitlines()) == 1 and not (source / "report.html").exists()
