"""The cause x bug-class table: each confirmed cause against the bug class of the kernels it lands on.

A cause is right when the kernel's bug class is one the cause explains (`cause_classes.yaml`,
`explains`). Bug classes come from the submissions table (the built-in corpus's entries.yaml), or,
for a dump that describes its bugs in prose, from the class its description names (`notes`). Per
dump and cause: how many flagged kernels got it (the illusion table's kernel-level `cause`) and how
many failing cases named it, by label and bug class; and the cause's precision, over the kernels whose
correctness is known (controls, and buggy kernels with a class): the share of them whose class the
cause explains. A flagged kernel without a cause is counted under NO_CAUSE (how often none holds).
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

import pandas as pd
import yaml

from rescore.analysis.study import evaluation_fuzz, wilson
from rescore.model.outcomes import FLAGGING, FuzzVerdict

CLASSES_FILE = Path(__file__).with_name("cause_classes.yaml")
NO_CAUSE = "none"  # the cause column of flagged kernels (and failing cases) that no experiment explained
CONTROL = "correct"  # the label of a control


@dataclass(frozen=True)
class CauseClasses:
    """What each cause explains, and the bug classes a dump's notes name."""

    explains: dict[str, frozenset[str]]
    notes: tuple[tuple[str, str, str], ...]  # (submission name, excerpt of its description, bug class)


def load_classes(path: str | Path = CLASSES_FILE) -> CauseClasses:
    """The classes file (`cause_classes.yaml`); a malformed one raises a ValueError naming it."""
    try:
        data = yaml.safe_load(Path(path).read_text(encoding="utf-8"))
        explains = {str(c): frozenset(map(str, classes)) for c, classes in data["explains"].items()}
        notes = tuple((str(n["name"]), str(n["excerpt"]), str(n["bug_class"])) for n in data.get("notes") or [])
    except (OSError, yaml.YAMLError, KeyError, TypeError, AttributeError) as exc:
        raise ValueError(f"{path}: not a cause classes file ({type(exc).__name__}: {exc}); it needs `explains: "
                         "{cause: [bug_class, ...]}` and may have `notes: [{name, excerpt, bug_class}]`") from exc
    return CauseClasses(explains, notes)


def bug_classes(submissions: pd.DataFrame, classes: CauseClasses) -> pd.DataFrame:
    """submission_id, label, bug_class, class_source: the submission's own bug class (`entries`), else
    the one its description names (`notes`), else none."""
    rows = []
    for sub in submissions.to_dict("records"):
        own = sub.get("bug_class")
        source = "entries" if isinstance(own, str) and own else None
        if source is None:
            text = sub.get("description") if isinstance(sub.get("description"), str) else ""
            own = next((c for name, excerpt, c in classes.notes if sub.get("name") == name and excerpt in text), None)
            source = "notes" if own else None
        rows.append({"submission_id": sub["submission_id"], "label": sub.get("label"), "bug_class": own,
                     "class_source": source})
    return pd.DataFrame(rows, columns=["submission_id", "label", "bug_class", "class_source"])


def causes_table(illusion: pd.DataFrame, cases: pd.DataFrame, submissions: pd.DataFrame,
                 classes: CauseClasses) -> pd.DataFrame:
    """One row per (dump, cause, label, bug class) seen on a flagged kernel or a failing case; see the
    module's docstring."""
    known = bug_classes(submissions, classes).set_index("submission_id")
    kernels = illusion[illusion["fuzz_verdict"] == FuzzVerdict.FLAGGED][["submission_id", "dump", "cause"]]
    kernels = kernels.join(known, on="submission_id")
    dumps = submissions.drop_duplicates("submission_id").set_index("submission_id")["dump"]
    failing = evaluation_fuzz(cases) if len(cases) else cases
    failing = failing[failing["outcome"].isin(FLAGGING)][["submission_id", "cause"]]
    failing = failing.join(known, on="submission_id").assign(dump=failing["submission_id"].map(dumps))
    keys = ["dump", "cause", "label", "bug_class"]
    counted = []
    for frame, column in ((kernels, "kernels"), (failing, "cases")):
        frame = frame.assign(cause=frame["cause"].where(frame["cause"].fillna("").ne(""), NO_CAUSE))
        counted.append(frame.fillna({"label": "", "bug_class": ""}).groupby(keys).size().rename(column))
    table = pd.concat(counted, axis=1).fillna(0).astype(int).reset_index()
    sources = known.dropna(subset=["bug_class"]).drop_duplicates("bug_class").set_index("bug_class")["class_source"]
    table["class_source"] = table["bug_class"].map(sources)
    table["explained"] = [
        None if cause == NO_CAUSE else bool(cls in classes.explains.get(cause, ()))
        for cause, cls in zip(table["cause"], table["bug_class"])
    ]
    judged = table["label"].eq(CONTROL) | table["bug_class"].ne("")  # correctness known: a control, or a class
    table = table.replace({"label": {"": None}, "bug_class": {"": None}})
    for level in ("kernels", "cases"):
        in_cause = table.assign(n=table[level].where(judged, 0),
                                k=table[level].where(judged & table["explained"].eq(True), 0))
        sums = in_cause.groupby(["dump", "cause"])[["n", "k"]].transform("sum")
        prefix = "" if level == "kernels" else "case_"
        table[f"{prefix}judged"] = sums["n"]
        table[f"{prefix}precision"] = (sums["k"] / sums["n"]).where(sums["n"] > 0)
        if level == "kernels":
            bounds = [wilson(int(k), int(n)) for k, n in zip(sums["k"], sums["n"])]
            table["precision_low"] = [lo for lo, _ in bounds]
            table["precision_high"] = [hi for _, hi in bounds]
    none = table["cause"] == NO_CAUSE
    for column in ("judged", "precision", "precision_low", "precision_high", "case_judged", "case_precision"):
        table.loc[none, column] = None
    return table.sort_values(["dump", "cause", "label", "bug_class"], na_position="last").reset_index(drop=True)


def precision_summary(table: pd.DataFrame) -> pd.DataFrame:
    """Per dump and cause: kernels judged and precision (kernel and case level), one row each."""
    columns = ["dump", "cause", "judged", "precision", "precision_low", "precision_high", "case_judged",
               "case_precision"]
    return table[table["cause"] != NO_CAUSE][columns].drop_duplicates(["dump", "cause"]).reset_index(drop=True)
