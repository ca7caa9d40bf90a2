"""The core finds a model's, task's, dataset's or option's seams where they are declared (a method or ClassVar with
a default on the base class a fork subclasses), never by probing for a name: a `hasattr(` in src/lab outside the
extensions is either duck typing of torch/numpy/OmegaConf objects, listed here with its reason, or a seam to declare."""

from __future__ import annotations

import ast

from helpers import REPO

SRC = REPO / "src" / "lab"
# (file under src/lab, the attribute probed): why it is not a seam of ours
DUCK_TYPING = {
    ("checkpointing/state_dicts.py", "_orig_mod"): "torch.compile's wrapper",
    ("data/loaders.py", "set_epoch"): "a torch sampler (DistributedSampler has it, others not)",
    ("training/window.py", "full_tensor"): "an FSDP DTensor or a plain tensor",
    ("tracking/backends.py", "item"): "a numpy or torch scalar",
    ("tracking/child_process.py", "item"): "a numpy or torch scalar",
    ("config/trackers.py", "get"): "a logger node as an OmegaConf DictConfig or as its dataclass",
    ("tracking/tracker.py", "get"): "a logger node as an OmegaConf DictConfig or as its dataclass",
}


def _probes() -> list[tuple[str, str, int]]:
    found = []
    for path in sorted(SRC.rglob("*.py")):
        if "extensions" in path.relative_to(SRC).parts:
            continue
        for node in ast.walk(ast.parse(path.read_text())):
            if isinstance(node, ast.Call) and isinstance(node.func, ast.Name) and node.func.id == "hasattr":
                name = node.args[1]
                attribute = name.value if isinstance(name, ast.Constant) else ast.unparse(name)
                found.append((path.relative_to(SRC).as_posix(), str(attribute), node.lineno))
    return found


def test_the_core_probes_no_object_of_ours_for_an_undeclared_seam() -> None:
    probes = _probes()
    assert probes, "the scan found no hasattr at all: has src/lab moved?"
    undeclared = [
        f"src/lab/{path}:{line} hasattr(..., {name!r})"
        for path, name, line in probes
        if (path, name) not in DUCK_TYPING
    ]
    assert not undeclared, (
        f"{'; '.join(undeclared)}: declare the seam on the base class a fork subclasses (a method or ClassVar with a "
        "default: ModelConfig, DataConfig, BaseTask...) and call it plainly, or list torch/numpy duck typing here"
    )
