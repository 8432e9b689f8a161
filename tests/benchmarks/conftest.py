import importlib
from pathlib import Path

import pytest

BENCHMARKS = Path(__file__).resolve().parents[2] / "benchmarks"


@pytest.fixture
def load_benchmark(monkeypatch):
    """``load_benchmark(NAME)``: the script benchmarks/NAME.py as a module, its folder on the path as when it
    runs (so its ``host`` and ``shapes`` helpers import)."""
    monkeypatch.syspath_prepend(str(BENCHMARKS))
    return importlib.import_module
