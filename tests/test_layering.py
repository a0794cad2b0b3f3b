"""The packages form one stack (issue 11): every import, at module level or inside a function,
goes from a package to one below it (or within it), so there is no cycle and no function-level
import dodging one. The order is the one README's layout table gives."""

from __future__ import annotations

import ast
import os

import pytest

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
#: Lowest first: a package may import the ones before it in this list.
LAYERS = ["barrier_core", "state_backends", "barrier_coordinator", "barrier_source", "barrier_ops",
          "barrier_sink", "barrier_kafka", "kafka_harness", "barrier_demo"]


def project_imports(package: str):
    """``(file, line, imported top-level package)`` of every project import in ``package``."""
    for root, _, files in os.walk(os.path.join(ROOT, package)):
        for name in files:
            if not name.endswith(".py"):
                continue
            path = os.path.join(root, name)
            with open(path, encoding="utf-8") as f:
                tree = ast.parse(f.read(), path)
            for node in ast.walk(tree):
                if isinstance(node, ast.Import):
                    targets = [a.name for a in node.names]
                elif isinstance(node, ast.ImportFrom) and node.level == 0 and node.module:
                    targets = [node.module]
                else:
                    continue
                for target in targets:
                    top = target.split(".")[0]
                    if top in LAYERS:
                        yield os.path.relpath(path, ROOT), node.lineno, top


def test_every_library_package_is_in_the_stack():
    packages = {d for d in os.listdir(ROOT) if os.path.isfile(os.path.join(ROOT, d, "__init__.py"))}
    assert packages - {"tests", "integration_tests", "benchmarks", "notebooks"} == set(LAYERS)


@pytest.mark.parametrize("package", LAYERS)
def test_imports_only_flow_downward(package):
    level = LAYERS.index(package)
    upward = [f"{path}:{line} imports {top}" for path, line, top in project_imports(package)
              if LAYERS.index(top) > level]
    assert upward == [], "imports from a lower layer to a higher one:\n" + "\n".join(upward)


def test_the_protocol_vocabulary_imports_nothing_of_the_project():
    assert [i for i in project_imports("barrier_core") if i[2] != "barrier_core"] == []
