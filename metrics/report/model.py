"""The report's model: everything the report says, built once (build.py) and rendered by templates and the CSV writer,
so that the outputs cannot disagree."""
from dataclasses import dataclass, field


@dataclass
class Table:
    title: str
    columns: list[str]
    rows: list[list[str]]
    note: str = ""


@dataclass
class Figure:
    title: str
    png_base64: str
    caption: str


@dataclass
class Caveat:
    """One kind of caveat: one line with its count, linked (anchor) to its details further down."""
    text: str           # "9 runs on a contended CPU left out"
    anchor: str         # the id of its details, unique within a section
    details: list[str]  # one line per run (or configuration): block, configuration, the figure that failed


@dataclass
class Entry:
    """One configuration's line in the verdict."""
    label: str
    figures: list[str]
    caveats: list[Caveat]  # this configuration's, counted


@dataclass
class Verdict:
    """The answer for one (dataset, model): on the primary figure alone."""
    primary: str          # the primary figure, as declared before the first run
    answer: str           # what may be claimed, or why nothing may
    method: str           # one sentence: how the answer was reached (the full method: Methods)
    findings: list[str]   # per configuration: reached k of n, its claim against the baseline
    network: list[str]    # the link each configuration was measured on, its goodput, their communication shares
    lines: list[str]      # the control arm, the noise, the order
    caveats: list[Caveat]  # the section's, one line per kind with its count
    entries: list[Entry]  # ranked on the primary figure; the other figures beside it
    references: list[Entry]  # single-process runs on fewer CPUs, kept for scaling efficiency, not ranked
    commands: list[str]   # train.py commands producing the missing baselines
    references_note: str = ""
    commands_note: str = ""


@dataclass
class SectionReport:
    title: str
    verdict: Verdict
    comparisons: Table         # the first screen: ratio, interval and claim of every comparison
    forest: Figure | None      # the same comparisons on one log axis (None: no paired ratio)
    tables: list[Table]
    figures: list[Figure]      # per configuration, below the detail


@dataclass
class Report:
    generated: str
    sources: list[str]
    intro: list[str]               # a note above the sections (several dataset / model combinations)
    sections: list[SectionReport]
    notes: list[str]               # page notes: synthetic data, runs left out, units
    errors: list[tuple[str, str]]  # (run, full error)
    methods: list[tuple[str, str]]
    runs: list[dict] = field(default_factory=list)  # runs.csv: one row per run and per superseded attempt
    projected: list[Table] = field(default_factory=list)  # "Projected to your cluster" (report.project)
