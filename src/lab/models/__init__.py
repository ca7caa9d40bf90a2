"""Model zoo: ``build(cfg.model, meta)`` returns the ``nn.Module`` for the data ``meta`` describes.

Every module of this package is imported on the first lookup: a fork adds a model as a new file here whose builder
is decorated with ``@register("name")``, plus ``conf/model/<name>.yaml``.
"""

from lab.models.registry import MODELS, Builder, available, build, register

__all__ = ["MODELS", "Builder", "available", "build", "register"]
