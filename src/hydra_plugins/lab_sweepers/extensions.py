"""Put the extensions' presets on Hydra's config search path and register their plugins.

Hydra's plugin scan imports every public module under hydra_plugins and registers each Plugin class it finds as
`<module>.<class>`, which a plugin's `_target_` must name. An extension keeps its sweepers and launchers in its own
`plugins.py`, so each gets a subclass of the same name here, and its config targets
`hydra_plugins.lab_sweepers.extensions.<class>`.
"""

import sys

from hydra.core.config_search_path import ConfigSearchPath
from hydra.plugins.plugin import Plugin
from hydra.plugins.search_path_plugin import SearchPathPlugin

from lab import extensions


class ExtensionPresets(SearchPathPlugin):
    """Add each extension's conf/ after the repository's own, so a repository preset of the same name wins."""

    def manipulate_search_path(self, search_path: ConfigSearchPath) -> None:
        # Store the options of modules imported before lab.config, before composing. Only do so where this package's
        # config is in use: another checkout's or a renamed fork's plugins on the path must not store theirs.
        config = sys.modules.get(f"{extensions.__name__.split('.')[0]}.config")
        if config is not None:
            config.register()
        for folder in extensions.conf_dirs():
            search_path.append(provider=f"lab-{folder.parent.name}", path=f"file://{folder}")


def _reexport() -> None:
    """Re-export the extensions' plugins here. A function, so no loop variable is left for the scan to find twice."""
    for module in extensions.modules("plugins"):
        for name, plugin in vars(module).items():
            if isinstance(plugin, type) and issubclass(plugin, Plugin) and plugin.__module__ == module.__name__:
                globals()[name] = type(name, (plugin,), {"__module__": __name__, "__doc__": plugin.__doc__})


_reexport()
