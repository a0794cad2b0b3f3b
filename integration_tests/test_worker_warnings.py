"""The keyed operator's Python workers do not fill the pipeline's log with PySpark's FutureWarning
about its own state padding (pyspark/worker.py concatenates the group-state frame with all-NA
rows; pandas 2.1+ warned once per output chunk of every batch), while a user's function that
raises the same warning from its own code still gets it."""

from __future__ import annotations

import os
import uuid

from integration_tests.pipeline_support import assert_exactly_once, produce_input, run_pipeline

PADDING_WARNING = "The behavior of DataFrame concatenation with empty or all-NA entries"
RECORDS = 6_000


def test_a_pipeline_log_has_no_state_padding_warning(bootstrap, kafka_admin, topic_factory,
                                                      tmp_path):
    topic = produce_input(kafka_admin, bootstrap, RECORDS, 97)
    output = topic_factory(2, prefix="warn_out")
    workdir = str(tmp_path)
    group, prefix = f"warn-{uuid.uuid4().hex[:6]}", f"warn-{uuid.uuid4().hex[:6]}"
    rc = run_pipeline(bootstrap, topic, output, workdir, group, prefix,
                      max_offsets_per_trigger=1_500)
    assert rc == 0, f"pipeline failed (exit {rc}); see {workdir}/run.log"
    assert_exactly_once(bootstrap, topic, output, workdir, group, prefix, RECORDS)
    with open(os.path.join(workdir, "run.log"), encoding="utf-8", errors="replace") as log:
        lines = [line for line in log if PADDING_WARNING in line]
    assert lines == []


def test_the_same_warning_from_other_code_is_still_shown(recwarn):
    import pandas as pd

    import barrier_ops.key_group_state  # noqa: F401 - installs the filter

    # As PySpark's padding does: an output frame with a timestamp column and an empty one.
    pd.concat([pd.DataFrame({"t": pd.to_datetime([0])}), pd.DataFrame(dict.fromkeys(["t"]),
                                                                        index=[])])
    assert any(PADDING_WARNING in str(w.message) for w in recwarn.list)
