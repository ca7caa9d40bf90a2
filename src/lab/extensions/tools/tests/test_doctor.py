"""The environment doctor's checks on faked broken states: packages, torch builds, GPUs, disk, wandb mode."""

from __future__ import annotations

import importlib.metadata
import sys
from collections import namedtuple
from pathlib import Path
from types import SimpleNamespace

import pytest

from lab.extensions.tools import doctor, torch_checks

Usage = namedtuple("Usage", "total used free")
GIB = 2**30


def versions(installed: dict[str, str]):
    def version_of(name: str) -> str:
        if name not in installed:
            raise importlib.metadata.PackageNotFoundError(name)
        return installed[name]

    return version_of


@pytest.fixture
def requirements(tmp_path: Path) -> Path:
    path = tmp_path / "requirements.txt"
    path.write_text(
        "# runtime\ntorch>=2.4,<2.15  # the tested build\n-r other.txt\nnumpy>=1.24\n\n"
        'pywin32>=300; sys_platform == "win32"\n'
    )
    return path


def statuses(rows: list[doctor.Check]) -> dict[str, str]:
    return {row.name: row.status for row in rows}


# --------------------------------------------------------------------------- packages
def test_packages_in_range_pass_with_local_build_tags(requirements: Path) -> None:
    rows = doctor.check_packages(requirements, versions({"torch": "2.14.1+cu130", "numpy": "2.4.6"}))
    assert statuses(rows) == {"packages": "ok"}  # pywin32's marker excludes it here; comments and -r are skipped
    assert "2 of 2" in rows[0].detail and "torch 2.14.1+cu130" in rows[0].detail


def test_a_missing_and_a_mismatched_package_fail_with_the_fix(requirements: Path) -> None:
    rows = doctor.check_packages(requirements, versions({"torch": "2.15.0"}))
    assert statuses(rows) == {"package torch": "FAIL", "package numpy": "FAIL"}
    torch_row, numpy_row = rows
    assert "2.15.0 installed, wants torch>=2.4,<2.15" in torch_row.detail
    assert "not installed" in numpy_row.detail
    assert all("make install" in row.fix and "requirements.txt" in row.fix for row in rows)
    _, status = doctor.report(rows)
    assert status == 1


def test_a_package_of_an_extra_not_chosen_is_left_out_and_of_a_chosen_one_fails(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    lock = tmp_path / "requirements.txt"
    lock.write_text("torch==2.14.1\n    # via lab (pyproject.toml)\nonnx==1.23.2\ntensorboard==2.21.0\n")
    monkeypatch.setattr(
        doctor.extras, "declared", lambda: {"": ("torch",), "export": ("onnx",), "trackers": ("tensorboard",)}
    )
    monkeypatch.setattr(doctor.extras, "extras", lambda: {"export": ("onnx",), "trackers": ("tensorboard",)})
    monkeypatch.setattr(doctor.extras, "chosen", lambda is_installed: ["export"])  # what make install was asked
    rows = doctor.check_packages(lock, versions({"torch": "2.14.1+cpu"}))
    assert statuses(rows) == {"packages": "ok", "package onnx": "FAIL", "extras": "ok"}
    assert "not installed (extra export: onnx==1.23.2)" in rows[1].detail
    assert "not installed: trackers (1 packages of requirements.txt left out)" in rows[2].detail


def test_a_package_an_installed_one_needs_fails_and_one_of_a_left_out_extra_does_not(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The lock's `# via` lines: sqlalchemy is needed because optuna is here; alembic only by an absent mlflow."""
    lock = tmp_path / "requirements.txt"
    lock.write_text(
        "sqlalchemy==2.1.9\n    # via\n    #   alembic\n    #   optuna\n"
        "alembic==1.20.1\n    # via\n    #   lab (pyproject.toml)\n    #   mlflow-skinny\n"
    )
    monkeypatch.setattr(doctor.extras, "declared", lambda: {"": ("optuna",), "trackers": ("alembic", "mlflow-skinny")})
    monkeypatch.setattr(doctor.extras, "extras", lambda: {"trackers": ("alembic", "mlflow-skinny")})
    monkeypatch.setattr(doctor.extras, "chosen", lambda is_installed: [])
    rows = doctor.check_packages(lock, versions({"optuna": "5.0.0"}))
    assert statuses(rows) == {"package sqlalchemy": "FAIL", "extras": "ok"}, rows
    assert "not installed (needed by optuna: sqlalchemy==2.1.9)" in rows[0].detail


def test_the_extras_make_install_recorded_are_the_installed_ones(tmp_path: Path, monkeypatch: pytest.MonkeyPatch):
    monkeypatch.setattr(sys, "prefix", str(tmp_path))
    (tmp_path / ".extras").write_text("export,dev")
    assert doctor.extras.chosen(lambda dist: False) == ["export", "dev"]
    (tmp_path / ".extras").write_text("")  # EXTRAS= : the core alone
    assert doctor.extras.chosen(lambda dist: True) == []


def test_python_or_torch_outside_the_tested_matrix_warns() -> None:
    assert doctor.check_support().status == "ok"  # this machine is in it
    row = doctor.check_support(versions({"torch": "2.9.1"}))
    assert row.status == "warn" and "torch 2.9.1 (tested: <2.15,>=2.14)" in row.detail and "outside" in row.detail


def test_this_environment_matches_requirements(repo: Path) -> None:
    rows = doctor.check_packages(repo / "requirements.txt")
    assert statuses(rows) == {"packages": "ok"}, [row.detail for row in rows]


# --------------------------------------------------------------------------- torch builds and GPUs
def fake_torch(cuda: str | None, available: bool = False, devices: int = 0) -> SimpleNamespace:
    return SimpleNamespace(
        __version__="2.14.1",
        version=SimpleNamespace(cuda=cuda),
        cuda=SimpleNamespace(
            is_available=lambda: available,
            device_count=lambda: devices,
            nccl=SimpleNamespace(version=lambda: (2, 21, 5)),
            get_device_properties=lambda i: SimpleNamespace(name="Fake GPU", major=8, minor=0),
            mem_get_info=lambda i: (70 * GIB, 80 * GIB),
        ),
        backends=SimpleNamespace(cudnn=SimpleNamespace(is_available=lambda: True, version=lambda: 90100)),
    )


SMI = ("/usr/bin/nvidia-smi", "1 GPU(s), driver 550.54")


def test_a_cpu_only_build_on_a_machine_with_an_nvidia_gpu_fails() -> None:
    rows = doctor.check_cuda(fake_torch(cuda=None), SMI)
    assert statuses(rows) == {"nvidia driver": "ok", "cuda": "FAIL"}
    assert "CPU-only build" in rows[1].detail and "--index-url" in rows[1].fix


def test_a_cpu_only_build_without_a_gpu_is_fine() -> None:
    assert statuses(doctor.check_cuda(fake_torch(cuda=None), (None, ""))) == {"cuda": "ok"}


def test_a_cuda_build_on_a_machine_without_a_gpu_says_the_cpu_build_would_do() -> None:
    rows = doctor.check_cuda(fake_torch(cuda="13.0", available=False), (None, ""))
    assert statuses(rows)["cuda"] == "warn"
    assert "CUDA libraries take" in rows[0].detail and "make install TORCH=cpu" in rows[0].fix


def test_a_cuda_build_that_sees_no_gpu_on_a_gpu_machine_fails() -> None:
    rows = doctor.check_cuda(fake_torch(cuda="13.0", available=False), SMI)
    assert statuses(rows)["cuda"] == "FAIL"
    assert "driver" in rows[1].fix


def test_a_working_gpu_reports_its_libraries() -> None:
    rows = doctor.check_cuda(fake_torch(cuda="13.0", available=True, devices=2), SMI)
    assert statuses(rows) == {"nvidia driver": "ok", "cuda": "ok", "cudnn": "ok", "nccl": "ok"}
    assert "2 visible GPU(s)" in rows[1].detail and rows[3].detail == "2.21.5"


def test_a_gpu_whose_matmul_is_wrong_fails(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(torch_checks, "matmul_check", lambda torch, device: (False, "matmul differs by 3.1e-01"))
    rows = doctor.check_gpus(fake_torch(cuda="13.0", available=True, devices=1))
    assert statuses(rows) == {"gpu 0": "FAIL"}
    assert "Fake GPU" in rows[0].detail and "70.0 of 80.0 GiB free" in rows[0].detail


def test_an_unimportable_torch_fails_and_the_other_checks_still_run(
    monkeypatch: pytest.MonkeyPatch, repo: Path
) -> None:
    monkeypatch.setitem(sys.modules, "torch", None)  # `import torch` raises ImportError
    rows = list(doctor.run_checks(repo / "outputs", repo / "requirements.txt", min_free_gib=0.0))
    found = statuses(rows)
    assert found["torch"] == "FAIL" and "cuda" not in found
    assert {"python", "disk", "wandb", "packages"} <= set(found)
    text, status = doctor.report(rows)
    assert status == 1 and "torch: reinstall the lock's versions" in text


def test_this_machine_passes_the_torch_checks() -> None:
    import torch

    rows = doctor.check_cuda(torch, doctor.nvidia_smi()) + doctor.check_precision(torch)
    assert "FAIL" not in statuses(rows).values(), rows


# --------------------------------------------------------------------------- disk, wandb, report
def test_too_little_disk_fails_and_little_warns(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    monkeypatch.setattr(doctor.shutil, "disk_usage", lambda path: Usage(100 * GIB, 99.5 * GIB, 0.5 * GIB))
    row = doctor.check_disk(tmp_path / "outputs" / "not-yet", min_free_gib=1.0)  # a parent that exists is measured
    assert row.status == "FAIL" and "0.5 GiB free" in row.detail and "make clean" in row.fix
    monkeypatch.setattr(doctor.shutil, "disk_usage", lambda path: Usage(100 * GIB, 97 * GIB, 3 * GIB))
    assert doctor.check_disk(tmp_path, min_free_gib=1.0).status == "warn"


@pytest.mark.parametrize(
    ("env", "mode", "why"),
    [
        ({"WANDB_MODE": "disabled"}, "disabled", "WANDB_MODE=disabled"),
        ({"WANDB_API_KEY": "x" * 40}, "online", "credentials found"),
        ({}, "offline", "no credentials"),
    ],
)
def test_the_wandb_mode_and_why(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path, env: dict, mode: str, why: str
) -> None:
    for key in ("WANDB_MODE", "WANDB_API_KEY"):
        monkeypatch.delenv(key, raising=False)
    monkeypatch.setenv("NETRC", str(tmp_path / "no-netrc"))
    for key, value in env.items():
        monkeypatch.setenv(key, value)
    row = doctor.check_wandb()
    assert row.status == "ok" and f"-> {mode}:" in row.detail and why in row.detail


def test_the_report_lists_each_failure_with_its_fix() -> None:
    rows = [
        doctor.ok("python", "3.11"),
        doctor.warn("disk", "3 GiB free", "free space soon"),
        doctor.fail("cuda", "CPU-only build", "install a CUDA build"),
    ]
    text, status = doctor.report(rows)
    assert status == 1
    assert "FAIL  cuda" in text and "1 problem(s):\n  cuda: install a CUDA build" in text
    assert "worth a look:\n  disk: free space soon" in text
    text, status = doctor.report(rows[:2])
    assert status == 0 and text.endswith("all checks passed")
