"""The documentation's contracts: generated blocks are fresh, no measured figure is written by hand outside one,
the README stays short with its two commands on top, and every command block marked runnable still parses.

Unit tier: nothing here starts a process. Commands are checked in a form that runs nothing: `train.py` as Hydra's
compose (what `--cfg job` prints, every sweep value of a `-m` expanded), other scripts and modules up to their
argument parser, `make` as a target of the Makefile.
"""
import argparse
import importlib.util
import itertools
import json
import re
import runpy
import shlex
import sys
from dataclasses import replace
from pathlib import Path

import pytest
import yaml
from omegaconf import OmegaConf

from bench.results import BenchResult, load_all
from helpers import ROOT
from metrics.recording.evidence import EVIDENCE
from metrics.recording.machine import describe_machine, same_machine

README = ROOT / "README.md"
LAB_LOG = ROOT / "docs" / "lab-log.md"
USER_PAGES = [README, *sorted(p for p in (ROOT / "docs").glob("*.md") if p != LAB_LOG)]


def load_generator():
    spec = importlib.util.spec_from_file_location("docs_generate", ROOT / "docs" / "generate.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


generate = load_generator()


# --- generated blocks -------------------------------------------------------------------
def test_every_generated_block_is_fresh():
    """`make docs` on a clean checkout changes nothing (CI runs this test through `make test`)."""
    if generate.HISTORY is None:
        pytest.skip("no git history here: the blocks would say their results' staleness is undecidable")
    stale = generate.stale_pages()
    assert not stale, f"stale generated blocks in {', '.join(p.name for p in stale)}: run `make docs`"


def test_a_stale_block_is_found_and_rewritten(tmp_path):
    page = tmp_path / "page.md"
    page.write_text("intro\n<!-- generated:knobs conf/strategy/ps.yaml -->\n| `ps.servers` | `7` | hand-edited |\n"
                    "<!-- end generated:knobs conf/strategy/ps.yaml -->\nafter\n")
    fresh = generate.stale_pages([page])[page]
    assert "| `ps.servers` | `1` |" in fresh and "hand-edited" not in fresh
    assert fresh.startswith("intro\n") and fresh.endswith("after\n")
    page.write_text(fresh)
    assert generate.stale_pages([page]) == {}


@pytest.mark.parametrize("text, error", [
    ("<!-- generated:groups -->\nno end\n", "markers"),
    ("<!-- generated:groups -->\n<!-- end generated:knobs conf/config.yaml -->\n", "ends as"),
    ("<!-- generated:nonsense -->\n<!-- end generated:nonsense -->\n", "unknown generator"),
    ("<!-- generated:bench nonsense -->\n<!-- end generated:bench nonsense -->\n", "unknown table"),
    ("<!-- generated:knobs conf/config.yaml nothing.here -->\n<!-- end generated:knobs conf/config.yaml nothing.here -->\n",
     "no knob"),
    ("<!-- generated:bench emulation nonsense -->\n<!-- end generated:bench emulation nonsense -->\n", "unknown part"),
])
def test_a_malformed_block_is_an_error(tmp_path, text, error):
    page = tmp_path / "page.md"
    page.write_text(text)
    with pytest.raises(ValueError, match=error):
        generate.stale_pages([page])


def test_every_table_template_renders_a_block_of_the_pages():
    """Every `generated:bench NAME ...` block is rendered by docs/templates/NAME.md.j2; a template no page uses is dead."""
    used = {m["spec"].split()[1] for page in USER_PAGES for m in generate.BLOCK.finditer(page.read_text())
            if m["spec"].startswith("bench ")}
    templates = {p.name.removesuffix(".md.j2") for p in (ROOT / "docs" / "templates").glob("*.md.j2")}
    assert templates == used, f"templates no page uses: {sorted(templates - used)}; tables without a template: " \
                              f"{sorted(used - templates)}"


def test_knob_tables_are_read_from_the_yaml_and_its_comments():
    rows = {key: (value, comment) for key, value, comment in generate.knobs_of(ROOT / "conf" / "config.yaml")}
    assert rows["timeouts.collective_s"] == ("60", "any blocking communication call")
    assert rows["report.smallest_effect"][0] == "1.25"
    assert not any(key.startswith(("hydra", "defaults")) for key in rows)  # wiring, not knobs


def test_every_strategy_has_its_knob_table_in_the_docs():
    text = (ROOT / "docs" / "strategies.md").read_text()
    for conf in sorted((ROOT / "conf" / "strategy").glob("*.yaml")):
        if any(key.startswith(conf.stem + ".") for key, _, _ in generate.knobs_of(conf)):
            assert f"<!-- generated:knobs conf/strategy/{conf.name} -->" in text, conf.name


def test_measured_tables_name_their_date_and_machine():
    for spec in ("bench collective_efficiency", "bench thesis_projected", "bench projection_validation resnet18",
                 "verdict", "bench-summary", "bench evaluation_share", "bench evaluation_share line"):
        text = generate.render(spec)
        assert re.search(r"\d{4}-\d{2}-\d{2}", text), spec
        assert "cores" in text, spec  # the machine, from metrics/recording/machine.py's fingerprint


def test_the_summary_shows_an_entrys_interval_and_pairs_beside_its_ratio():
    """A ratio read from pairs is a claim about noise: the table carries the interval and how many pairs made it."""
    entry = load_all()["reference_cost"]
    low, high = entry.body["interval"]
    row = next(line for line in generate.render("bench-summary").splitlines() if "`reference_cost`" in line)
    assert f"[{low:.3f}, {high:.3f}], {entry.body['pairs']} pairs" in row, row


def test_the_headline_row_names_where_its_noise_was_measured():
    """The power the README claims for the headline's blocks rests on recorded noise: that noise's machine is named
    where it is not the sweeps' own."""
    headline = load_all()["headline"]
    target = yaml.safe_load((ROOT / "conf" / "config.yaml").read_text())["target"]
    rows = [r for r in next(e for e in json.loads(EVIDENCE.read_text())["results"] if e["name"] == "primary_noise")
            ["rows"] if r.get("estimator") == target["estimator"] and r.get("model") == "resnet18"
            and r.get("strategy") in ("ps", "ring", "stepwise")]
    cell = next(line for line in generate.command_details().split("\n- ") if "strategy=ring,stepwise,ps" in line)
    assert rows
    for row in rows:
        assert same_machine(row["machine"], headline.machine) or describe_machine(row["machine"]) in cell, cell


# --- no stale figure shown as current ----------------------------------------------------------
def history(*commits: tuple[str, list[str], int, list[str]]):
    """A History of (sha, parents, committer time, files changed), as `git log` prints it, newest first."""
    return generate.History.parse("".join(f"\0{sha} {' '.join(parents)} {when}\n\n" + "".join(f"{f}\n" for f in files)
                                          for sha, parents, when, files in commits))


A, B, C, M = (c * 40 for c in "abcd")
# 1000 a: the module; 2000 b: another file; 3000 c: the module again, on a branch merged by m at 4000
HISTORY = history((M, [B, C], 4000, []), (C, [A], 3000, ["bench/ddp_overlap.py"]), (B, [A], 2000, ["bench/x.py"]),
                  (A, [], 1000, ["bench/ddp_overlap.py", "bench/x.py"]))


def probe(**more) -> BenchResult:
    return BenchResult.of({"name": "ddp_overlap", "goal": "g", "measured_at": "1970-01-01 00:41:40", "machine": {},
                           "sweeps": []} | more)  # 2500 s


@pytest.mark.parametrize("entry, label", [
    (probe(commit={"sha": A, "dirty": False}), "stale"),  # c changed the module after a
    (probe(commit={"sha": B, "dirty": True}), "stale"),  # b's branch never had c
    (probe(commit={"sha": C, "dirty": False}), None),
    (probe(commit={"sha": M, "dirty": False}), None),
    (probe(), "stale"),  # no commit: measured at 2500 s, the module changed at 3000
    (probe(measured_at="1970-01-01 00:58:20"), None),  # 3500 s
    (probe(measured_at="1970-01-01"), "stale"),  # a date alone: its midnight
    (probe(commit={"sha": "e" * 40, "dirty": False}), "undecidable"),  # not in this history
    (probe(name="thesis_grid"), "superseded"),
])
def test_a_result_older_than_its_benchmarks_last_change_is_stale(entry, label):
    found = generate.freshness(entry, HISTORY)
    assert (found and found.label) == label, found
    if label == "stale":
        assert found.why.startswith(f"measured at {entry.measured_at} (") and f"before `bench/ddp_overlap.py` " \
            f"changed at {C[:10]} (1970-01-01" in found.why, found.why
        assert found.why.endswith("; rerun `python bench/run.py ddp_overlap`"), found.why


def test_an_entry_without_a_commit_is_judged_from_the_commit_that_saved_it():
    """Measured at 2500 s and saved at 3000 s in the commit that also changed its module: that code made it."""
    saved = history((B, [A], 4000, ["bench/x.py"]), (C, [A], 3000, ["bench/ddp_overlap.py",
                                                                   "bench/results/ddp_overlap.json"]),
                    (A, [], 1000, ["bench/ddp_overlap.py"]))
    assert generate.freshness(probe(), saved) is None
    changed = history((B, [C], 4000, ["bench/ddp_overlap.py"]),
                      (C, [A], 3000, ["bench/ddp_overlap.py", "bench/results/ddp_overlap.json"]), (A, [], 1000, []))
    assert generate.freshness(probe(), changed).label == "stale"


def test_without_git_history_staleness_is_undecidable_not_an_error():
    assert generate.freshness(probe(), None).label == "undecidable"


def test_the_pages_mark_a_result_older_than_its_benchmark_and_not_a_fresh_one():
    """On this repository's history: stepwise_vs_ring was measured (2026-11-23) before bench/stepwise_vs_ring.py last
    changed; the same entry recorded at the commit of that change is current."""
    if generate.HISTORY is None:
        pytest.skip("no git history here")
    assert generate.render("bench stepwise_vs_ring").startswith(
        "**Stale**, figures not shown: measured at 2026-11-23 14:46:56 (commit not recorded), before "
        "`bench/stepwise_vs_ring.py` changed at ")
    row = next(line for line in generate.render("bench-summary").splitlines()
               if line.startswith("| `stepwise_vs_ring`"))
    assert "| **stale** |" in row and "| 1.0" not in row
    entry = load_all()["stepwise_vs_ring"]
    last = generate.HISTORY.changes("bench/stepwise_vs_ring.py")[0]
    assert generate.notice(replace(entry, commit={"sha": last, "dirty": False})) == []


def made(entry, current: bool):
    """The entry as run at the newest commit, or at the parent of the last change to its benchmark's module."""
    commits = generate.HISTORY.commits
    sha = max(commits, key=lambda sha: commits[sha][1]) if current else \
        commits[generate.HISTORY.changes(generate.PRODUCERS[entry.name][0])[0]][0][0]
    return replace(entry, commit={"sha": sha, "dirty": False})


def test_a_stale_results_figures_are_not_shown_and_a_current_ones_are(monkeypatch):
    """The headline measured just before bench/headline.py last changed, or with a caveat naming a fix made after it:
    no figure of it on the pages, only the command that measures it again; made by HEAD's code, its figures. The
    same for the noise the headline's blocks plan on."""
    if generate.HISTORY is None:
        pytest.skip("no git history here")
    headline, noise = load_all()["headline"], load_all()["primary_noise"]
    timed = replace(headline, body=headline.body | {"answers": [a | {"wall_s": 4321 * 60}
                                                                for a in headline.body["answers"]]})

    def pages(entry, noise=made(noise, True)) -> dict[str, str]:
        monkeypatch.setattr(generate, "load_all", lambda: load_all() | {"headline": entry, "primary_noise": noise})
        return {spec: generate.render(spec) for spec in ("verdict", "commands", "command-details")}

    current = pages(made(timed, True))
    assert all("4321 min" in text for text in current.values()), current
    assert "ratios beyond" in current["commands"] and "ratios beyond" in current["command-details"]
    for entry in (made(timed, False), replace(made(timed, True), body=timed.body | {"caveat": "measured before a fix"})):
        shown = pages(entry)
        assert not any("4321" in text for text in shown.values()), shown
        assert "figures not shown" in shown["verdict"] and "rerun `python bench/headline.py`" in shown["commands"]
    shown = pages(made(timed, True), made(noise, False))
    headline_rows = [part for text in (shown["commands"], shown["command-details"])
                     for part in text.split("\n") if "strategy=ring,stepwise,ps" in part]
    assert headline_rows and not any("ratios beyond" in row for row in headline_rows), shown
    assert "rerun `python bench/primary_noise.py`" in shown["commands"]


def test_every_result_names_the_benchmark_that_makes_it():
    for name in load_all():
        assert name in generate.PRODUCERS or name in generate.SUPERSEDED, f"{name}: add it to PRODUCERS"
    assert all((ROOT / path).exists() for paths in generate.PRODUCERS.values() for path in paths)


def test_a_result_without_its_machine_or_commit_says_so():
    text = generate.stamp(BenchResult.of({"name": "probe", "goal": "g", "measured_at": "2026-11-22",
                                          "machine": {"cores": 2}, "sweeps": []}))
    assert "(commit not recorded) on CPU unknown, 2 cores (not recorded: vendor, model name, family" in text, text
    entry = load_all()["stepwise_vs_ring"]
    assert "(commit not recorded) on AMD EPYC, 2 cores, 24 GiB, no GPU (not recorded: vendor, family, model, clock, " \
           "kernel)" in generate.stamp(entry) and "commit" not in entry.keys
    assert "(commit abcdef1234 with uncommitted changes)" in generate.stamp(
        replace(entry, commit={"sha": "abcdef1234" * 4, "dirty": True}))


def test_the_superseded_thesis_grid_is_not_shown_as_testing_its_goal():
    summary = generate.render("bench-summary")
    assert "| `thesis_grid`" not in summary and "Not shown: `thesis_grid`, superseded by `thesis`" in summary


# --- README ------------------------------------------------------------------------------
def test_readme_is_short_and_starts_with_its_two_commands():
    assert README.stat().st_size <= 20_000
    head = README.read_text().splitlines()[:40]
    assert any(line.startswith("make run") for line in head) and any(line.startswith("make test") for line in head)


def test_readme_command_cells_are_short_phrases_linked_to_their_detail():
    """The README's "What each command answers": a short phrase a cell (the command aside), the long text in
    docs/usage.md, which the answer cell links."""
    rows = [[cell.strip() for cell in line.strip("|").split(" | ")] for line in generate.commands().splitlines()[2:]]
    assert len(rows) == 4
    for command, answers, *cells in rows:
        answer = answers.removesuffix(f" ([detail]({generate.DETAIL}))")
        assert answer != answers and all(len(cell) <= 90 for cell in [answer, *cells]), (command, answer, cells)
    assert "## What each command answers" in (ROOT / "docs" / "usage.md").read_text()


def test_readme_test_command_is_what_ci_runs():
    assert (ROOT / ".ci" / "run").read_text().rstrip().endswith("exec make test </dev/null")


# --- no measured figure by hand ------------------------------------------------------------
# A measured figure: a number with a unit of time, size, rate or share, a ratio written as 0.97x or 0.97×, or an
# interval [0.88, 1.06]. Allowed outside generated blocks only where it is quoted (inline code, fenced code: config
# values, defaults, commands and their output), and in the lab log, which is dated narrative.
UNIT = (r"(?:samples/s|[kMG]bit/s|[kKMG]B/s|µs|us|ns|ms|s|sec|seconds?|min|minutes?|h|hours?|[KMG]iB|[kKMG]B|%)")
NUMBER = r"\d+(?:[.,]\d+)*"
FIGURE = re.compile(
    rf"(?<![\w.\-/]){NUMBER}(?:\s?(?:-|–|\.\.)\s?{NUMBER})?[\s-]?{UNIT}(?![\w/])"
    r"|(?<![\w.])\d+(?:\.\d+)?[×x](?!\w)"
    r"|\[\s*[-+−]?\d+(?:\.\d+)?\s*,\s*[-+−]?\d+(?:\.\d+)?\s*\]")
NOT_MEASURED = re.compile(r"\b95 ?% (?:interval|Student|confidence|t-interval)")  # a confidence level
QUOTED = re.compile(r"^```.*?^```|`[^`\n]*(?:\n[^`\n]*)?`|<!--.*?-->", re.S | re.M)  # inline code may wrap once


def hand_written(text: str) -> str:
    """The text outside generated blocks, code and comments, one line per line (numbers keep their line)."""
    blank = lambda m: re.sub(r"[^\n]", " ", m.group())  # noqa: E731
    return QUOTED.sub(blank, generate.BLOCK.sub(blank, NOT_MEASURED.sub(blank, text)))


def measured_figures(text: str) -> list[str]:
    return [f"line {text[:m.start()].count(chr(10)) + 1}: {m.group()!r}" for m in FIGURE.finditer(hand_written(text))]


@pytest.mark.parametrize("text", ["took 15 min", "at 93.8 samples/s", "ring 0.85× [0.82, 0.87]", "a 3.5-minute try",
                                  "rank 0 carried 1.42x the payload", "12 GiB", "spread 7.1 %", "[0.5, 1.2]"])
def test_a_measured_figure_is_found(text):
    assert measured_figures(f"Prose: {text}.\n")


@pytest.mark.parametrize("text", ["`network.bandwidth_mbit=20`", "peers 8 x 2 on 16 cores", "a 95 % interval",
                                  "10.213.7.0/24", "on 2026-11-25, 3 blocks", "```\ntook 15 min\n```",
                                  "<!-- generated:groups -->\n45 s\n<!-- end generated:groups -->"])
def test_quoted_values_and_generated_blocks_are_not_hand_written_figures(text):
    assert measured_figures(f"{text}\n") == []


@pytest.mark.parametrize("page", USER_PAGES, ids=lambda p: p.name)
def test_no_measured_figure_written_by_hand(page):
    found = measured_figures(page.read_text())
    assert not found, (f"{page.relative_to(ROOT)}: measured figures outside a generated block (generate them from "
                       f"bench/results.json, or move the dated story to docs/lab-log.md): {found}")


# --- runnable command blocks --------------------------------------------------------------
FENCE = re.compile(r"^```(?P<info>[^\n]*)\n(?P<body>.*?)^```", re.S | re.M)


def shell_blocks(page: Path) -> list[tuple[str, str]]:
    return [(m["info"].strip(), m["body"]) for m in FENCE.finditer(page.read_text()) if m["info"].startswith("sh")]


def commands(body: str) -> list[list[str]]:
    """Each command of a block as words: continuation lines joined, comments dropped."""
    joined = re.sub(r"\\\n\s*", " ", body)
    return [words for line in joined.splitlines() if (words := shlex.split(line, comments=True))]


RUNNABLE = [(page, words) for page in [README, *sorted((ROOT / "docs").glob("*.md"))]
            for info, body in shell_blocks(page) if info.split()[1:] == ["runnable"] for words in commands(body)]


def test_every_shell_block_says_whether_it_is_runnable():
    for page in [README, *sorted((ROOT / "docs").glob("*.md"))]:
        for info, _ in shell_blocks(page):
            assert info in ("sh runnable", "sh example"), f"{page.name}: ```{info}: mark it `sh runnable` or `sh example`"
    assert len(RUNNABLE) >= 30


class Parsed(Exception):
    """Raised by the argument parser once it has accepted the command line: nothing after it runs."""

    def __init__(self, namespace):
        super().__init__(namespace)
        self.namespace = namespace


def parse_only(monkeypatch, run, argv: list[str]) -> argparse.Namespace:
    """Run a script or module up to its argument parser with argv; return what the parser accepted."""
    import warnings

    warnings.filterwarnings("ignore", "'.*' found in sys.modules", RuntimeWarning)  # runpy of an imported module
    original = argparse.ArgumentParser.parse_args

    def parse_args(self, args=None, namespace=None):
        raise Parsed(original(self, args, namespace))

    monkeypatch.setattr(argparse.ArgumentParser, "parse_args", parse_args)
    monkeypatch.setattr(sys, "argv", argv)
    with pytest.raises(Parsed) as parsed:
        run()
    return parsed.value.namespace


def check_train(args: list[str]) -> None:
    """train.py as `--cfg job` would compose it: the override check train.py runs first, then every job of a sweep."""
    from hydra.core.override_parser.overrides_parser import OverridesParser
    from launchers.config import check_overrides

    from helpers import compose_config

    multirun = "-m" in args or "--multirun" in args
    overrides = [a for a in args if a not in ("-m", "--multirun", "--help", "--cfg", "job")]
    check_overrides(overrides)
    choices = []
    for override in OverridesParser.create().parse_overrides(overrides):
        if override.is_sweep_override():
            assert multirun, f"{override.input_line}: a sweep needs -m"
            choices.append([f"{override.get_key_element()}={v}" for v in override.sweep_string_iterator()])
        else:
            choices.append([override.input_line])
    for job in itertools.product(*choices):
        cfg = compose_config(*job, return_hydra_config=any(o.lstrip("+~").startswith("hydra.") for o in job))
        OmegaConf.to_container(OmegaConf.masked_copy(cfg, [k for k in cfg if k != "hydra"]), resolve=True)


def makefile_targets() -> set[str]:
    return set(re.findall(r"^([\w-]+):", (ROOT / "Makefile").read_text(), re.M))


def check_command(monkeypatch, words: list[str]) -> None:
    assert not re.match(r"^[A-Z_][A-Z0-9_]*=", words[0]), f"{words[0]}: settings are options, not the environment"
    program, *args = words
    if program == "make":
        target, *rest = args
        assert target in makefile_targets(), f"make {target}: no such target"
        make_args = dict(a.split("=", 1) for a in rest)
        if target == "run":
            check_train(shlex.split(make_args.get("ARGS", "")))
        return
    assert program in (".venv/bin/python", "python"), f"{program}: not a command form the docs use"
    if args[0] == "train.py":
        check_train(args[1:])
    elif args[0] == "-m":
        parse_only(monkeypatch, lambda: runpy.run_module(args[1], run_name="__main__"), [args[1], *args[2:]])
    else:
        namespace = parse_only(monkeypatch, lambda: runpy.run_path(str(ROOT / args[0]), run_name="__main__"), args)
        if args[0] == "bench/run.py":
            from bench.run import BENCHMARKS, idle_options

            assert set(namespace.names) <= set(BENCHMARKS), f"unknown benchmark in {namespace.names}"
            assert not idle_options(namespace), f"options for benchmarks it does not run: {idle_options(namespace)}"


@pytest.mark.parametrize("page, words", RUNNABLE, ids=[f"{p.name}: {' '.join(w)[:70]}" for p, w in RUNNABLE])
def test_runnable_command(monkeypatch, page, words):
    check_command(monkeypatch, list(words))


@pytest.mark.parametrize("command, error", [
    (".venv/bin/python train.py strategy=nonsense", "unknown strategy"),
    (".venv/bin/python train.py ring.nonsense=1", "ring"),
    (".venv/bin/python train.py strategy=ring,ps", "needs -m"),
    (".venv/bin/python -m metrics.projection --no-such-flag DIR", "2"),
    (".venv/bin/python bench/run.py nonsense", "unknown benchmark"),
    (".venv/bin/python bench/run.py thesis --thesis-nonsense 1", "2"),
    (".venv/bin/python bench/run.py noise --thesis-families hivemind", "does not run"),
    ("AVGBENCH_THESIS_FAMILIES=hivemind .venv/bin/python bench/run.py thesis", "not the environment"),
    ("make nonsense", "no such target"),
])
def test_a_broken_command_fails_the_check(monkeypatch, command, error):
    with pytest.raises((Exception, SystemExit), match=error):
        check_command(monkeypatch, shlex.split(command))
