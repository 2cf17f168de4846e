"""Every docstring example in the packages runs (river's docstrings are the model: examples
that stay true). One test per module that has examples."""

from __future__ import annotations

import doctest
import importlib
import pkgutil
from pathlib import Path

import pytest

PACKAGES = ("learners", "processors", "schemas", "streams", "offline")  # folders of banditflow.*
ROOT = Path(__file__).resolve().parents[2]


def modules_with_examples() -> list[str]:
    names = []
    for package in PACKAGES:
        for info in pkgutil.walk_packages([str(ROOT / package)], prefix=f"banditflow.{package}."):
            relative = info.name.removeprefix("banditflow.").replace(".", "/")
            path = ROOT / (relative + ("/__init__.py" if info.ispkg else ".py"))
            if ">>> " in path.read_text():
                names.append(info.name)
    return names


MODULES = modules_with_examples()


def test_the_packages_have_examples() -> None:
    assert len(MODULES) >= 30  # (a walk that finds nothing would pass every test below)


@pytest.mark.parametrize("name", MODULES)
def test_examples(name: str) -> None:
    module = importlib.import_module(name)
    results = doctest.testmod(module, optionflags=doctest.ELLIPSIS)
    assert results.failed == 0, f"{results.failed} of {results.attempted} examples failed"
