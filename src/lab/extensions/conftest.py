"""The suite's hooks and fixtures (tests/conftest.py, tests/integration/conftest.py) for the extensions' tests,
which live in their folders: the same tiers, guards and shared trained fixtures, and `helpers` importable as in
tests/."""

import importlib.util
import sys
from pathlib import Path

TESTS = Path(__file__).resolve().parents[3] / "tests"
if str(TESTS) not in sys.path:
    sys.path.insert(0, str(TESTS))
for _name, _path in (("suite", TESTS / "conftest.py"), ("suite_integration", TESTS / "integration" / "conftest.py")):
    _spec = importlib.util.spec_from_file_location(_name, _path)
    assert _spec is not None and _spec.loader is not None
    _module = importlib.util.module_from_spec(_spec)
    _spec.loader.exec_module(_module)
    globals().update({name: value for name, value in vars(_module).items() if not name.startswith("__")})
