"""bench_batch_planning.summarize: medians over batches' planning-tracker samples (plain data;
the benchmark itself needs a broker and a session)."""

from __future__ import annotations

import math

from benchmarks.bench_batch_planning import ENCODER_RULE, ITERATION_RULE, summarize


def _sample(analysis, optimization, planning, rules):
    return {"phases": {"analysis": analysis, "optimization": optimization, "planning": planning},
            "rules": rules}


def test_phases_iterations_and_encoders_are_medians_over_batches():
    samples = [
        _sample(5, 20, 30, {ITERATION_RULE: [1.0, 15, 0], ENCODER_RULE: [2.0, 15, 7],
                            "EnsureRequirements": [6.0, 1, 1]}),
        _sample(7, 22, 28, {ITERATION_RULE: [1.5, 15, 0], ENCODER_RULE: [2.5, 15, 7],
                            "EnsureRequirements": [4.0, 1, 1]}),
        _sample(9, 30, 40, {ITERATION_RULE: [0.5, 1, 0], ENCODER_RULE: [0.1, 1, 0],
                            "EnsureRequirements": [5.0, 1, 1]}),
    ]
    s = summarize(samples, top=2)
    assert (s["analysis"], s["optimization"], s["planning"]) == (7, 22, 30)
    assert s["analyzer iter"] == 15
    assert s["encoders"] == 7
    assert s["rules ms"] == 8.0            # per batch 9.0, 8.0, 5.6
    assert s["top"] == [("EnsureRequirements", 5.0), (ENCODER_RULE, 2.0)]
    assert s["batches"] == 3


def test_a_rule_or_phase_a_batch_did_not_run_counts_as_zero_there():
    samples = [_sample(4, 10, 10, {"CollapseCodegenStages": [3.0, 1, 1]}),
               {"phases": {"analysis": 2}, "rules": {}},
               {"phases": {"analysis": 6}, "rules": {}}]
    s = summarize(samples)
    assert s["optimization"] == 0
    assert s["encoders"] == 0 and s["analyzer iter"] == 0
    assert s["top"] == [("CollapseCodegenStages", 0.0)]


def test_no_batches_summarize_to_not_measured():
    s = summarize([])
    assert math.isnan(s["analysis"]) and math.isnan(s["encoders"])
    assert s["top"] == [] and s["batches"] == 0
