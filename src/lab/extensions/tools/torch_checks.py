"""The doctor's torch checks: the build, CUDA, cuDNN and NCCL, the driver against the build, bf16 and TF32, and each
GPU (its memory, and a matmul checked against the CPU)."""

from __future__ import annotations

import importlib
import importlib.metadata
import shutil
import subprocess
import time
from types import ModuleType

from lab.extensions.tools.doctor_checks import INSTALL_FIX, Check, fail, ok, warn

CUDA_WHEELS = "https://download.pytorch.org/whl/cu126"  # any CUDA wheel index whose CUDA the driver supports


# --------------------------------------------------------------------------- torch, CUDA, GPUs
def import_torch() -> tuple[ModuleType | None, Check]:
    try:
        torch = importlib.import_module("torch")
    except Exception as err:  # ImportError, or a broken binary raising OSError
        return None, fail("torch", f"cannot import torch: {str(err).splitlines()[0]}", INSTALL_FIX)
    build = f"CUDA {torch.version.cuda}" if torch.version.cuda else "CPU-only build"
    return torch, ok("torch", f"{torch.__version__} ({build})")


def nvidia_smi() -> tuple[str | None, str]:
    """Return the path of nvidia-smi (or None) and its one-line GPU and driver summary, or the error."""
    path = shutil.which("nvidia-smi")
    if path is None:
        return None, ""
    try:
        out = subprocess.run(
            [path, "--query-gpu=name,driver_version", "--format=csv,noheader"],
            capture_output=True,
            text=True,
            timeout=20,
        )
    except (OSError, subprocess.TimeoutExpired) as err:
        return path, f"nvidia-smi failed: {err}"
    if out.returncode != 0:
        return path, f"nvidia-smi failed: {(out.stderr or out.stdout).strip().splitlines()[:1]}"
    gpus = [line.strip() for line in out.stdout.splitlines() if line.strip()]
    driver = gpus[0].rsplit(",", 1)[-1].strip() if gpus else "?"
    return path, f"{len(gpus)} GPU(s), driver {driver}"


def check_cuda(torch: ModuleType, smi: tuple[str | None, str]) -> list[Check]:
    smi_path, smi_line = smi
    rows = []
    if smi_path is not None:
        failed = smi_line.startswith("nvidia-smi failed")
        rows.append(
            (fail if failed else ok)(
                "nvidia driver",
                smi_line,
                *(["reinstall or reload the NVIDIA driver (`nvidia-smi` must list the GPUs)"] if failed else []),
            )
        )
    if torch.version.cuda is None:
        if smi_path is not None:
            rows.append(
                fail(
                    "cuda",
                    "torch is a CPU-only build, but this machine has an NVIDIA GPU (nvidia-smi found)",
                    "install a CUDA build: `pip install --force-reinstall torch torchvision --index-url "
                    f"{CUDA_WHEELS}` (a CUDA version your driver supports: https://pytorch.org/get-started/locally/)",
                )
            )
        else:
            rows.append(ok("cuda", "no NVIDIA GPU (no nvidia-smi); CPU-only torch is right here"))
        return rows
    if not torch.cuda.is_available():
        if smi_path is not None:
            rows.append(
                fail(
                    "cuda",
                    f"torch built for CUDA {torch.version.cuda} sees no GPU ({smi_line or 'nvidia-smi found'})",
                    "the driver is older than the CUDA build needs or CUDA_VISIBLE_DEVICES hides the GPUs: update the "
                    f"driver, or install a torch built for an older CUDA (`--index-url {CUDA_WHEELS}`)",
                )
            )
        else:
            rows.append(
                warn(
                    "cuda",
                    f"CUDA {torch.version.cuda} build, no GPU on this machine: training runs on CPU; its CUDA "
                    f"libraries take {cuda_payload() / 2**30:.1f} GiB",
                    "on a machine that never has a GPU, the CPU build: `rm -rf .venv && make install TORCH=cpu` "
                    "(PyTorch's CPU wheel index)",
                )
            )
    else:
        rows.append(ok("cuda", f"CUDA {torch.version.cuda}, {torch.cuda.device_count()} visible GPU(s)"))
    return rows + cuda_libraries(torch, needed=torch.cuda.is_available())


def cuda_payload() -> int:
    """Return the bytes installed by CUDA library packages (nvidia-*, cuda-*, triton), from their RECORD files."""
    total = 0
    for dist in importlib.metadata.distributions():
        name = (dist.metadata["Name"] or "").lower()
        if name.startswith(("nvidia-", "cuda-")) or name == "triton":
            total += sum(f.size or 0 for f in dist.files or [])
    return total


def cuda_libraries(torch: ModuleType, needed: bool) -> list[Check]:
    """Check cuDNN and NCCL of a CUDA build; a missing one fails (cuDNN) or warns (NCCL) only where a GPU uses it."""
    try:
        cudnn = torch.backends.cudnn.version() if torch.backends.cudnn.is_available() else None
    except Exception:
        cudnn = None
    if cudnn:
        rows = [ok("cudnn", str(cudnn))]
    elif needed:
        rows = [fail("cudnn", "not available", f"reinstall torch with its CUDA libraries: {INSTALL_FIX}")]
    else:
        rows = [ok("cudnn", "not available (no GPU here)")]
    try:
        nccl = torch.cuda.nccl.version()
        rows.append(ok("nccl", ".".join(map(str, nccl)) if isinstance(nccl, tuple) else str(nccl)))
    except Exception as err:  # a build without NCCL: DDP falls back to gloo
        detail = f"not available ({str(err).splitlines()[0] if str(err) else type(err).__name__}); dist=ddp uses gloo"
        rows.append(warn("nccl", detail, "a Linux CUDA build of torch has NCCL") if needed else ok("nccl", detail))
    return rows


def matmul_check(torch: ModuleType, device: str, n: int = 1024) -> tuple[bool, str]:
    """Compare a float32 n x n matmul on `device` with the float64 product on the CPU; return (passed, detail)."""
    generator = torch.Generator().manual_seed(0)
    a, b = (torch.randn(n, n, generator=generator) for _ in range(2))
    expected = a.double() @ b.double()
    try:
        x, y = a.to(device), b.to(device)
        with _no_tf32(torch):  # exact float32, not TF32
            (x @ y).cpu()  # warm-up: cuBLAS initialisation
            torch.cuda.synchronize(device)
            start = time.perf_counter()
            product = x @ y
            torch.cuda.synchronize(device)
            seconds = time.perf_counter() - start
            error = float((product.cpu().double() - expected).abs().max() / expected.abs().max())
    except Exception as err:
        return False, f"matmul failed: {str(err).splitlines()[0]}"
    tflops = 2 * n**3 / seconds / 1e12
    if not error < 1e-3:
        return False, f"matmul differs from the CPU's by {error:.2e} (relative)"
    return True, f"matmul {n}x{n} ok ({tflops:.1f} TFLOP/s fp32, rel. error {error:.1e})"


class _no_tf32:
    def __init__(self, torch: ModuleType) -> None:
        self.matmul = torch.backends.cuda.matmul

    def __enter__(self) -> None:
        self.before, self.matmul.allow_tf32 = self.matmul.allow_tf32, False

    def __exit__(self, *exc: object) -> None:
        self.matmul.allow_tf32 = self.before


def check_gpus(torch: ModuleType) -> list[Check]:
    rows = []
    for index in range(torch.cuda.device_count()):
        name = f"gpu {index}"
        device = f"cuda:{index}"
        try:
            props = torch.cuda.get_device_properties(index)
            free, total = torch.cuda.mem_get_info(index)
        except Exception as err:
            rows.append(fail(name, f"cannot query: {str(err).splitlines()[0]}", "check `nvidia-smi` and the driver"))
            continue
        memory = f"{props.name}, sm_{props.major}{props.minor}, {free / 2**30:.1f} of {total / 2**30:.1f} GiB free"
        passed, detail = matmul_check(torch, device)
        if passed:
            rows.append(ok(name, f"{memory}; {detail}"))
        else:
            rows.append(
                fail(name, f"{memory}; {detail}", "a faulty GPU or driver: `nvidia-smi -q`, reboot, or exclude it")
            )
    return rows


def check_precision(torch: ModuleType) -> list[Check]:
    """Check bf16 and TF32 where training would run: the first GPU, else the CPU."""
    if torch.cuda.is_available():
        major, minor = torch.cuda.get_device_capability(0)
        bf16 = torch.cuda.is_bf16_supported()
        tf32 = major >= 8
        rows = [
            ok("bf16", "supported: precision=bf16 needs no GradScaler")
            if bf16
            else warn("bf16", f"not supported on sm_{major}{minor}", "use precision=fp16 or amp (fp16 + GradScaler)"),
            ok("tf32", f"supported (sm_{major}{minor}); trainer.tf32=true (default) uses it for fp32 matmuls")
            if tf32
            else ok("tf32", f"not on sm_{major}{minor} (needs Ampere, sm_80+): fp32 matmuls stay full fp32"),
        ]
        return rows
    capability = getattr(torch.backends.cpu, "get_cpu_capability", lambda: "unknown")()
    try:
        with torch.autocast("cpu", dtype=torch.bfloat16):
            out = torch.ones(4, 4) @ torch.ones(4, 4)
        bf16_ok = out.dtype == torch.bfloat16
    except Exception:
        bf16_ok = False
    return [
        ok("bf16", f"CPU autocast works (CPU capability {capability}); precision=amp|bf16 use it")
        if bf16_ok
        else warn("bf16", "CPU bf16 autocast failed", "use precision=fp32 on this machine"),
        ok("tf32", "n/a on CPU"),
    ]
