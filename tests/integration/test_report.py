"""The comparison report: written by a real multirun, rebuilt by the CLI, rendered by headless Chromium."""
import base64
import copy
import csv
import html
import io
import json
import re
import shutil
import statistics
import subprocess
import sys
from pathlib import Path

import pytest
from omegaconf import OmegaConf
from PIL import Image

from helpers import QUICK, ROOT, run_train
from metrics import report
from metrics.recording.jsonl import read_jsonl
from metrics.report.runs import Run, flatten, group_runs, load_run
from metrics.summary.schema import Summary

REPORT_FILES = ("report.html", "report.md", "runs.csv")
pytestmark = [pytest.mark.integration, pytest.mark.timeout(600)]  # the first test also pays for the module's runs (4 + 2 + 2 short runs)


@pytest.fixture(scope="module")
def multirun(tmp_path_factory):
    """single and allreduce in two blocks (seeds 1 and 2): a report with paired repeats."""
    sweep = tmp_path_factory.mktemp("multirun")
    result = subprocess.run(
        [sys.executable, str(ROOT / "train.py"), "-m", "strategy=single,allreduce", "peers=1", "seed=1", "repeats=2",
         "max_steps=6", "eval_every=3", f"hydra.sweep.dir={sweep}", *QUICK],
        cwd=ROOT, capture_output=True, text=True, timeout=500, stdin=subprocess.DEVNULL)
    assert result.returncode == 0, result.stderr
    return sweep, result


@pytest.fixture(scope="module")
def other_runs(tmp_path_factory):
    """A run whose peer crashes, and a run on synthetic data."""
    base = tmp_path_factory.mktemp("others")
    crashed = run_train(base / "crashed", "max_steps=10", "fault.raise_peer=0", "fault.at_step=3")
    assert crashed.returncode == 1, crashed.stderr
    synthetic = run_train(base / "synthetic", "data=synthetic", "data.num_samples=256", "max_steps=5")
    assert synthetic.returncode == 0, synthetic.stderr
    return base / "crashed", base / "synthetic"


@pytest.fixture(scope="module")
def scaling(tmp_path_factory):
    """stepwise on 2 peers of 1 CPU, and its equal-resource baseline: single on 2 CPUs (as long as the multirun)."""
    base = tmp_path_factory.mktemp("scaling")
    for name, overrides in (("stepwise", ["strategy=stepwise", "peers=2"]), ("single", ["peer_cpus=2"])):
        result = run_train(base / name, "max_steps=6", *overrides)
        assert result.returncode == 0, result.stderr
    return base / "stepwise", base / "single"


@pytest.fixture(scope="module")
def full_report(multirun, scaling, tmp_path_factory):
    """The report over the multirun and the scaling runs: 1 and 2 peers, both baselines of every configuration."""
    out = tmp_path_factory.mktemp("full_report")
    result = run_cli(multirun[0], *scaling, "-o", out)
    assert result.returncode == 0, result.stderr
    return out


def run_dirs(sweep) -> list[Path]:
    return sorted(p.parent for p in sweep.rglob("summary.json"))


def runs_under(*dirs) -> list[Run]:
    return [load_run(p.parent) for d in dirs for p in sorted(d.rglob("summary.json"))]


def summary_of(run_dir) -> dict:
    return json.loads((run_dir / "summary.json").read_text())


def verdict_of(markdown: str) -> str:
    assert markdown.index("## Verdict") < markdown.index("\n## data="), "the verdict comes first"
    return markdown.split("## Verdict")[1].split("\n## ")[0]


def verdict_entries(verdict: str) -> dict[str, str]:
    """Configuration label -> its sentence, in rank order."""
    return dict(re.findall(r"^\d+\. \*\*(.+?)\*\*: (.*)$", verdict, re.M))


def read_csv(path):
    with open(path, newline="") as f:
        return list(csv.DictReader(f))


def run_cli(*args):
    return subprocess.run([sys.executable, "-m", "metrics.report", *map(str, args)], cwd=ROOT,
                          capture_output=True, text=True, timeout=120)


def chromium(*args, tmp_path):
    binary = shutil.which("chromium")
    if not binary:
        pytest.skip("no chromium binary on PATH: scripts/setup.sh installs it (Debian package chromium)")
    return subprocess.run([binary, "--headless", "--no-sandbox", "--disable-gpu", "--disable-quic", "--no-first-run",
                           "--disable-background-networking", "--disable-component-update", "--disable-sync",
                           f"--user-data-dir={tmp_path / 'chromium-profile'}", *args],
                          capture_output=True, text=True, timeout=120)


def test_multirun_writes_the_report(multirun):
    sweep, result = multirun
    assert "comparison report" in result.stdout
    assert all((sweep / name).stat().st_size > 0 for name in REPORT_FILES)

    rows = read_csv(sweep / "runs.csv")
    # single 1x1 is allreduce's equal-resource baseline: it runs twice per block (the second: the control arm)
    assert sorted((r["config.strategy.name"], r["config.seed"], r["arm"]) for r in rows) == [
        ("allreduce", "1", ""), ("allreduce", "2", ""), ("single", "1", ""), ("single", "1", "control"),
        ("single", "2", ""), ("single", "2", "control")]
    for row in rows:
        assert row["status"] == "completed" and float(row["throughput_samples_per_s"]) > 0
        if not row["arm"]:
            assert float(row["speedup_vs_single"]) > 0  # the single run with 1 CPU is the baseline of both
        assert row["config.transport"] == "gloo"
        finals = [read_jsonl(p)[-1]["test_accuracy"] for p in Path(row["run_dir"]).glob("peer*/eval.jsonl")]
        assert float(row["worst_worker_accuracy"]) == min(finals)

    markdown = (sweep / "report.md").read_text()
    for title in ("Configurations", "Time, throughput and convergence", "Communication payload",
                  "Time breakdown per step", "Resources per peer", "Failures", "Methods"):
        assert f"{title}" in markdown
    # Repeats are one row each with mean ± sd; the allreduce row names its knob.
    config_rows = [line for line in markdown.splitlines() if re.match(r"\| [12] \| ", line)]
    assert any("| single | – |" in line and "| 1, 2 |" in line for line in config_rows)
    assert any("| allreduce | transport=gloo, ddp=True, bucket_cap_mb=25, comm_hook=none," in line for line in config_rows)
    assert "±" in markdown and "host-wide" in markdown
    assert list(verdict_entries(verdict_of(markdown))) in (["single", "allreduce"], ["allreduce", "single"])


LAYOUT_CHECK = """<script>window.addEventListener('load', () => {
  const images = [...document.images], verdict = document.getElementById('verdict');
  const found = {innerWidth: window.innerWidth, scrollWidth: document.documentElement.scrollWidth,
    images: images.length, loaded: images.filter(i => i.complete && i.naturalWidth > 0).length,
    verdictTop: verdict ? verdict.getBoundingClientRect().top : null,
    forestBottom: document.querySelector('figure.forest img')?.getBoundingClientRect().bottom,
    overflowingTables: [...document.querySelectorAll('div.table')].filter(d => d.scrollWidth > d.clientWidth)
      .map(d => d.querySelector('tr').textContent.slice(0, 80))};
  const out = document.createElement('pre');
  out.id = 'layout-check';
  out.textContent = JSON.stringify(found);
  document.body.appendChild(out);
});</script>"""


def test_report_fits_a_1280_px_window_in_headless_chromium(full_report, tmp_path):
    page = (full_report / "report.html").read_text()
    images = re.findall(r"data:image/png;base64,([A-Za-z0-9+/=]+)", page)
    assert len(images) >= 6
    for data in images:  # every embedded plot is a real, non-trivial image
        image = Image.open(io.BytesIO(base64.b64decode(data)))
        assert image.width > 300 and len(image.convert("RGB").getcolors(1 << 20)) > 20

    checked = tmp_path / "report.html"
    checked.write_text(page.replace("</body>", LAYOUT_CHECK + "</body>"))
    dom = chromium("--window-size=1280,900", "--virtual-time-budget=10000", "--dump-dom", checked.as_uri(),
                   tmp_path=tmp_path)
    assert dom.returncode == 0, dom.stderr
    found = json.loads(html.unescape(re.search(r'<pre id="layout-check">(.*?)</pre>', dom.stdout, re.S)[1]))
    assert found["innerWidth"] == 1280
    assert found["scrollWidth"] <= 1280, "the page scrolls sideways"
    assert found["overflowingTables"] == [], "tables wider than the page"
    assert found["images"] == len(images) and found["loaded"] == found["images"]
    assert found["verdictTop"] is not None and found["verdictTop"] < 800, "the verdict is not in the first screen"
    if found.get("forestBottom") is None:  # no comparison has a block that tells its arms apart: nothing to plot
        assert "Comparisons on one axis" not in page and "no paired block" in page
    else:
        assert found["forestBottom"] < 800, "the answer, the comparisons and their forest plot overflow the first screen"

    shot = tmp_path / "report.png"
    rendered = chromium("--window-size=1280,2400", f"--screenshot={shot}", (full_report / "report.html").as_uri(),
                        tmp_path=tmp_path)
    assert rendered.returncode == 0 and shot.exists(), rendered.stderr
    pixels = Image.open(shot).convert("L").getdata()
    non_white = sum(1 for p in pixels if p < 240) / len(pixels)
    assert non_white > 0.03  # text, tables and plots, not a blank page
    assert len(Image.open(shot).convert("RGB").getcolors(1 << 20)) > 100  # coloured plot lines, not just text


def test_verdict_ranks_configurations_against_their_baselines(multirun, scaling, full_report):
    stepwise, single_2cpu = scaling
    single_1cpu = [d for d in run_dirs(multirun[0]) if d.name == "strategy=single"]
    allreduce = [d for d in run_dirs(multirun[0]) if d.name == "strategy=allreduce"]
    throughput = {label: statistics.fmean(summary_of(d)["throughput_samples_per_s"] for d in dirs)
                  for label, dirs in (("single 1×1cpu", single_1cpu), ("allreduce 1×1cpu", allreduce),
                                      ("stepwise 2×1cpu", [stepwise]), ("single 1×2cpu", [single_2cpu]))}
    markdown = (full_report / "report.md").read_text()
    verdict = verdict_of(markdown)
    entries = verdict_entries(verdict)
    # No configuration reaches 95 % in 6 steps: the primary figure (time-to-target) cannot rank them; throughput
    # stands beside it and does not take its place
    assert set(entries) == set(throughput)
    assert all("reached test_accuracy ≥ 0.95 in 0 of" in sentence for sentence in entries.values())
    assert "Answer: no averaging configuration is shown faster than one process on the same CPUs in time-to-target" \
        in verdict

    sentence = entries["stepwise 2×1cpu"]
    speedup = throughput["stepwise 2×1cpu"] / throughput["single 1×2cpu"]  # two runs outside blocks: one pair
    unfaithful = any(summary_of(d).get("isolation", {}).get("faithful") is False for d in (stepwise, single_2cpu))
    assert ("time-to-target against single 1×2cpu: " + (
        "no block holds a faithful run of both: no paired ratio" if unfaithful  # a busy machine: no claim from it
        else "no block tells them apart (both missed, or both crossed at the first evaluation, in every block): "
             "no ratio")) in sentence
    assert (f"throughput speedup {speedup:.2f}× (1 block: no interval) vs single 1×2cpu (beside the primary "
            "figure)") in sentence
    # the 1-CPU runs ran in the multirun's blocks, stepwise outside them: no pair, no ratio
    assert "scaling efficiency n/a (no paired block) (vs 2 × single 1×1cpu)" in sentence
    worst = min(read_jsonl(p)[-1]["test_accuracy"] for p in stepwise.glob("peer*/eval.jsonl"))
    assert f"worst worker {worst:.3f}" in sentence
    summary = summary_of(stepwise)
    value, unit = re.search(r"([\d.]+) (bytes|KiB)/sample sent", sentence).groups()
    assert float(value) * (1024 if unit == "KiB" else 1) == pytest.approx(summary["bytes_sent_per_sample"], rel=0.01)
    share = summary["time_breakdown_share"]
    shares = {"data": share["data_s"], "compute": share["compute_s"] + share["opt_s"], "communication": share["comm_s"]}
    bound = max(shares, key=shares.get)
    assert f"{bound}-bound ({100 * shares[bound]:.0f}% of the step)" in sentence
    # the link each configuration measured (QUICK: loopback; one process: none), and its communication share
    assert ("Link of stepwise 2×1cpu (1 run): this machine's loopback, shared by all processes and unshaped: on "
            "loopback strategies differ only by their compute share.") in verdict
    one_process = re.search(r"^Link of ([^:]*) \(\d+ runs\): none \(one process\)\.$", verdict, re.M)[1]
    assert sorted(one_process.split(", ")) == ["allreduce 1×1cpu", "single 1×1cpu", "single 1×2cpu"]
    comm = re.search(r"stepwise 2×1cpu ([\d.]+)% \(1 run\)", verdict)  # shown to 2 significant digits
    assert float(comm[1]) == pytest.approx(100 * share["comm_s"], rel=0.06, abs=0.05)
    assert "unequal length" not in sentence  # the longest configuration: 2 workers x 6 steps

    assert "1.00× single 1×1cpu" not in entries["single 1×1cpu"]
    assert "is the equal-resource baseline (1 CPU)" in entries["single 1×1cpu"]
    by_block = {(summary_of(d)["config"]["strategy"]["name"], summary_of(d)["config"]["block"]):
                summary_of(d)["throughput_samples_per_s"] for d in single_1cpu + allreduce}
    paired = statistics.geometric_mean([by_block["allreduce", b] / by_block["single", b] for b in (0, 1)])
    assert f"throughput speedup {paired:.2f}× [" in entries["allreduce 1×1cpu"] and "2 blocks) vs single 1×1cpu" in \
        entries["allreduce 1×1cpu"]
    assert "Control arm (the equal-resource baseline run twice in every block" in verdict
    for label in ("single 1×1cpu", "allreduce 1×1cpu", "single 1×2cpu"):
        assert "[⚠ 1 configuration of unequal length](#s1-caveat-of-unequal-length)" in entries[label]
        assert f"- {label}: 192 samples trained, 384 in the longest configuration" in markdown
    assert "Baselines missing" not in markdown
    page = (full_report / "report.html").read_text()
    assert page.index("<section id='verdict'>") < page.index("<h2>data=")
    assert "Throughput vs peers" in page and "Bytes per sample" in page


def test_missing_baseline_is_named_with_the_command_that_makes_it(multirun, scaling, tmp_path):
    from hydra import compose, initialize_config_dir

    from metrics.report.baselines import missing_baselines

    stepwise, _ = scaling
    assert missing_baselines(runs_under(multirun[0], *scaling)) == []
    missing = missing_baselines(runs_under(multirun[0], stepwise))
    assert missing == [{"strategy": "single", "peers": 2, "peer_cpus": 1, "model": "tiny", "device": "cpu",
                        "max_steps": 6, "eval_every": 10, "sampler.interval": 0.2}]
    with initialize_config_dir(str(ROOT / "conf"), version_base="1.3"):  # the overrides rebuild stepwise's job
        composed = flatten(OmegaConf.to_container(compose("config", [f"{k}={v}" for k, v in missing[0].items()])))
    job = {k: v for k, v in flatten(summary_of(stepwise)["config"]).items()
           if not k.startswith(("strategy.", "stepwise.", "peers", "seed", "progress", "transport",
                                "network"))}  # a baseline is one process: it has no link
    assert {k: composed.get(k) for k in job} == job

    result = run_cli(multirun[0], stepwise, "-o", tmp_path)
    assert result.returncode == 0, result.stderr
    markdown = (tmp_path / "report.md").read_text()
    verdict = verdict_of(markdown)
    assert "no equal-resource baseline (a single run with 2 CPUs; command below)" in \
        verdict_entries(verdict)["stepwise 2×1cpu"]
    assert "    python train.py strategy=single peers=2 peer_cpus=1 model=tiny " in verdict


def test_labels_name_only_what_differs(multirun):
    from metrics.report.runs import label_groups

    run = load_run(run_dirs(multirun[0])[0])

    def variant(strategy, peers=1, peer_cpus=1, knobs=None, from_ring_sweep=False, **config):
        summary = copy.deepcopy(run.summary.to_dict())
        summary["config"] |= {"strategy": {"name": strategy}, "peers": peers, "peer_cpus": peer_cpus, **config}
        if knobs:
            summary["config"][strategy] = knobs
        if from_ring_sweep:  # ++ring.controller=mpi: an unused entry in every run of that sweep
            summary["config"].setdefault("ring", {"controller": "mpi"})
        summary["strategy_knobs"] = ({} if strategy == "single" else {"transport": "gloo"}) | (knobs or {})
        return Run(run.path, Summary.from_dict(summary), [])

    def labels(*runs):
        groups = group_runs(list(runs))
        label_groups(groups)
        return [g.label for g in groups]

    sweep = [variant("single"), variant("single", peer_cpus=4, from_ring_sweep=True),
             variant("ps", peers=4, knobs={"servers": 1, "mode": "sync"}),
             variant("stepwise", peers=4, knobs={"chunks": 4, "rotate": True}, from_ring_sweep=True),
             variant("stepwise", peers=4, knobs={"chunks": 8, "rotate": True}),
             variant("ring", peers=4, knobs={"controller": "mpi", "compression": "none"}, from_ring_sweep=True)]
    assert labels(*sweep) == ["single 1×1cpu", "single 1×4cpu", "ps 4×1cpu", "stepwise(chunks=4) 4×1cpu",
                              "stepwise(chunks=8) 4×1cpu", "ring 4×1cpu"]
    assert labels(variant("allreduce", lr=0.1), variant("allreduce", lr=0.01)) == ["allreduce lr=0.1",
                                                                                  "allreduce lr=0.01"]
    assert labels(variant("single"), variant("allreduce", from_ring_sweep=True)) == ["single", "allreduce"]
    sgd, adamw = {"name": "sgd", "momentum": 0.9}, {"name": "adamw", "betas": [0.9, 0.999]}
    assert labels(variant("single", optim=sgd), variant("single", optim=adamw, lr=0.001)) == \
        ["single lr=0.01 optim=sgd", "single lr=0.001 optim=adamw"]  # the optimizer's name, not its every setting


def test_caveats_stand_beside_the_row_they_concern(scaling):
    from metrics.report.baselines import attach_baselines
    from metrics.report.runs import sections_of
    from metrics.report import verdict

    run = load_run(scaling[0])
    summary = run.summary.to_dict()
    summary["lost_peers"] = [1]
    summary["failure_counters"] = ["rounds_failed"]  # declared by the run's strategy
    for peer in summary["peers"]:
        peer["result"]["strategy"]["rounds_failed"] = 2
    run.summary = Summary.from_dict(summary)
    longer = load_run(scaling[0])
    summary = longer.summary.to_dict()
    summary["config"]["max_steps"] = 12
    summary["total_samples"] *= 2
    longer.summary = Summary.from_dict(summary)
    groups = group_runs([run, longer])
    attach_baselines(groups)
    section = sections_of(groups)[0]
    setting = (verdict.NOT_ALONE, verdict.NOT_ISOLATED, verdict.OVERSUBSCRIBED, *verdict.UNFAITHFUL.values(),
               verdict.SPEED_MOVED, verdict.SHORT_WINDOW)  # the machine's load, not these runs'

    def caveats(group):
        return [(kind, detail.split(": ", 1)[1]) for kind, detail in verdict.caveats_of(group, section)
                if kind not in setting]

    assert caveats(groups[0]) == [
        (verdict.MISSED, "target not reached"), (verdict.LOST_PEERS, "lost peers 1"),
        (verdict.FAILED_ROUNDS, "rounds_failed=2"), (verdict.UNEQUAL_LENGTH, "max_steps=6 (this comparison: 6, 12); "
                                                    "384 samples trained, 768 in the longest configuration")]
    assert caveats(groups[1]) == [(verdict.MISSED, "target not reached"),
                                  (verdict.UNEQUAL_LENGTH, "max_steps=12 (this comparison: 6, 12)")]


def test_convergence_band_is_the_spread_of_the_workers(scaling):
    from metrics.report.plots import run_curve

    stepwise, _ = scaling
    finals = [100 * read_jsonl(p)[-1]["test_accuracy"] for p in sorted(stepwise.glob("peer*/eval.jsonl"))]
    assert min(finals) < max(finals), "stepwise's workers end on different models"
    time_s, samples, mean, low, high = run_curve(load_run(stepwise), "accuracy", 1)
    assert (low[-1], high[-1]) == (min(finals), max(finals)) and mean[-1] == pytest.approx(statistics.fmean(finals))
    assert samples[-1] == summary_of(stepwise)["total_samples"]


def test_cli_rebuilds_from_directories(multirun, tmp_path):
    sweep, _ = multirun
    result = run_cli(*run_dirs(sweep), "-o", tmp_path / "out")
    assert result.returncode == 0, result.stderr
    assert all((tmp_path / "out" / name).exists() for name in REPORT_FILES)
    assert len(read_csv(tmp_path / "out" / "runs.csv")) == 6
    tables = lambda md: [line for line in md.splitlines() if line.startswith("|")]  # noqa: E731
    assert tables((tmp_path / "out" / "report.md").read_text()) == tables((sweep / "report.md").read_text())


def test_crashed_run_appears_with_its_error(multirun, other_runs, tmp_path):
    crashed, _ = other_runs
    assert not (crashed / "report.html").exists()  # a single run writes no report
    result = run_cli(multirun[0], crashed, "-o", tmp_path)
    assert result.returncode == 0, result.stderr
    markdown = (tmp_path / "report.md").read_text()
    failure_row = next(line for line in markdown.splitlines() if "| failed | 1 | 0 |" in line)
    assert "InjectedFault: injected failure on rank 0 at step 3" in failure_row
    fault_tolerance = lambda row: row.split(" | ")[7]  # noqa: E731  (Failures: the column after lost peers)
    assert re.fullmatch(r"failed in [0-9.]+ s", fault_tolerance(failure_row))  # an injected fault
    assert {fault_tolerance(line) for line in markdown.splitlines() if "| completed | 0 |" in line} == {"–"}
    assert "## Errors" in markdown and "Traceback" in markdown
    crashed_entry = next(text for label, text in verdict_entries(verdict_of(markdown)).items() if "fault" in label)
    assert "[⚠ 1 run failed](#s1-caveat-failed)" in crashed_entry
    assert re.search(r"^- .*fault.*: failed \(seed 0\): .*InjectedFault: injected failure on rank 0", markdown, re.M)
    crashed_row = next(r for r in read_csv(tmp_path / "runs.csv") if r["status"] == "failed")
    assert crashed_row["fault_tolerance"].startswith("failed in ")
    assert crashed_row["failed_rank"] == "0" and int(crashed_row["total_samples"]) == 2 * 32  # partial data


def test_runs_of_different_datasets_are_not_ranked_together(multirun, other_runs, tmp_path):
    _, synthetic = other_runs
    result = run_cli(multirun[0], synthetic, "-o", tmp_path)
    assert result.returncode == 0, result.stderr
    markdown = (tmp_path / "report.md").read_text()
    verdict = verdict_of(markdown)
    assert "cover 2 (dataset / model) combinations" in verdict and "never against each other" in verdict
    digits_ranking, synthetic_ranking = verdict.split("### data=synthetic, model=tiny [synthetic data]")
    assert set(verdict_entries(digits_ranking)) == {"single", "allreduce"}
    assert list(verdict_entries(synthetic_ranking)) == ["single"]
    assert "synthetic data: throughput only" in synthetic_ranking and "worst worker" not in synthetic_ranking
    digits, synthetic_part = markdown.split("\n## data=synthetic, model=tiny [synthetic data]")
    assert "## data=digits, model=tiny" in digits
    # Each section ranks from 1; the synthetic run is ranked by throughput and has no accuracy figure.
    assert re.search(r"^\| 1 \| single", synthetic_part, re.M) and "n/a (synthetic)" in synthetic_part
    assert "then by mean global throughput, the primary figure" in synthetic_part
    html_page = (tmp_path / "report.html").read_text()
    assert html_page.count("<h2>data=") == 2 and "Convergence (synthetic data: no convergence meaning)" in html_page


def test_repeats_are_grouped_by_everything_but_seed(multirun):
    runs = [load_run(p) for p in run_dirs(multirun[0])]
    groups = group_runs(runs)
    assert sorted((g.first.strategy, g.is_control, g.seeds()) for g in groups) == [
        ("allreduce", False, [1, 2]), ("single", False, [1, 2]), ("single", True, [1, 2])]  # the control: apart


def test_cli_input_errors(tmp_path):
    empty = run_cli(tmp_path)
    assert empty.returncode == 2 and "no runs" in empty.stderr
    several = run_cli(tmp_path, tmp_path)
    assert several.returncode == 2 and "-o OUT" in several.stderr
    missing = run_cli(tmp_path / "nope")
    assert missing.returncode == 2 and "not a directory" in missing.stderr


def test_failed_report_is_logged_and_counted(tmp_path, capsys, monkeypatch):
    from launchers import sweep

    monkeypatch.setattr(sweep, "JOBS", sweep.Jobs())
    sweep.SweepReport().on_multirun_end(OmegaConf.create({"hydra": {"sweep": {"dir": str(tmp_path)}}}))
    assert "comparison report for" in capsys.readouterr().err
    assert sweep.JOBS.report_errors and "no runs" in sweep.JOBS.report_errors[0]


def test_unreadable_summary_is_left_out_and_named(multirun, tmp_path):
    (tmp_path / "torn").mkdir()
    (tmp_path / "torn" / "summary.json").write_text('{"status": "fail')
    result = run_cli(multirun[0], tmp_path / "torn", "-o", tmp_path / "out")
    assert result.returncode == 0, result.stderr
    assert f"Left out of this report: {tmp_path / 'torn'} (unreadable summary.json" in \
        (tmp_path / "out" / "report.md").read_text()
    alone = run_cli(tmp_path / "torn")
    assert alone.returncode == 2 and "unreadable summary.json" in alone.stderr


def test_strategy_summary_figures_of_any_strategy(multirun):
    """Figures a strategy reports in result.json (peers[*].result.strategy) reach the tables, whatever their names;
    the Failures table shows those the strategy declared as failure counters (summary.json), and only those."""
    from metrics.report.tables import failures_table, strategy_table

    run = load_run(run_dirs(multirun[0])[0])
    summary = run.summary.to_dict()
    for rank, peer in enumerate(summary["peers"]):
        peer["result"]["strategy"] = {"rounds": {"ok": 9 + rank, "failed": 1}, "group": "a", "timeouts_ok": 0}
    summary["failure_counters"] = ["rounds.failed"]
    run.summary = Summary.from_dict(summary)
    assert run.strategy_figures() == {"rounds.ok": 9.0, "rounds.failed": 1.0, "group": "a", "timeouts_ok": 0.0}
    group = group_runs([run])[0]
    table = strategy_table([group])
    assert table.columns[1:] == ["group", "rounds.failed", "rounds.ok", "timeouts_ok"]
    assert table.rows[0][1:] == ["a", "1", "9", "0"]
    failures = failures_table([group])
    assert failures.rows[0][failures.columns.index("strategy failure counters")] == "rounds.failed=1"


def test_bytes_table_puts_the_accuracy_cost_beside_the_bytes():
    """Bytes saved and accuracy lost in one row: the worst worker's final accuracy minus its equal-resource
    baseline's, per block where both completed, mean over blocks (hand-made runs, no process)."""
    from metrics.report.baselines import attach_baselines
    from metrics.report.runs import label_groups
    from metrics.report.tables import bytes_table

    def made(strategy: str, block: int, worst: float, peer_cpus: int = 1, status: str = "completed") -> Run:
        config = {"strategy": {"name": strategy}, "data": {"name": "digits"}, "model": {"name": "tiny"}, "peers": 2,
                  "peer_cpus": peer_cpus, "batch_size": 32, "lr": 0.01, "seed": block, "block": block}
        summary = {"status": status, "config": config, "is_baseline": strategy == "single",
                   "throughput_samples_per_s": 100.0, "accuracy_by_worker": {"worst": worst},
                   "bytes_sent_per_sample": 0 if strategy == "single" else 500}
        return Run(Path(f"/runs/{strategy}{peer_cpus}/{block}"), Summary.from_dict(summary), [])

    baseline = [made("single", b, a) for b, a in enumerate([0.90, 0.92, 0.94, 0.90])]
    # blocks 0-2: -0.02, -0.01, -0.04; block 3 failed and block 4 has no baseline: neither counts
    localsgd = [made("localsgd", 0, 0.88), made("localsgd", 1, 0.91), made("localsgd", 2, 0.90),
                made("localsgd", 3, 0.10, status="failed"), made("localsgd", 4, 0.50)]
    groups = group_runs([*baseline, *localsgd, made("ps", 0, 0.9, peer_cpus=2)])
    attach_baselines(groups)
    label_groups(groups)
    table = bytes_table(groups, synthetic=False)
    column = table.columns.index("accuracy vs baseline (points)")
    cells = {row[0]: row[column] for row in table.rows}
    assert cells == {"single 2×1cpu": "–", "localsgd 2×1cpu": "-2.3 (3 blocks, vs single 2×1cpu)",
                     "ps 2×2cpu": "no single baseline with 4 CPUs"}
    assert bytes_table(groups, synthetic=True).rows[1][column] == "n/a (synthetic)"  # localsgd: no accuracy meaning
