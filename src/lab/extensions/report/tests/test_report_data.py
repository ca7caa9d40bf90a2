"""The report without a browser: what it reads from hand-written run dirs, and that it never imports torch."""

from __future__ import annotations

import json
import subprocess
from pathlib import Path

import pytest

from helpers import PYTHON, script_env
from lab.errors import UserError
from lab.extensions.report import runs, write_report


def _job(folder: Path, rmse: float, lr: str) -> None:
    (folder / ".hydra").mkdir(parents=True)
    (folder / ".hydra" / "config.yaml").write_text(f"task:\n  monitor: rmse\n  mode: min\noptimizer:\n  lr: {lr}\n")
    (folder / ".hydra" / "overrides.yaml").write_text(f"- task=regression\n- optimizer.lr={lr}\n")
    events = [{"step": 1, "epoch": 1, "train/loss": 2.0}, {"step": 2, "epoch": 1, "val/rmse": rmse}]
    (folder / "metrics.jsonl").write_text("".join(json.dumps(e) + "\n" for e in events) + '{"step": 3, "trai')
    (folder / "summary.json").write_text(json.dumps({"val/rmse_best": rmse, "status": "completed"}))


def test_a_sweep_without_job_records_is_ranked_by_its_summaries_and_finds_its_eval_run(tmp_path, monkeypatch):
    outputs = tmp_path / "outputs"
    sweep = outputs / "train" / "multirun" / "stamp"
    _job(sweep / "0", rmse=0.9, lr="0.1")
    _job(sweep / "1", rmse=0.4, lr="0.01")
    evaluation = outputs / "eval" / "stamp"
    (evaluation / ".hydra").mkdir(parents=True)
    # relative, as typed in the project root (the folder holding outputs/)
    (evaluation / ".hydra" / "config.yaml").write_text(
        "ckpt_path: outputs/train/multirun/stamp/1/checkpoints/best.pt\n"
    )
    (evaluation / "eval.json").write_text("{}")
    # eval.py's summary: each scalar of eval.json's metrics (task.metrics' f1, auroc... too), per-class groups flat
    scores = {"test/acc": 0.75, "test/f1": 0.625, "test/auroc": 0.875, "test/per_class_f1/cat": 0.5}
    (evaluation / "summary.json").write_text(json.dumps(scores))
    monkeypatch.chdir(tmp_path.parent)  # not where the command ran: the link must not depend on the cwd

    report = runs.load(sweep)
    assert [r.name for r in report.runs] == ["job 1", "job 0"] and report.best is report.runs[0]
    assert (report.metric, report.direction) == ("val/rmse_best", "minimize")
    assert len(report.runs[0].metrics) == 2  # the line cut short by a run still writing is skipped
    assert [d.dir for d in report.runs[0].derived] == [evaluation] and not report.runs[1].derived

    html = write_report(sweep).read_text()
    assert 'href="../../../eval/stamp/eval.json"' in html and "<th>optimizer.lr</th>" in html
    # the eval run's headline: every scalar metric, the per-class ones left to eval.json
    assert "test/acc 0.75, test/f1 0.625, test/auroc 0.875" in html and "per_class" not in html


@pytest.mark.parametrize("make", ["missing", "empty", "file", "other"])
def test_what_is_not_a_run_or_sweep_dir_is_refused_in_one_line(tmp_path, make):
    path = tmp_path / "x"
    if make == "empty":
        path.mkdir()
    elif make == "file":
        path.write_text("")
    elif make == "other":
        (path / "notes").mkdir(parents=True)
    with pytest.raises(UserError, match=r"pass a run dir .*or a sweep dir") as err:
        write_report(path)
    assert "\n" not in str(err.value) and not (tmp_path / "x" / "report.html").exists()


@pytest.mark.integration  # starts a process: a fresh Python interpreter
def test_the_report_imports_no_torch():
    code = "import sys, lab.extensions.report.page, lab.extensions.report.runs; sys.exit(int('torch' in sys.modules))"
    proc = subprocess.run([PYTHON, "-c", code], env=script_env(), capture_output=True, text=True, timeout=60)
    assert proc.returncode == 0, proc.stderr or "lab.extensions.report imported torch"
