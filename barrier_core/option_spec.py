"""Machine-readable option specs shared by the source and the sinks (pure data, runs anywhere).

Every component lists its options as ``OptionSpec`` values; the docs tables are generated from
those lists (:func:`options_markdown`) and unknown options are rejected against them
(:func:`check_known_options`) with the closest valid name in the message.
"""

from __future__ import annotations

import difflib
import re
from dataclasses import dataclass
from typing import Any, Iterable, List, Mapping, Optional, Sequence, Tuple, Type

from barrier_core.exceptions import InvalidOptionError

#: Substrings of option names whose values are secrets: never in repr, logs or errors.
SECRET_MARKERS = ("password", "secret", "jaas", "token", "credential", "access.key",
                  "secret.key", "sasl.plain")

_DURATION = re.compile(r"^\s*(\d+(?:\.\d+)?)\s*(ms|milli|millis|s|sec|secs|second|seconds|m|min|"
                       r"mins|minute|minutes|h|hour|hours|d|day|days)?\s*$", re.IGNORECASE)
_UNIT_MS = {"ms": 1, "milli": 1, "millis": 1, "s": 1000, "sec": 1000, "secs": 1000,
            "second": 1000, "seconds": 1000, "m": 60_000, "min": 60_000, "mins": 60_000,
            "minute": 60_000, "minutes": 60_000, "h": 3_600_000, "hour": 3_600_000,
            "hours": 3_600_000, "d": 86_400_000, "day": 86_400_000, "days": 86_400_000}


@dataclass(frozen=True)
class OptionSpec:
    """One option: its exact name, default (as the user would type it), meaning and type.

    ``is_prefix`` marks a family such as ``kafka.*`` (any name starting with ``name``).
    ``is_secret`` marks values that must never be printed. ``kind`` is how :func:`read_option`
    parses the value: ``str``, ``int`` (at least ``minimum``), ``bool``, ``duration`` (ms) or
    ``choice`` (one of ``choices``, case-insensitive). The default is parsed the same way, so
    it is written once, here, for the docs and the parser alike.
    """

    name: str
    default: Optional[str]
    meaning: str
    is_secret: bool = False
    is_prefix: bool = False
    is_required: bool = False
    kind: str = "str"
    minimum: int = 0
    choices: Tuple[str, ...] = ()

    def matches(self, key: str) -> bool:
        """Case-insensitive (Spark lower-cases option names)."""
        key, name = key.lower(), self.name.lower()
        return key.startswith(name) if self.is_prefix else key == name


def is_secret_key(key: str) -> bool:
    """True when the value of option ``key`` must not be printed (passwords, JAAS configs...)."""
    lowered = key.lower()
    return any(marker in lowered for marker in SECRET_MARKERS)


def redact(options: Mapping[str, object]) -> dict:
    """Copy of ``options`` with secret values replaced by ``'***'`` (safe to log)."""
    return {k: ("***" if is_secret_key(k) else v) for k, v in options.items()}


def closest_name(key: str, specs: Iterable[OptionSpec]) -> Optional[str]:
    """The valid option name most similar to ``key`` (case-insensitive), or None."""
    names = [s.name + ("<name>" if s.is_prefix else "") for s in specs]
    lowered = {n.lower(): n for n in names}
    for n_low, n in lowered.items():
        if key.lower() == n_low:
            return n
    match = difflib.get_close_matches(key.lower(), list(lowered), n=1, cutoff=0.6)
    return lowered[match[0]] if match else None


def check_known_options(options: Mapping[str, object], specs: Sequence[OptionSpec],
                        component: str, ignore: Iterable[str] = (),
                        error: Type[Exception] = InvalidOptionError) -> None:
    """Raise ``error`` naming the first option not covered by ``specs`` and the closest valid one.

    ``ignore`` lists names Spark itself adds (e.g. ``path``, ``checkpointLocation``).
    """
    ignored = {i.lower() for i in ignore}
    for key in options:
        if key.lower() in ignored or any(s.matches(key) for s in specs):
            continue
        hint = closest_name(key, specs)
        suggestion = f" Did you mean '{hint}'?" if hint else ""
        raise error(f"Unknown {component} option '{key}'.{suggestion} "
                    f"Valid options: {', '.join(s.name + ('*' if s.is_prefix else '') for s in specs)}.")


def parse_duration_ms(name: str, value: str, error: Type[Exception] = InvalidOptionError) -> int:
    """Parse ``"500"`` (ms), ``"10s"``, ``"5 min"``, ``"15m"``, ``"1h"`` into milliseconds."""
    m = _DURATION.match(str(value))
    if not m:
        raise error(f"Option '{name}' must be a duration such as '500' (ms), '10s', '5 min' or "
                    f"'1h'; got '{value}'.")
    number, unit = float(m.group(1)), (m.group(2) or "ms").lower()
    return int(number * _UNIT_MS[unit])


def read_option(specs: Sequence[OptionSpec], options: Mapping[str, str], name: str,
                error: Type[Exception] = InvalidOptionError) -> Any:
    """The value of option ``name`` in ``options`` (keys lower-cased, as Spark passes them), or
    its spec's default, parsed by the spec's ``kind``. None when neither is set. Raises
    ``error`` naming the option and what it expects (never a secret value)."""
    spec = next((s for s in specs if s.name == name and not s.is_prefix), None)
    if spec is None:
        raise KeyError(f"bug: no option spec named {name!r}")
    raw = options.get(name.lower())
    if raw is None or (raw.strip() == "" and spec.kind != "str"):
        raw = spec.default
    if raw is None:
        return None
    text = raw.strip()
    shown = "***" if spec.is_secret or is_secret_key(name) else raw
    if spec.kind == "str":
        return text
    if spec.kind == "bool":
        if text.lower() not in ("true", "false"):
            raise error(f"Option '{name}' must be 'true' or 'false'; got '{shown}'.")
        return text.lower() == "true"
    if spec.kind == "duration":
        return parse_duration_ms(name, text, error)
    if spec.kind == "choice":
        if text.lower() not in spec.choices:
            quoted = [f"'{c}'" for c in spec.choices]
            allowed = ", ".join(quoted[:-1]) + " or " + quoted[-1] if len(quoted) > 1 \
                else quoted[0]
            raise error(f"Option '{name}' must be {allowed}; got '{shown}'.")
        return text.lower()
    try:
        value = int(text)
    except ValueError:
        raise error(f"Option '{name}' must be an integer; got '{shown}'.") from None
    if value < spec.minimum:
        raise error(f"Option '{name}' must be >= {spec.minimum}; got {value}.")
    return value


def options_markdown(specs: Sequence[OptionSpec]) -> str:
    """A Markdown table (name | default | meaning) for the docs."""
    rows = ["| Option | Default | Meaning |", "|---|---|---|"]
    for s in specs:
        name = f"`{s.name}*`" if s.is_prefix else f"`{s.name}`"
        default = "(required)" if s.is_required else ("" if s.default is None else f"`{s.default}`")
        rows.append(f"| {name} | {default} | {s.meaning.replace('|', '/')} |")
    return "\n".join(rows)


def spec_names(specs: Sequence[OptionSpec]) -> List[str]:
    return [s.name for s in specs]
