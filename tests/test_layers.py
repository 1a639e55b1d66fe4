"""The house rules that hold by themselves: layers point down only, every code folder is packaged.

Layers (ARCHITECTURE.md section 3): core (`rocescope/` minus the CLI) <- pipeline <- collectors | analysis <-
dashboards; testbed (stand-ins) may use what it stands in for; sim may use everything; nothing but the CLI imports
sim or testbed. Imports inside functions count too: a lazy import is still a door upward.
"""

from __future__ import annotations

import ast
import tomllib
from collections.abc import Iterator
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
PYPROJECT = tomllib.loads((ROOT / "pyproject.toml").read_text())
PACKAGE_DIRS: dict[str, str] = PYPROJECT["tool"]["setuptools"]["package-dir"]

#: layer -> the layers it may import
ALLOWED = {
    "core": {"core"},
    "pipeline": {"core", "pipeline"},
    "collectors": {"core", "pipeline", "collectors"},
    "analysis": {"core", "pipeline", "analysis"},
    "dashboards": {"core", "pipeline", "analysis", "dashboards"},
    "testbed": {"core", "pipeline", "collectors", "testbed"},
    "sim": {"core", "pipeline", "collectors", "analysis", "dashboards", "testbed", "sim"},
    "cli": {"core", "pipeline", "collectors", "analysis", "dashboards", "testbed", "sim", "cli"},
}


def layer_of(module: str) -> str | None:
    """The layer of a `rocescope...` module name; None for anything else."""
    parts = module.split(".")
    if parts[0] != "rocescope":
        return None
    if len(parts) == 1:
        return "core"
    if parts[1] in ALLOWED and parts[1] != "core":
        return parts[1]
    return "core"


def source_files() -> Iterator[tuple[str, Path]]:
    """(module name, file) of every Python file of the installed package, through pyproject's folder map."""
    for package, folder in PACKAGE_DIRS.items():
        base = ROOT / folder
        for path in sorted(base.rglob("*.py")):
            rel = path.relative_to(base).with_suffix("")
            name = ".".join([package, *rel.parts])
            yield name.removesuffix(".__init__"), path


def imports_of(path: Path, module: str) -> Iterator[tuple[int, str]]:
    """(line, imported module) of every import in the file, relative ones resolved."""
    tree = ast.parse(path.read_text(), str(path))
    package = module if path.name == "__init__.py" else module.rpartition(".")[0]
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            for alias in node.names:
                yield node.lineno, alias.name
        elif isinstance(node, ast.ImportFrom):
            base = node.module or ""
            if node.level:
                anchor = package.split(".")[: len(package.split(".")) - node.level + 1]
                base = ".".join([*anchor, base]) if base else ".".join(anchor)
            yield node.lineno, base
            for alias in node.names:  # `from rocescope import schema` imports the module rocescope.schema
                yield node.lineno, f"{base}.{alias.name}"


def test_layers_point_down_only() -> None:
    problems = []
    for module, path in source_files():
        own = layer_of(module)
        if module.startswith("rocescope.cli"):
            own = "cli"
        assert own is not None
        for line, imported in imports_of(path, module):
            target = layer_of(imported)
            if imported.startswith("rocescope.cli"):
                target = "cli"
            if target is not None and target not in ALLOWED[own]:
                problems.append(f"{path.relative_to(ROOT)}:{line}: {own} imports {imported} ({target})")
    assert not problems, "imports that reach up a layer:\n" + "\n".join(sorted(set(problems)))


def test_every_code_folder_is_a_listed_package() -> None:
    """A folder of code or data missing from `packages` is left out of a wheel, with a warning at every install."""
    listed = set(PYPROJECT["tool"]["setuptools"]["packages"])
    data = PYPROJECT["tool"]["setuptools"]["package-data"]
    found = set()
    for package, folder in PACKAGE_DIRS.items():
        base = ROOT / folder
        for sub in [base, *sorted(p for p in base.rglob("*") if p.is_dir())]:
            if sub.name == "__pycache__" or any(part.startswith(".") for part in sub.relative_to(ROOT).parts):
                continue
            files = [f for f in sub.iterdir() if f.is_file()]
            if not files:
                continue
            name = ".".join([package, *sub.relative_to(base).parts])
            found.add(name)
            if not (sub / "__init__.py").exists():
                assert name in data, f"{sub.relative_to(ROOT)} holds data but is in no package-data entry"
    assert found <= listed, f"folders missing from [tool.setuptools] packages: {sorted(found - listed)}"
    assert listed <= found, f"packages listed without a folder: {sorted(listed - found)}"


@pytest.mark.parametrize(
    ("module", "layer"),
    [("rocescope.schema", "core"), ("rocescope.collectors.gnmi", "collectors"), ("numpy", None)],
)
def test_layer_of(module: str, layer: str | None) -> None:
    assert layer_of(module) == layer
