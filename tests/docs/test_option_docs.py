"""The option reference pages in docs/ are generated from the code and match it: regenerating a
page in memory gives the committed file, and every option defined in code is documented."""

from __future__ import annotations

import dataclasses
import inspect
import re
from pathlib import Path

import pytest

from barrier_demo import gen_docs

DOCS = Path(__file__).resolve().parents[2] / "docs"
DOCUMENTED = re.compile(r"^\| `([^`]+)` \|", re.MULTILINE)


def documented(page: str) -> set:
    """Option names in the first column of the page's tables (``kafka.*`` stays ``kafka.*``)."""
    return set(DOCUMENTED.findall((DOCS / page).read_text()))


def spec_names(specs) -> set:
    return {s.name + ("*" if s.is_prefix else "") for s in specs}


@pytest.mark.parametrize("page", sorted(gen_docs.PAGES))
def test_committed_page_equals_regenerated(page):
    path = DOCS / page
    assert path.exists(), f"{page} missing: run python -m barrier_demo.gen_docs"
    assert path.read_text() == gen_docs.PAGES[page](), \
        f"docs/{page} is out of date: run python -m barrier_demo.gen_docs"


def test_source_page_holds_the_source_option_table():
    from barrier_core.option_spec import options_markdown
    from barrier_source.options import SOURCE_OPTIONS

    assert options_markdown(SOURCE_OPTIONS) in gen_docs.source_options_page()


def test_every_source_option_is_documented():
    from barrier_source.options import SOURCE_OPTIONS

    assert spec_names(SOURCE_OPTIONS) == documented("source-options.md")


def test_every_sink_option_is_documented():
    from barrier_sink.options import COMMON_SINK_OPTIONS, FILE_SINK_OPTIONS, KAFKA_SINK_OPTIONS

    code = spec_names(COMMON_SINK_OPTIONS + KAFKA_SINK_OPTIONS + FILE_SINK_OPTIONS)
    assert code == documented("sink-options.md")


def test_every_operator_option_is_documented():
    from barrier_ops.operator import keyed_process
    from barrier_ops.options import OperatorOptions

    docs = documented("operator-options.md")
    assert {f.name for f in dataclasses.fields(OperatorOptions)} <= docs
    assert set(inspect.signature(keyed_process).parameters) == docs


def test_every_s3_option_is_documented():
    from state_backends.registry import S3_OPTIONS

    assert set(S3_OPTIONS) == documented("s3-options.md")


def test_defaults_in_docs_match_the_code():
    from barrier_sink.options import COMMON_SINK_OPTIONS, KAFKA_SINK_OPTIONS

    text = (DOCS / "sink-options.md").read_text()
    for spec in COMMON_SINK_OPTIONS + KAFKA_SINK_OPTIONS:
        if spec.default is not None and not spec.is_prefix:
            assert f"| `{spec.name}` | `{spec.default}` |" in text, spec.name
    ops = (DOCS / "operator-options.md").read_text()
    from barrier_ops.keygroups import DEFAULT_MAX_PARALLELISM

    assert f"| `max_parallelism` | `{DEFAULT_MAX_PARALLELISM}` |" in ops
    assert "| `s3.read.timeout.ms` | `60000` |" in (DOCS / "s3-options.md").read_text()


def test_an_undocumented_option_is_caught(monkeypatch):
    """The generator refuses a keyed_process parameter nobody described."""
    from barrier_ops import options

    monkeypatch.setattr(options, "option_meanings", lambda: {})
    with pytest.raises(ValueError, match="restore_requires_complete"):
        gen_docs.operator_options()


def test_check_mode_reports_a_stale_page(tmp_path):
    for name, generate in gen_docs.PAGES.items():
        (tmp_path / name).write_text(generate())
    assert gen_docs.main(["--docs-dir", str(tmp_path), "--check"]) == 0
    (tmp_path / "s3-options.md").write_text("stale\n")
    assert gen_docs.main(["--docs-dir", str(tmp_path), "--check"]) == 1
    assert (tmp_path / "s3-options.md").read_text() == "stale\n"  # --check writes nothing
