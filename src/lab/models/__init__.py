"""Model zoo: ``build(cfg.model, meta)`` returns an ``nn.Module`` mapping (B, C, H, W) images to (B, K) logits.

Importing the builder modules fills the registry; a fork adds a model by decorating its builder with
``@register("name")`` in a module imported here (or anywhere before ``build`` is called).
"""

from lab.models import cnn, mlp, vision  # noqa: F401  (imported for their @register side effect)
from lab.models.registry import Builder, available, build, register

__all__ = ["Builder", "available", "build", "register"]
