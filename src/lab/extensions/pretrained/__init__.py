"""The `pretrained` extension: models with weights made elsewhere, to fine-tune (its page: README.md here).

`model=timm` builds any of timm's architectures, pretrained by default, its weights from a file, the Hugging Face
cache or the hub (``timm_model``); `model=torchvision` any torchvision classifier, random or from torchvision's
weights (``vision``; `model=resnet18` is its preset for CIFAR-size images). Both are options of the core's `model`
group (``options``: a ``ModelConfig`` each) that say what the core asks of a model option: where the weights are
(``locate_weights``), what preprocessing they expect (``preprocessing``), the architecture a checkpoint rebuilds
(``for_checkpoint``), and timm's classifier and layer groups (``head``, ``layer_groups``: optimizer.head_lr_scale,
optimizer.layer_decay, model.freeze=[backbone]). `experiment=finetune_folder` and `experiment=cifar10_resnet18` are
its presets; ``bench_finetune`` and ``bench_gpu_throughput`` its benchmarks.
"""

EXTRAS: tuple[str, ...] = ("pretrained",)  # timm (huggingface_hub and safetensors come with it)
