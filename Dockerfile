# The template in a container: the lock's versions (requirements.txt) installed by `make install`, as on a machine.
#
#   docker build -t lab .                                  # PyPI's torch, with CUDA: GPU hosts (docker run --gpus all)
#   docker build -t lab:cpu --build-arg TORCH=cpu .        # PyTorch's CPU build: ~4 GB smaller, no GPU
#   docker run --rm lab make test                          # the suite, as CI runs it
#   docker run --rm --gpus all lab python bench/gpu_smoke.py
#   docker run --rm --gpus all --shm-size=8g \
#     -v "$PWD/outputs:/workspace/outputs" -v /data:/data -v "$HOME/.cache/huggingface:/cache/huggingface" \
#     lab python scripts/train.py data=image_folder data.root=/data/images
#
# Mounts: outputs/ (run dirs: checkpoints, metrics, wandb's offline runs) and the data are the host's; the Hugging
# Face cache (HF_HOME: timm's pretrained weights, datasets) is kept across containers. --shm-size: DataLoader
# workers pass batches through /dev/shm, which Docker limits to 64 MB. On a cluster: container/apptainer.def (Apptainer).
ARG PYTHON=3.11
FROM python:${PYTHON}-slim-bookworm

# make: the Makefile installs and tests; git: every run records its commit; curl: data=shards fetches shards from a
# URL with it. Not Chromium: the HTML report's browser test skips without it (.ci/run installs it for CI).
RUN apt-get update && apt-get install -y --no-install-recommends make git curl \
    && rm -rf /var/lib/apt/lists/*

# Outside /workspace, so a checkout mounted over /workspace (development) keeps the environment.
ENV VENV=/opt/venv \
    PATH=/opt/venv/bin:$PATH \
    HF_HOME=/cache/huggingface \
    WANDB_MODE=offline \
    PYTHONUNBUFFERED=1
ARG TORCH=
ARG EXTRAS=pretrained,data,export,sweeps,slurm,trackers,hf,ray,dev
WORKDIR /workspace
COPY . .
# the pip cache survives rebuilds (BuildKit), so a changed source reinstalls in seconds, not the 3 GB of torch again
RUN --mount=type=cache,target=/root/.cache/pip make install TORCH="$TORCH" EXTRAS="$EXTRAS" \
    && git config --global --add safe.directory /workspace
CMD ["python", "scripts/train.py", "--help"]
