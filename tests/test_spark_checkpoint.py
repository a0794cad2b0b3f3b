"""``barrier_kafka.spark_checkpoint``: the temporary files a crash in a query's first batch leaves
in Spark's offset and commit logs (which make Spark 4.1+ refuse every restart) are found and
removed, and nothing else, and nothing once the offset log holds an entry. Spark itself is in
``integration_tests/test_spark_checkpoint.py``."""

from __future__ import annotations

import os
import uuid

import pytest

from barrier_kafka import spark_checkpoint
from barrier_kafka.spark_checkpoint import clear_dead_first_writes, dead_first_writes


def plant(folder, name: str, text: str = "v1\n{") -> str:
    os.makedirs(folder, exist_ok=True)
    path = os.path.join(folder, name)
    with open(path, "w") as f:
        f.write(text)
    return path


def dead_write(root, log: str = "offsets", batch: int = 0):
    """What a kill between Spark's write of ``<log>/<batch>`` and its rename leaves."""
    tag = uuid.uuid4()
    return [plant(os.path.join(root, log), f".{batch}.{tag}.tmp"),
            plant(os.path.join(root, log), f"..{batch}.{tag}.tmp.crc", "crc")]


def killed_in_first_write(location):
    """What a new query killed in its first offset-log write leaves at ``location``: the
    ``metadata`` Spark wrote at its start, and the dead write of ``offsets/0``
    (:func:`dead_write`, returned)."""
    plant(location, "metadata", '{"id":"%s"}' % uuid.uuid4())
    return dead_write(location)


def kept(root):
    """Files Spark reads, which must survive."""
    return [plant(root, "metadata", '{"id":"q"}'), plant(root, ".metadata.crc", "crc"),
            plant(os.path.join(root, "state", "0", "0"), "1.delta", "state")]


@pytest.mark.parametrize("as_uri", [False, True])
def test_a_crashed_first_write_is_found_and_removed_and_nothing_else(tmp_path, as_uri):
    root = str(tmp_path / "chk")
    dead = dead_write(root) + dead_write(root, "commits")
    others = kept(root)
    location = "file://" + root + "/" if as_uri else root
    assert sorted(dead_first_writes(location)) == sorted(dead)
    assert sorted(clear_dead_first_writes(location)) == sorted(dead)
    assert not any(os.path.exists(p) for p in dead)
    assert all(os.path.exists(p) for p in others)
    assert clear_dead_first_writes(location) == []   # a no-op on the next start


def test_nothing_is_touched_once_the_offset_log_holds_an_entry(tmp_path):
    root = str(tmp_path / "chk")
    entry = plant(os.path.join(root, "offsets"), "0")
    dead = dead_write(root, batch=1)
    assert dead_first_writes(root) == [] and clear_dead_first_writes(root) == []
    assert all(os.path.exists(p) for p in dead + [entry])


def test_a_new_or_missing_location_has_nothing_to_remove(tmp_path):
    assert dead_first_writes(str(tmp_path / "never-started")) == []
    os.makedirs(tmp_path / "empty" / "offsets")
    assert clear_dead_first_writes(str(tmp_path / "empty")) == []


def test_another_file_system_is_left_alone(capsys):
    assert dead_first_writes("s3a://bucket/chk") == []
    assert clear_dead_first_writes("dbfs:/chk") == []
    assert spark_checkpoint.main(["s3a://bucket/chk", "--remove"]) == 2
    assert "not a local folder" in capsys.readouterr().err


def test_the_command_lists_then_removes(tmp_path, capsys):
    root = str(tmp_path / "chk")
    dead = dead_write(root)
    assert spark_checkpoint.main([root]) == 0
    assert capsys.readouterr().out.split() == sorted(dead)
    assert all(os.path.exists(p) for p in dead)
    assert spark_checkpoint.main([root, "--remove"]) == 0
    assert not any(os.path.exists(p) for p in dead)
    assert spark_checkpoint.main([root]) == 0
    assert "none" in capsys.readouterr().err
