"""Issue 13: the file sink's ``_manifests/`` stays bounded however many checkpoints publish, and
readers of the manifests still see every published file exactly once."""

from __future__ import annotations

import os

from barrier_sink.file_sink import MANIFEST_COMPACT_INTERVAL, FileSinkCommitter, published_files
from barrier_sink.file_store import LocalFileStore


def test_manifests_are_compacted_and_readers_see_every_file(tmp_path):
    out = str(tmp_path / "out")
    committer = FileSinkCommitter(None, None, LocalFileStore(out))
    expected = []
    for n in range(1, 96):
        finals = [f"part-b{n}-p{p}-e{n}.parquet" for p in range(2)]
        expected += finals
        committer.after_commit(n, [{"final": f} for f in finals])
        manifests = os.listdir(os.path.join(out, "_manifests"))
        assert len(manifests) <= MANIFEST_COMPACT_INTERVAL
        assert sorted(published_files(out)) == sorted(os.path.join(out, f) for f in expected)
    assert any(m.startswith("compact-") for m in manifests)
    # a replayed commit forward of an already compacted checkpoint changes nothing visible
    committer.after_commit(90, [{"final": f"part-b90-p{p}-e90.parquet"} for p in range(2)])
    assert sorted(published_files(out)) == sorted(os.path.join(out, f) for f in expected)
