"""Generate the option reference pages under ``docs/`` from the option definitions in code.

``python -m barrier_demo.gen_docs`` (re)writes, from

=========================  ==================================================================
``docs/source-options.md``  ``barrier_source.options.SOURCE_OPTIONS`` (the page
                            ``python -m barrier_source.options`` prints)
``docs/sink-options.md``    ``barrier_sink.options`` ``COMMON_SINK_OPTIONS``,
                            ``KAFKA_SINK_OPTIONS``, ``FILE_SINK_OPTIONS``
``docs/operator-options.md`` ``barrier_ops.keyed_process``: signature defaults, the meanings in
                            its docstring, ``barrier_ops.options.option_meanings()``
``docs/s3-options.md``      ``state_backends.registry.S3_OPTIONS``
=========================  ==================================================================

``--check`` writes nothing and exits 1 if a committed page differs from what the code generates.
The unit tests (``tests/docs``) do the same check. Pure text generation; runs anywhere.
"""

from __future__ import annotations

import argparse
import contextlib
import dataclasses
import inspect
import io
import re
import runpy
import sys
import warnings
from pathlib import Path
from typing import Callable, Dict, List, Optional, Tuple

DOCS_DIR = Path(__file__).resolve().parent.parent / "docs"
_DEFAULT_IN_TEXT = re.compile(r"\s*\(default ([^)]+)\)")
_RST_ROLE = re.compile(r":[a-z]+:`~?(?:[\w.]+\.)?([\w]+)`")


def _rst_to_markdown(text: str) -> str:
    """``code`` -> `code`; :class:`~pkg.mod.Name` -> `Name`."""
    return _RST_ROLE.sub(r"`\1`", text).replace("``", "`")


def _table(rows: List[Tuple[str, str, str]]) -> str:
    out = ["| Option | Default | Meaning |", "|---|---|---|"]
    out += [f"| {name} | {default} | {meaning.replace('|', '/')} |" for name, default, meaning
            in rows]
    return "\n".join(out)


def source_options_page() -> str:
    """Exactly what ``python -m barrier_source.options`` prints (the one source of that page)."""
    buf = io.StringIO()
    with warnings.catch_warnings(), contextlib.redirect_stdout(buf):
        warnings.simplefilter("ignore", RuntimeWarning)  # runpy: module already imported
        runpy.run_module("barrier_source.options", run_name="__main__")
    return buf.getvalue()


def sink_options_page() -> str:
    from barrier_core.option_spec import options_markdown
    from barrier_sink.options import (COMMON_SINK_OPTIONS, FILE_SINK_OPTIONS, KAFKA_SINK_OPTIONS,
                                      SPARK_ADDED)

    return "\n".join([
        "# barrier-kafka sink options",
        "",
        "Generated from `barrier_sink.options` (`COMMON_SINK_OPTIONS`, `KAFKA_SINK_OPTIONS`, "
        "`FILE_SINK_OPTIONS`) by `python -m barrier_demo.gen_docs`; do not edit by hand. Names "
        "are case-insensitive; an unknown option fails the query at start, naming the closest "
        f"valid one. Spark's own {', '.join(f'`{n}`' for n in SPARK_ADDED)} are accepted as "
        "well (`checkpointLocation` is required unless `checkpoint.storage` is set).",
        "",
        "## Both sinks",
        "",
        "`writeStream.format(\"barrier-kafka\")` and `writeStream.format(\"barrier-files\")`.",
        "",
        options_markdown(COMMON_SINK_OPTIONS),
        "",
        "## Exactly-once Kafka sink: `barrier-kafka`",
        "",
        "Rows need a `value` column (string or binary) and may have `key`, `topic`, `partition` "
        "and `headers`, as in Spark's Kafka sink.",
        "",
        options_markdown(KAFKA_SINK_OPTIONS),
        "",
        "## Exactly-once Parquet file sink: `barrier-files`",
        "",
        options_markdown(FILE_SINK_OPTIONS),
        "",
    ])


def _numpydoc_parameters(doc: str) -> Dict[str, str]:
    """``{name: one-line meaning}`` from the ``Parameters`` section of a numpydoc docstring."""
    lines = inspect.cleandoc(doc or "").splitlines()
    out: Dict[str, str] = {}
    try:
        start = lines.index("Parameters") + 2
    except ValueError:
        return out
    name: Optional[str] = None
    body = lines[start:]
    for i, line in enumerate(body):
        if line and not line.startswith(" "):
            following = body[i + 1].strip() if i + 1 < len(body) else ""
            if following and set(following) == {"-"}:  # the next section's title
                break
            name = line.split(":", 1)[0].strip()
            out[name] = ""
        elif name and line.strip():
            out[name] = (out[name] + " " + line.strip()).strip()
    return {k: _rst_to_markdown(v) for k, v in out.items() if v}


def operator_options() -> List[Tuple[str, str, str]]:
    """``(name, default, meaning)`` of every ``keyed_process`` parameter."""
    from barrier_ops.operator import keyed_process
    from barrier_ops.options import OperatorOptions, option_meanings

    meanings = dict(_numpydoc_parameters(keyed_process.__doc__))
    meanings.update(option_meanings())
    fields = {f.name for f in dataclasses.fields(OperatorOptions)}
    rows = []
    for p in inspect.signature(keyed_process).parameters.values():
        if p.default is inspect.Parameter.empty:
            default = "(required)"
        elif p.default is None:
            default = ""
        else:
            default = f"`{p.default!r}`" if isinstance(p.default, str) else f"`{p.default}`"
        meaning = meanings.get(p.name)
        if meaning is None:
            raise ValueError(f"keyed_process parameter {p.name!r} has no meaning: describe it in "
                             "its docstring or in barrier_ops.options.option_meanings()")
        if p.name in fields:
            meaning += " (`OperatorOptions." + p.name + "`)"
        rows.append((f"`{p.name}`", default, meaning))
    return rows


def operator_options_page() -> str:
    from barrier_ops.options import MODES

    return "\n".join([
        "# Keyed operator options: `barrier_ops.keyed_process`",
        "",
        "Generated from the signature and docstring of `barrier_ops.keyed_process` and "
        "`barrier_ops.options.option_meanings()` by `python -m barrier_demo.gen_docs`; do not "
        "edit by hand. They are validated once on the driver (`barrier_ops.OperatorOptions`); "
        "an invalid value fails when the query is built.",
        "",
        "```python",
        "from barrier_ops import keyed_process",
        "",
        "out = keyed_process(df, \"key\", fn, \"key string, count long\",",
        "                    operator_id=\"counts\", state_backend=\"s3://bucket/chk\",",
        "                    max_parallelism=128, mode=\"exactly_once\")",
        "```",
        "",
        _table(operator_options()),
        "",
        f"`mode` is one of {', '.join(f'`{m}`' for m in MODES)}. `operator_id` and "
        "`max_parallelism` name and shape the snapshots: keep both unchanged across restarts "
        "and restores.",
        "",
    ])


def s3_options() -> List[Tuple[str, str, str]]:
    from state_backends.registry import S3_OPTIONS

    rows = []
    for name, meaning in S3_OPTIONS.items():
        m = _DEFAULT_IN_TEXT.search(meaning)
        default = f"`{m.group(1)}`" if m else ""
        text = _DEFAULT_IN_TEXT.sub("", meaning)
        rows.append((f"`{name}`", default, text[:1].upper() + text[1:] + "."))
    return rows


def s3_options_page() -> str:
    return "\n".join([
        "# S3 options",
        "",
        "Generated from `state_backends.registry.S3_OPTIONS` by `python -m barrier_demo.gen_docs`;"
        " do not edit by hand.",
        "",
        "They apply wherever an `s3://bucket/prefix` location is used: the state backend "
        "(`checkpoint.storage` of the source and the sinks, `state_backend` of `keyed_process` "
        "via `state_backend_options`), the `path` of the `barrier-files` sink, and the command "
        "line (`python -m state_backends stats s3://... -o s3.endpoint=...`). Names are "
        "case-insensitive; an unknown `s3.*` option fails naming the supported ones. Without "
        "credentials options boto3's default chain is used (instance profile, environment, "
        "`~/.aws`), which is the recommended way on a cluster. Secret values are never logged.",
        "",
        _table(s3_options()),
        "",
    ])


#: docs file name -> generator of its text
PAGES: Dict[str, Callable[[], str]] = {
    "source-options.md": source_options_page,
    "sink-options.md": sink_options_page,
    "operator-options.md": operator_options_page,
    "s3-options.md": s3_options_page,
}


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(prog="python -m barrier_demo.gen_docs",
                                     description="write docs/*-options.md from the code")
    parser.add_argument("--docs-dir", default=str(DOCS_DIR))
    parser.add_argument("--check", action="store_true",
                        help="write nothing; exit 1 if a page is out of date")
    args = parser.parse_args(argv)
    stale = []
    for name, generate in PAGES.items():
        path = Path(args.docs_dir) / name
        text = generate()
        current = path.read_text() if path.exists() else None
        if current == text:
            continue
        stale.append(name)
        if not args.check:
            path.write_text(text)
            print(f"wrote {path}")
    if args.check and stale:
        print(f"out of date: {', '.join(stale)} (run python -m barrier_demo.gen_docs)",
              file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
