"""Every hypothesis test is derandomised (the ``bestk`` profile of ``tests/conftest.py``), so a
failing example is drawn again on the next run and reproduces."""

from __future__ import annotations

import ast
import importlib
from pathlib import Path

from hypothesis import given, settings
from hypothesis import strategies as st

TESTS = Path(__file__).resolve().parent


def hypothesis_modules() -> list[str]:
    """The test modules (dotted names, ``tests.estimators.test_fuzz``) that import
    hypothesis's ``given``, in every folder of ``tests/``."""
    out = []
    for path in sorted(TESTS.rglob("test_*.py")):
        for node in ast.walk(ast.parse(path.read_text())):
            if isinstance(node, ast.ImportFrom) and node.module == "hypothesis" and any(
                    a.name == "given" for a in node.names):
                out.append(".".join(path.relative_to(TESTS.parent).with_suffix("").parts))
                break
    return out


def test_the_default_profile_is_derandomised():
    assert settings.default.derandomize

    @settings(max_examples=5, derandomize=False)
    @given(st.integers())
    def random_one(x):
        pass

    @settings(max_examples=5)
    @given(st.integers())
    def inherits(x):
        pass

    # what the check below reads: an explicit derandomize=False shows, the profile is inherited
    assert not random_one._hypothesis_internal_use_settings.derandomize
    assert inherits._hypothesis_internal_use_settings.derandomize


def test_every_hypothesis_test_is_derandomised():
    modules = hypothesis_modules()
    assert "tests.estimators.test_fuzz" in modules and \
        "tests.estimators.test_estimators" in modules
    found, bad = 0, []
    for name in modules:
        module = importlib.import_module(name)
        for attr, fn in vars(module).items():
            if attr.startswith("test_") and hasattr(fn, "hypothesis"):
                found += 1
                if not fn._hypothesis_internal_use_settings.derandomize:
                    bad.append(f"{name}.{attr}")
    assert found >= 10
    assert not bad, f"not derandomised: {bad}"
