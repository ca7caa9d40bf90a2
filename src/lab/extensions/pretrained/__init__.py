"""The `pretrained` extension: models with weights made elsewhere, to fine-tune. See README.md here.

`model=timm` (``timm_model``) builds any timm architecture, pretrained by default, with weights from a file, the
Hugging Face cache or the hub. `model=torchvision` (``vision``) builds any torchvision classifier, random or from
torchvision's weights; `model=resnet18` is its preset for CIFAR-size images. Both are ``ModelConfig`` options of the
core's `model` group (``options``). They tell the core where the weights are (``locate_weights``), what
preprocessing they expect (``preprocessing``) and what architecture a checkpoint rebuilds (``for_checkpoint``).
timm's also give the classifier and layer groups (``head``, ``layer_groups``) that optimizer.head_lr_scale,
optimizer.layer_decay and model.freeze=[backbone] use. Presets: `experiment=finetune_folder` and
`experiment=cifar10_resnet18`. Benchmarks: ``bench_finetune`` and ``bench_gpu_throughput``.
"""

EXTRAS: tuple[str, ...] = ("pretrained",)  # timm (huggingface_hub and safetensors come with it)
