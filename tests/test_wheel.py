"""The wheel a Databricks notebook installs with ``%pip install <path>.whl`` (docs/databricks.md):
built with ``python -m build`` (sdist, then the wheel from the sdist, as a release would), it holds
every package users import and nothing of the tests, pins PySpark to the versions CI tests, and
its packages import from the wheel alone."""

from __future__ import annotations

import configparser
import os
import subprocess
import sys
import zipfile
from pathlib import Path

import pytest

from kafka_harness.pyspark_versions import COMPAT_VERSIONS

ROOT = Path(__file__).resolve().parents[1]


def declared_packages():
    cfg = configparser.ConfigParser()
    cfg.read(ROOT / "setup.cfg")
    return sorted({line.strip().split(".")[0] for line in
                   cfg["options.packages.find"]["include"].split() if line.strip()})


@pytest.fixture(scope="module")
def wheel(tmp_path_factory):
    out = tmp_path_factory.mktemp("dist")
    done = subprocess.run([sys.executable, "-m", "build", "--outdir", str(out), str(ROOT)],
                          capture_output=True, text=True, timeout=600)
    assert done.returncode == 0, (done.stdout + done.stderr)[-3000:]
    wheels = list(out.glob("barrier_kafka-*-py3-none-any.whl"))
    assert len(wheels) == 1, os.listdir(out)
    return wheels[0]


def test_the_wheel_holds_the_packages_and_no_tests(wheel):
    names = zipfile.ZipFile(wheel).namelist()
    tops = {n.split("/")[0] for n in names if not n.split("/")[0].endswith(".dist-info")}
    assert tops == set(declared_packages())
    assert "kafka_harness/pom.xml" in names  # the broker harness resolves its jars with it
    assert not [n for n in names if n.startswith(("tests/", "integration_tests/", "notebooks/"))]


def test_the_wheel_pins_pyspark_to_the_tested_versions(wheel):
    metadata = zipfile.ZipFile(wheel).read(
        next(n for n in zipfile.ZipFile(wheel).namelist() if n.endswith("METADATA"))).decode()
    pin = next(line for line in metadata.splitlines() if line.startswith("Requires-Dist: pyspark"))
    oldest = min(COMPAT_VERSIONS, key=lambda v: tuple(int(x) for x in v.split(".")))
    assert f">={oldest}" in pin and "<4.4" in pin, pin


def test_the_packages_import_from_the_wheel_alone(wheel, tmp_path):
    zipfile.ZipFile(wheel).extractall(tmp_path / "site")
    code = ("import sys; sys.path.insert(0, sys.argv[1]); import importlib; "
            "mods = [importlib.import_module(m) for m in sys.argv[2:]]; "
            "print(all(m.__file__.startswith(sys.argv[1]) for m in mods)); "
            "import barrier_kafka; print(callable(barrier_kafka.run_available_now))")
    done = subprocess.run([sys.executable, "-c", code, str(tmp_path / "site"),
                           *declared_packages()], capture_output=True, text=True, timeout=120,
                          cwd=str(tmp_path))
    assert done.returncode == 0, done.stderr[-3000:]
    assert done.stdout.split() == ["True", "True"]
