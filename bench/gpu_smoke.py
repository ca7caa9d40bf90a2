"""GPU smoke test: the CUDA paths no CPU test reaches, in one command on a machine with one or more GPUs.

    python bench/gpu_smoke.py            # needs CUDA; about 5 minutes on one GPU; exit 1 when a check fails
    python bench/gpu_smoke.py --dry-run  # the same steps on the CPU (gloo, bf16): checks the script itself

Each check runs the real entry scripts (as a user would) or the real Trainer, and prints one line: PASS/FAIL, the
check, its figures. With one GPU, the two "ranks" of the DDP check share it (gloo: NCCL refuses two ranks on one
device) and FSDP runs as a single rank; with two or more, each rank gets its own GPU and NCCL.
"""

from __future__ import annotations

import argparse
import json
import os
import socket
import subprocess
import sys
import tempfile
import time
import warnings
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
SMALL = ["logger=none", "trainer.progress_bar=off", "trainer.log_every_n_steps=5"]


class Smoke:
    def __init__(self, dry_run: bool, work: Path) -> None:
        self.dry_run, self.work = dry_run, work
        self.results: list[tuple[bool, str, str]] = []
        import torch

        self.gpus = 0 if dry_run else torch.cuda.device_count()
        self.device = ["trainer.device=cpu"] if dry_run else []
        self.torch_device = "cpu" if dry_run else "cuda"

    # ------------------------------------------------------------------ running things
    def script(self, name: str, run: str, *overrides: str, env: dict | None = None) -> tuple[Path, str]:
        run_dir = self.work / run
        command = [sys.executable, str(REPO / "scripts" / name), f"hydra.run.dir={run_dir}", *overrides]
        proc = subprocess.run(command, capture_output=True, text=True, env={**os.environ, **(env or {})}, cwd=REPO)
        if proc.returncode != 0:
            raise RuntimeError(f"{name} {' '.join(overrides)} exited {proc.returncode}: {_last_line(proc)}")
        return run_dir, proc.stdout + proc.stderr

    def train(self, run: str, *overrides: str, env: dict | None = None) -> tuple[Path, str]:
        return self.script("train.py", run, *SMALL, *self.device, *overrides, env=env)

    def srun_like(self, run: str, ntasks: int, *overrides: str) -> Path:
        """ntasks processes with SLURM's environment, each seeing only its own GPU (`srun --gpus-per-task=1`):
        every rank's LOCAL_RANK differs but its GPU is always cuda:0."""
        run_dir = self.work / run
        port = _free_port_from(20000)
        procs = []
        for rank in range(ntasks):
            env = {
                **os.environ,
                "SLURM_JOB_ID": str(port - 20000),  # the template derives MASTER_PORT = 20000 + job id
                "SLURM_NTASKS": str(ntasks),
                "SLURM_NNODES": "1",
                "SLURM_NTASKS_PER_NODE": str(ntasks),
                "SLURM_PROCID": str(rank),
                "SLURM_LOCALID": str(rank),
            }
            if self.gpus:
                env["CUDA_VISIBLE_DEVICES"] = str(rank % self.gpus)
            backend = "dist.backend=nccl" if self.gpus >= ntasks else "dist.backend=gloo"
            command = [
                sys.executable,
                str(REPO / "scripts/train.py"),
                f"hydra.run.dir={run_dir}",
                *SMALL,
                *self.device,
                "dist=ddp",
                backend,
                *overrides,
            ]
            procs.append(subprocess.Popen(command, env=env, cwd=REPO, stdout=subprocess.PIPE, stderr=subprocess.STDOUT))
        outputs = [proc.communicate(timeout=300)[0].decode() for proc in procs]
        for rank, (proc, out) in enumerate(zip(procs, outputs)):
            if proc.returncode != 0:
                raise RuntimeError(f"rank {rank} exited {proc.returncode}: {out.strip().splitlines()[-1:]}")
        return run_dir

    def check(self, name: str, fn) -> None:
        start = time.perf_counter()
        try:
            ok, detail = fn()
        except Exception as err:  # a crash is a failed check; the others still run
            ok, detail = False, f"{type(err).__name__}: {err}"
        self.results.append((ok, name, detail))
        print(f"{'PASS' if ok else 'FAIL'}  {name:<44} {time.perf_counter() - start:6.1f}s  {detail}", flush=True)

    # ------------------------------------------------------------------ the checks
    def fsdp_batchnorm_bf16(self):
        nproc = max(1, min(2, self.gpus)) if self.gpus else 2
        run, _ = self.train(
            "fsdp_bn_bf16", "dist=fsdp", f"dist.nproc={nproc}", "model=cnn", "precision=bf16", "trainer.max_epochs=1"
        )
        val = _summary(run)
        return val["val/acc"] > 0.2, f"{nproc} rank(s), val/acc {val['val/acc']:.3f}"

    def fsdp_channels_last(self):
        nproc = max(1, min(2, self.gpus)) if self.gpus else 2
        run, _ = self.train(
            "fsdp_cl",
            "dist=fsdp",
            f"dist.nproc={nproc}",
            "model=cnn",
            "trainer.channels_last=true",
            "trainer.max_epochs=1",
        )
        return True, f"val/acc {_summary(run)['val/acc']:.3f}"

    def ddp_one_gpu_per_rank_then_fewer(self):
        run = self.srun_like("ddp_srun", 2, "model=cnn", "trainer.max_epochs=1")
        env = {"CUDA_VISIBLE_DEVICES": "0"} if self.gpus else {}
        resumed, out = self.train(
            "resume_fewer", "model=cnn", "trainer.max_epochs=2", f"ckpt_path={run}/checkpoints/last.pt", env=env
        )
        ok = "resumed at epoch 2" in out and _summary(resumed)["epochs"] == 2
        return ok, f"2 srun-like ranks on {max(self.gpus, 1)} GPU(s) -> resumed on 1 visible"

    def cnn_amp_channels_last_compile_accum(self):
        run, _ = self.train(
            "cnn",
            "model=cnn",
            "data=synthetic",
            "data.num_samples=4096",
            "data.batch_size=128",
            "data.num_workers=4",
            "data.augment=true",
            "precision=amp",
            "trainer.channels_last=true",
            "trainer.compile=true",
            "trainer.grad_accum_steps=2",
            "trainer.max_epochs=2",
        )
        self.cnn_run = run
        rows = _metrics(run)
        throughput = max(row.get("train/throughput", 0) for row in rows)
        return True, f"{throughput:,.0f} samples/s (best logged window)"

    def export_parity(self):
        run, _ = self.script(
            "export.py",
            "export",
            f"ckpt_path={self.cnn_run}/checkpoints/best.pt",
            "export.formats=[onnx,pt2]",
            "logger=none",
        )
        manifest = json.loads((run / "export_manifest.json").read_text())
        diffs = {name: entry.get("parity", {}).get("max_abs_diff") for name, entry in manifest["artifacts"].items()}
        ok = all(entry.get("status") == "ok" for entry in manifest["artifacts"].values())
        return ok, f"max |diff| {diffs}"

    def eval_matches_validation(self):
        best = self.cnn_run / "checkpoints/best.pt"
        run, _ = self.script("eval.py", "eval", f"ckpt_path={best}", "eval.split=val", "logger=none")
        evaluated = json.loads((run / "eval.json").read_text())["metrics"]
        import torch

        step = torch.load(best, weights_only=True)["progress"]["global_step"]
        logged = next(row for row in _metrics(self.cnn_run) if "val/loss" in row and row["step"] == step)
        dloss, dacc = abs(evaluated["loss"] - logged["val/loss"]), abs(evaluated["acc"] - logged["val/acc"])
        # training validated through the compiled model, eval runs it eagerly: kernels differ in rounding only
        return dloss <= 1e-3 * max(1.0, logged["val/loss"]) and dacc <= 2e-3, f"|dloss| {dloss:.2e}, |dacc| {dacc:.2e}"

    def host_syncs_per_step(self):
        counts = {name: _count_syncs(name, steps=20, device=self.torch_device) for name in ("bf16", "fp16")}
        if self.dry_run:
            return True, "the steps ran; syncs are not counted on CPU (no CUDA sync debug mode)"
        ok = counts["bf16"] == 0 and counts["fp16"] <= 20
        return ok, f"syncs over 20 steps: {counts} (want bf16 0, fp16 <= 1 per step)"

    def peak_memory_after_large_free(self):
        gib = 0 if self.dry_run else 8
        peak = _peak_after_free(self.work / "memory", gib=gib, device=self.torch_device)
        if self.dry_run:
            return True, f"fit ran (peak RSS {peak:.0f} MB; it cannot be reset on CPU)"
        return peak < gib * 1024, f"train/mem_peak_mb {peak:.0f} after freeing {gib} GiB"


# --------------------------------------------------------------------------- in-process checks (real Trainer)
def _trainer(overrides: list[str], run_dir: Path, device_name: str):
    import torch
    from hydra import compose, initialize_config_dir

    import lab.config
    from lab import runtime
    from lab.checkpointing import CheckpointManager
    from lab.data.datasets import build as build_data
    from lab.data.loaders import EpochLoader, make_loader
    from lab.distributed.parallel import Parallel
    from lab.models.common import build as build_model
    from lab.optim.optimizers import build_optimizer
    from lab.optim.schedulers import build_scheduler
    from lab.tasks.classification import Classification
    from lab.tracking import Tracker
    from lab.training.trainer import Trainer

    with initialize_config_dir(config_dir=str(REPO / "conf"), version_base="1.3"):
        cfg = compose("train", overrides=["logger=none", "trainer.progress_bar=off", *overrides])
    lab.config.validate(cfg)
    device = runtime.select_device(device_name)
    runtime.configure_backends(cfg.trainer, device)
    datamodule = build_data(cfg.data)
    generator = torch.Generator().manual_seed(0)
    pin = device.type == "cuda"
    loader = make_loader(datamodule.train, cfg.data, train=True, generator=generator, pin_memory=pin)
    model = build_model(cfg.model, datamodule.meta).to(device)
    optimizer = build_optimizer(cfg.optimizer, model, cfg.model, device)
    return Trainer(
        model=model,
        optimizer=optimizer,
        scheduler=build_scheduler(cfg.scheduler, optimizer, 1000),
        task=Classification(datamodule.meta["num_classes"]),
        train_batches=EpochLoader(loader, generator, seed=0, limit=cfg.trainer.limit_train_batches),
        val_loader=None,
        device=device,
        precision=runtime.resolve_precision(cfg.precision, device),
        cfg=cfg.trainer,
        tracker=Tracker(run_dir).start(),
        checkpoints=CheckpointManager(run_dir, Parallel()),
    )


def _count_syncs(precision: str, steps: int, device: str) -> int:
    """Synchronizing CUDA calls over `steps` optimizer steps between log lines (after 5 warm-up steps)."""
    import torch

    on_cuda = device == "cuda"
    overrides = [f"precision={precision}", "model=cnn", "data=synthetic", "trainer.log_every_n_steps=1000"]
    with tempfile.TemporaryDirectory() as tmp:
        trainer = _trainer([*overrides, "trainer.limit_train_batches=5"], Path(tmp), device)
        trainer.train_epoch(0)  # warm-up: allocator, cuDNN algorithm choice
        trainer.progress.batch_in_epoch = 0
        trainer.train_batches.batches = steps
        if on_cuda:
            torch.cuda.synchronize()
        with warnings.catch_warnings(record=True) as caught:
            warnings.simplefilter("always")
            if on_cuda:
                torch.cuda.set_sync_debug_mode("warn")
            try:
                trainer.train_epoch(1)
            finally:
                if on_cuda:
                    torch.cuda.set_sync_debug_mode("default")
        trainer.tracker.finish()
    assert trainer.progress.global_step == 5 + steps
    # the warning of each synchronizing call; not torch's notice, on first use, that the mode is a prototype (it
    # also says "synchronizing", and was counted as a sync of whichever precision ran first)
    return sum("called a synchronizing CUDA operation" in str(w.message) for w in caught)


def _peak_after_free(run_dir: Path, gib: int, device: str) -> float:
    import torch

    block = torch.empty(gib * 2**30, dtype=torch.uint8, device=device)
    del block  # a previous job's or the model summary's peak: must not show up in train/mem_peak_mb
    run_dir.mkdir(parents=True, exist_ok=True)
    trainer = _trainer(["model=cnn", "trainer.max_epochs=1", "trainer.log_every_n_steps=5"], run_dir, device)
    trainer.fit()
    trainer.tracker.finish()
    return max(row["train/mem_peak_mb"] for row in _metrics(run_dir) if "train/mem_peak_mb" in row)


# --------------------------------------------------------------------------- helpers
def _metrics(run_dir: Path) -> list[dict]:
    return [json.loads(line) for line in (run_dir / "metrics.jsonl").read_text().splitlines()]


def _summary(run_dir: Path) -> dict:
    return json.loads((run_dir / "summary.json").read_text())


def _last_line(proc: subprocess.CompletedProcess) -> str:
    lines = (proc.stdout + proc.stderr).strip().splitlines()
    return lines[-1] if lines else ""


def _free_port_from(low: int) -> int:
    for port in range(low + os.getpid() % 10000, low + 20000):
        with socket.socket() as sock:
            try:
                sock.bind(("127.0.0.1", port))
                return port
            except OSError:
                continue
    raise RuntimeError("no free port for the rendezvous")


# in order: export and eval use the checkpoint of the cnn run
CHECKS = (
    "fsdp_batchnorm_bf16",
    "fsdp_channels_last",
    "ddp_one_gpu_per_rank_then_fewer",
    "cnn_amp_channels_last_compile_accum",
    "export_parity",
    "eval_matches_validation",
    "host_syncs_per_step",
    "peak_memory_after_large_free",
)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--dry-run", action="store_true", help="run the same steps on the CPU")
    parser.add_argument("--keep", type=Path, help="keep the run dirs here (default: a temporary dir)")
    parser.add_argument("--checks", nargs="+", metavar="NAME", help=f"run only these: {', '.join(CHECKS)}")
    args = parser.parse_args()
    unknown = set(args.checks or ()) - set(CHECKS)
    if unknown:
        parser.error(f"unknown check(s) {sorted(unknown)}; choose from {', '.join(CHECKS)}")
    import torch

    if not args.dry_run and not torch.cuda.is_available():
        sys.exit("no CUDA device: run on a GPU machine, or pass --dry-run to check the script on the CPU")
    start = time.perf_counter()
    with tempfile.TemporaryDirectory() as tmp:
        smoke = Smoke(args.dry_run, args.keep or Path(tmp))
        name = "cpu (dry run)" if args.dry_run else f"{smoke.gpus} x {torch.cuda.get_device_name(0)}"
        print(f"torch {torch.__version__}, {name}", flush=True)
        for name in args.checks or CHECKS:
            smoke.check(name, getattr(smoke, name))
    failed = [name for ok, name, _ in smoke.results if not ok]
    print(f"{len(smoke.results) - len(failed)} passed, {len(failed)} failed in {time.perf_counter() - start:.0f}s")
    sys.exit(1 if failed else 0)


if __name__ == "__main__":
    main()
