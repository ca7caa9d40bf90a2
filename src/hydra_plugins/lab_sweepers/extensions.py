"""The extensions' part in Hydra (lab.extensions): their presets on the config search path, their plugins registered.

Hydra's plugin scan imports every public module under hydra_plugins and registers the Plugin classes it finds in
each as `<module>.<class>`; a plugin's `_target_` must name one of those. An extension keeps its sweepers and
launchers in its own folder (`plugins.py`), so each of them gets a subclass of the same name here, and its config
targets `hydra_plugins.lab_sweepers.extensions.<class>`.
"""

import sys

from hydra.core.config_search_path import ConfigSearchPath
from hydra.plugins.plugin import Plugin
from hydra.plugins.search_path_plugin import SearchPathPlugin

from lab import extensions


class ExtensionPresets(SearchPathPlugin):
    """Each extension's conf/ after the repository's own: `hparams_search=optuna` is found in the extension that
    brings it, and a preset of the repository's conf/ of the same name wins."""

    def manipulate_search_path(self, search_path: ConfigSearchPath) -> None:
        # the options of a module imported before lab.config (see register), before composing; only where this
        # package's config is in use (another checkout's plugins on the path, a renamed fork's, must not store theirs)
        config = sys.modules.get(f"{extensions.__name__.split('.')[0]}.config")
        if config is not None:
            config.register()
        for folder in extensions.conf_dirs():
            search_path.append(provider=f"lab-{folder.parent.name}", path=f"file://{folder}")


def _reexport() -> None:
    """In a function: a loop variable left in this module would be scanned too (the last plugin seen, found twice)."""
    for module in extensions.modules("plugins"):
        for name, plugin in vars(module).items():
            if isinstance(plugin, type) and issubclass(plugin, Plugin) and plugin.__module__ == module.__name__:
                globals()[name] = type(name, (plugin,), {"__module__": __name__, "__doc__": plugin.__doc__})


_reexport()
