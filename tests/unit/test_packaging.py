"""The wheel installs one top-level package, ``banditflow``, mapped from the design card's
folders (pyproject.toml), and no module imports a layer by a top-level name of its own
(``learners``, ``schemas``, ...): installed beside an unrelated package of that name, one would
silently shadow the other."""

from __future__ import annotations

import shutil
import subprocess
import sys
import tomllib
import zipfile
from pathlib import Path

import pytest
from test_layers import imported

ROOT = Path(__file__).resolve().parents[2]
LAYERS = ("learners", "processors", "schemas", "streams", "offline")


def python_files() -> list[Path]:
    skip = {".venv", "runs", "build", ".git"}
    return [p for p in ROOT.rglob("*.py") if not skip.intersection(p.relative_to(ROOT).parts)]


def test_no_module_imports_a_layer_by_a_top_level_name() -> None:
    offenders = [f"{path}:{line} imports {name}" for path, line, name in imported(python_files())
                 if name.split(".")[0] in LAYERS]
    assert offenders == []


def test_every_subpackage_is_listed_and_mapped() -> None:
    config = tomllib.loads((ROOT / "pyproject.toml").read_text())["tool"]["setuptools"]
    on_disk = {"banditflow"} | {
        "banditflow." + str(init.parent.relative_to(ROOT)).replace("/", ".")
        for layer in LAYERS for init in (ROOT / layer).rglob("__init__.py")
    }
    assert set(config["packages"]) == on_disk
    assert config["package-dir"] == {"banditflow": "banditflow"} | {
        f"banditflow.{layer}": layer for layer in LAYERS}


@pytest.fixture(scope="module")
def wheel(tmp_path_factory: pytest.TempPathFactory) -> Path:
    out = tmp_path_factory.mktemp("wheel")
    # Built from a copy: setuptools leaves build/ in the tree it builds, and a stale build/lib
    # would put modules removed since into the next wheel.
    source = out / "source"
    shutil.copytree(ROOT, source, ignore=shutil.ignore_patterns(
        ".git", ".venv", "runs", "build", "dist", "*.egg-info", "__pycache__", "docs"))
    build = subprocess.run(
        [sys.executable, "-m", "pip", "wheel", "--no-deps", "--no-build-isolation", "--quiet",
         "--wheel-dir", str(out), str(source)],
        capture_output=True, text=True, timeout=300)
    assert build.returncode == 0, build.stderr[-2000:]
    (path,) = out.glob("banditflow-*.whl")
    return path


def test_the_wheel_installs_banditflow_alone(wheel: Path) -> None:
    names = zipfile.ZipFile(wheel).namelist()
    top_level = {name.split("/")[0] for name in names if not name.split("/")[0].endswith(
        (".dist-info", ".data"))}
    assert top_level == {"banditflow"}
    assert "banditflow/schemas/context.schema.json" in names
    assert "banditflow/streams/cli.py" in names
    entry_points = zipfile.ZipFile(wheel).read(
        next(n for n in names if n.endswith(".dist-info/entry_points.txt"))).decode()
    assert "banditflow = banditflow.streams.cli:main" in entry_points


def test_the_installed_wheel_imports_from_itself(wheel: Path, tmp_path: Path) -> None:
    target = tmp_path / "site"
    with zipfile.ZipFile(wheel) as archive:
        archive.extractall(target)
    # Outside the checkout, with the unpacked wheel first on the path: every layer and the
    # family registry load from the wheel, and the old top-level names are gone.
    probe = (
        "import importlib, banditflow, banditflow.streams.cli\n"
        "from banditflow.learners.registry import family\n"
        "assert family('conformal').name == 'conformal'\n"
        f"assert banditflow.__file__.startswith({str(target)!r}), banditflow.__file__\n"
        f"for layer in {LAYERS!r}:\n"
        "    try:\n"
        "        importlib.import_module(layer)\n"
        "    except ModuleNotFoundError:\n"
        "        continue\n"
        "    raise AssertionError(layer + ' is importable')\n"
    )
    run = subprocess.run([sys.executable, "-c", probe], cwd=tmp_path, capture_output=True,
                         text=True, env={"PYTHONPATH": str(target)}, timeout=120)
    assert run.returncode == 0, run.stderr[-2000:]
