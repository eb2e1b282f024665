"""compute-sanitizer's log (`--log-file`) read into diagnoses that keep the sanitizer's own lines.

Every line the sanitizer writes starts with its prefix `=========`; lines without it are the
program's own output. An error report is a headline (`Invalid __global__ write of size 4 bytes`,
`Error: Race reported between ...`, `Barrier error detected ...`) followed by indented lines
(where, which thread, which address) and ended by a bare prefix line. Besides its reports the
sanitizer writes notes about the program (`Error: process didn't terminate successfully` when it
was killed by a signal, `Target application returned an error` when it exited non-zero, `Error:
Target application terminated before first instrumented API call` when it never used CUDA) and,
once the program has ended, its summary (`ERROR SUMMARY: N errors`, racecheck's `RACECHECK SUMMARY:
N hazards displayed (E errors, W warnings)`). A log with no summary is a run that did not finish:
the sanitizer itself was stopped before the program it watched had ended.
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field

# Kernels of the libraries the harness itself runs (its reference, copies, fills): reported, but
# marked, since they are not the submission's own code.
_LIBRARY_KERNEL = re.compile(r"^(void\s+)?(at::|c10::|cub::|thrust::|cutlass::|cudnn|cublas|cutlass_|sm\d+_xmma|"
                             r"ampere_|hopper_|volta_|nvjet)")
_PREFIX = re.compile(r"^=========( ?)(.*)$")
_SUMMARY = re.compile(r"^(ERROR SUMMARY|RACECHECK SUMMARY|LEAK SUMMARY):")
_BACKTRACE = re.compile(r"^(Saved host backtrace|Host Frame|Device Frame)")
_HAZARDS = re.compile(r"\[([\d,]+) hazards?\]")
# What the sanitizer says about the program rather than about a kernel: never a finding.
_NOTES = (
    "Error: process didn't terminate successfully",
    "Target application returned an error",
    "Error: Target application terminated before first instrumented API call",
    "Error: couldn't find exit code",
    "No CUDA-MEMCHECK results found",
    "Tracking kernels launched by child processes requires",
    "The application may have hit an error",
)


@dataclass
class Diagnosis:
    """The errors of one kind in one kernel, with the sanitizer's own first report of them."""

    tool: str
    diagnosis: str  # out_of_bounds | misaligned_access | device_fault | race | uninitialized_read | sync_error
    kernel: str | None
    report: str  # the first error's lines as the sanitizer printed them (host backtrace left out)
    errors: int = 1  # error reports of this kind and kernel in the log
    # each distinct headline of those reports, in order (an unmasked kernel reads past its input,
    # then writes past its output: `Invalid __global__ read ...`, `Invalid __global__ write ...`)
    headlines: list[str] = field(default_factory=list)

    @property
    def library_kernel(self) -> bool:
        return bool(self.kernel and _LIBRARY_KERNEL.match(self.kernel))


@dataclass
class SanitizerLog:
    """One log read: its diagnoses (one per kind and kernel, in the order first seen), its summary
    (None when the log has none: the run did not finish) and the sanitizer's notes on the program."""

    diagnoses: list[Diagnosis] = field(default_factory=list)
    summary: str | None = None
    notes: list[str] = field(default_factory=list)

    @property
    def program_killed(self) -> bool:
        """Whether the sanitizer saw its program end on a signal (a hang killed by the time limit)."""
        return any(n.startswith("Error: process didn't terminate") for n in self.notes)


def _blocks(text: str) -> tuple[list[list[str]], list[str], list[str]]:
    """The log's error reports (each a headline and its indented lines, backtraces dropped), its
    summary lines and its notes. Lines without the sanitizer's `=========` prefix are the program's."""
    blocks: list[list[str]] = []
    summaries: list[str] = []
    notes: list[str] = []
    current: list[str] | None = None
    in_backtrace = False
    for raw in text.splitlines():
        m = _PREFIX.match(raw.rstrip())
        if not m:
            continue
        body = m.group(2)
        if not body.strip():
            current, in_backtrace = None, False  # a bare prefix line ends a report
            continue
        if not body.startswith((" ", "\t")):
            line = body.strip()
            if line == "COMPUTE-SANITIZER":
                current = None
            elif line.startswith(_NOTES):
                notes.append(line)
                current = None
            elif _SUMMARY.match(line):
                summaries.append(line)
                current = None
            else:
                current, in_backtrace = [line], False
                blocks.append(current)
            continue
        line = body.strip()
        if current is None:
            continue
        if _BACKTRACE.match(line):
            in_backtrace = True
        if not in_backtrace:
            current.append(line)
    return blocks, summaries, notes


def _kernel(where: str) -> str | None:
    """The kernel named by a location: `kern(float*)+0x150 in f.cu:27`, `0x148 in ./f.cu:3:kern(int*)`,
    `0x50 in kern(float *)`, `kern in /input/kernel.cu:9`."""
    where = where.strip()
    m = re.match(r"0x[0-9a-fA-F]+\s+in\s+(.+)", where)
    if m:
        rest = m.group(1).strip()
        named = re.match(r"[^\s:]+:\d+:(.+)", rest)  # file:line:kernel (older releases)
        return (named.group(1) if named else rest).strip() or None
    name = re.split(r"\+0x[0-9a-fA-F]+", where, maxsplit=1)[0]
    name = re.split(r"\s+in\s+\S+:\d+", name, maxsplit=1)[0]
    return name.strip() or None


def _classify(tool: str, headline: str, text: str) -> str | None:
    """The diagnosis an error report gives, or None for what is not a finding about the kernel (a
    CUDA API error the sanitizer saw the program hit, a leak)."""
    if headline.startswith(("Program hit", "Leaked", "Memory leak")):
        return None
    if "Race reported" in headline or re.search(r"Potential (RAW|WAR|WAW) hazard", headline):
        return "race"
    if headline.startswith("Uninitialized"):
        return "uninitialized_read"
    if headline.startswith("Barrier error") or tool == "synccheck":
        return "sync_error"
    if headline.startswith("Invalid") or "Out-of-range" in headline or "Illegal Address" in headline:
        return "misaligned_access" if "is misaligned" in text or "Misaligned" in headline else "out_of_bounds"
    if "Misaligned" in headline:
        return "misaligned_access"
    return "device_fault" if tool == "memcheck" else None


def parse_report(text: str, tool: str) -> SanitizerLog:
    """The diagnoses, summary and notes of a compute-sanitizer log written by `tool`."""
    blocks, summaries, notes = _blocks(text)
    found: dict[tuple[str, str | None], Diagnosis] = {}
    for block in blocks:
        joined = " ".join(block)
        kind = _classify(tool, block[0], joined)
        if kind is None:
            continue
        if kind == "race":
            m = re.search(r"access at\s+(.*?)(?=\s+and (?:Read|Write|Atomic) access|\s*\[[\d,]+ hazards?\]|$)", joined)
        else:
            m = re.search(r"\bat\s+(.*?)(?=\s+by thread|\s+Address|\s+Access to|$)", " ".join(block[1:]))
        kernel = _kernel(m.group(1)) if m else None
        hazards = sum(int(h.replace(",", "")) for h in _HAZARDS.findall(joined)) if kind == "race" else 0
        key = (kind, kernel)
        if key in found:
            found[key].errors += max(hazards, 1)
            if block[0] not in found[key].headlines:
                found[key].headlines.append(block[0])
        else:
            found[key] = Diagnosis(tool, kind, kernel, "\n".join(block)[:1500], max(hazards, 1), [block[0]])
    return SanitizerLog(list(found.values()), " ".join(summaries) if summaries else None, notes)
