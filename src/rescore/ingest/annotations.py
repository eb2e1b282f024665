"""Labels and controls the user gives a dump in its config entry, for dumps that carry none.

Real dumps rarely say which kernels are buggy (the gpuemu corpus says it only through a `_buggy`
suffix and free-text notes), so rescore never guesses: the user states it on the dump spec.

    labels: {softmax_llm_buggy: buggy, "_buggy$": buggy, ".*": correct}
    controls: {softmax_llm_buggy: softmax, "^(.+)_buggy$": "\\1"}

A key that is a submission's exact name is a table entry and is used first; every other key is a
regular expression (Python `re.search`), tried in the order written, and the first that matches
wins. A `controls` value may refer to the pattern's groups (`\\1`, `\\g<name>`). What the dump
itself says (a meta.json `label`, a `control` field) always wins; a submission no key matches keeps
its own label, `unknown` when it has none. Each rule used is recorded in the submission's
`extra["label_from"]` / `extra["control_from"]`.
"""

from __future__ import annotations

import re
from dataclasses import replace

from rescore.ingest.common import ingest_error
from rescore.model.records import ALL_LABELS, Submission


class AnnotationError(ValueError):
    """A `labels` or `controls` entry that cannot be used: the message names the dump and the key."""


def _rules(dump: str, key: str, table) -> list[tuple[str, re.Pattern, str]]:
    if not isinstance(table, dict):
        raise AnnotationError(f"dump {dump!r}: `{key}` must map entry names or patterns to values, "
                              f"not {type(table).__name__}")
    rules = []
    for pattern, value in table.items():
        if not isinstance(value, str) or not value:
            raise AnnotationError(f"dump {dump!r}: `{key}` value for {pattern!r} must be a non-empty string")
        if key == "labels" and value not in ALL_LABELS:
            raise AnnotationError(f"dump {dump!r}: `labels` value {value!r} for {pattern!r} is not one of "
                                  f"{', '.join(ALL_LABELS)}")
        try:
            rules.append((str(pattern), re.compile(str(pattern)), value))
        except re.error as exc:
            raise AnnotationError(f"dump {dump!r}: `{key}` key {pattern!r} is neither an entry name nor a "
                                  f"valid regular expression ({exc})") from None
    return rules


def _lookup(name: str, rules: list[tuple[str, re.Pattern, str]], expand: bool) -> tuple[str, str] | None:
    """(value, the key that gave it) for a submission name: its exact name first, then the patterns."""
    for pattern, _, value in rules:
        if pattern == name:
            return value, pattern
    for pattern, regex, value in rules:
        m = regex.search(name)
        if m:
            try:
                return (m.expand(value) if expand else value), pattern
            except (re.error, IndexError) as exc:
                raise AnnotationError(f"`controls` value {value!r} of pattern {pattern!r} does not fit its "
                                      f"match on {name!r} ({exc})") from None
    return None


def annotate(dump: str, spec: dict, subs: list[Submission]) -> list[Submission]:
    """The submissions with the spec's `labels` and `controls` applied where the dump says nothing.

    Raises AnnotationError for a table that cannot be used, and for a control that is not a
    submission of this dump (a misspelt name, or one that an `entries:` filter left out)."""
    labels = _rules(dump, "labels", spec["labels"]) if spec.get("labels") is not None else []
    controls = _rules(dump, "controls", spec["controls"]) if spec.get("controls") is not None else []
    if not labels and not controls:
        return subs
    names = {s.name for s in subs if not ingest_error(s)}
    out = []
    for sub in subs:
        if ingest_error(sub):
            out.append(sub)
            continue
        changes: dict = {}
        extra = dict(sub.extra or {})
        if sub.label == "unknown" and (hit := _lookup(sub.name, labels, expand=False)):
            changes["label"] = hit[0]
            extra["label_from"] = f"config dumps.{dump}.labels[{hit[1]!r}]"
        if not sub.control:
            try:
                hit = _lookup(sub.name, controls, expand=True)
            except AnnotationError as exc:
                raise AnnotationError(f"dump {dump!r}: {exc}") from None
            if hit and hit[0] != sub.name:
                if hit[0] not in names:
                    raise AnnotationError(
                        f"dump {dump!r}: `controls` key {hit[1]!r} names {hit[0]!r} as the control of "
                        f"{sub.name!r}, which is not a submission of this dump; add an exact entry "
                        f"`{sub.name}: <its control>` before the pattern")
                changes["control"] = hit[0]
                extra["control_from"] = f"config dumps.{dump}.controls[{hit[1]!r}]"
        out.append(replace(sub, **changes, extra=extra) if changes else sub)
    return out
