"""The comparison report: written by a real multirun, rebuilt by the CLI, rendered by headless Chromium."""
import base64
import csv
import io
import re
import shutil
import subprocess
import sys

import pytest
from omegaconf import OmegaConf
from PIL import Image

from conftest import QUICK, ROOT, run_train
from metrics import report
from metrics.report_data import group_runs, load_run

REPORT_FILES = ("report.html", "report.md", "runs.csv")
pytestmark = pytest.mark.timeout(600)  # the first test also pays for the module's runs (4 + 2 short runs)


@pytest.fixture(scope="module")
def multirun(tmp_path_factory):
    """single and allreduce, two seeds each: a report with repeats."""
    sweep = tmp_path_factory.mktemp("multirun")
    result = subprocess.run(
        [sys.executable, str(ROOT / "train.py"), "-m", "strategy=single,allreduce", "peers=1", "seed=1,2",
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


def read_csv(path):
    with open(path, newline="") as f:
        return list(csv.DictReader(f))


def run_cli(*args):
    return subprocess.run([sys.executable, "-m", "metrics.report", *map(str, args)], cwd=ROOT,
                          capture_output=True, text=True, timeout=120)


def chromium(*args, tmp_path):
    binary = shutil.which("chromium")
    assert binary, "chromium is missing: scripts/setup.sh installs it (Debian package chromium)"
    return subprocess.run([binary, "--headless", "--no-sandbox", "--disable-gpu", "--disable-quic", "--no-first-run",
                           "--disable-background-networking", "--disable-component-update", "--disable-sync",
                           f"--user-data-dir={tmp_path / 'chromium-profile'}", *args],
                          capture_output=True, text=True, timeout=120)


def test_multirun_writes_the_report(multirun):
    sweep, result = multirun
    assert "comparison report" in result.stdout
    assert all((sweep / name).stat().st_size > 0 for name in REPORT_FILES)

    rows = read_csv(sweep / "runs.csv")
    assert sorted((r["config.strategy.name"], r["config.seed"]) for r in rows) == [
        ("allreduce", "1"), ("allreduce", "2"), ("single", "1"), ("single", "2")]
    for row in rows:
        assert row["status"] == "completed" and float(row["throughput_samples_per_s"]) > 0
        assert float(row["speedup_vs_single"]) > 0  # the single run with 1 CPU is the baseline of both
        assert row["config.transport"] == "gloo"

    markdown = (sweep / "report.md").read_text()
    for title in ("Configurations", "Time, throughput and convergence", "Communication payload",
                  "Time breakdown per step", "Resources per peer", "Failures", "Methods"):
        assert f"{title}" in markdown
    # Repeats are one row each with mean ± sd; the allreduce row names its knob.
    config_rows = [line for line in markdown.splitlines() if re.match(r"\| [12] \| ", line)]
    assert any("| single | – |" in line and "| 1, 2 |" in line for line in config_rows)
    assert any("| allreduce | transport=gloo |" in line for line in config_rows)
    assert "±" in markdown and "host-wide" in markdown


def test_report_renders_in_headless_chromium(multirun, tmp_path):
    sweep, _ = multirun
    page = (sweep / "report.html").read_text()
    images = re.findall(r"data:image/png;base64,([A-Za-z0-9+/=]+)", page)
    assert len(images) >= 5
    for data in images:  # every embedded plot is a real, non-trivial image
        image = Image.open(io.BytesIO(base64.b64decode(data)))
        assert image.width > 300 and len(image.convert("RGB").getcolors(1 << 20)) > 20

    dom = chromium("--dump-dom", (sweep / "report.html").as_uri(), tmp_path=tmp_path)
    assert dom.returncode == 0, dom.stderr
    assert dom.stdout.count("<img") == len(images) and dom.stdout.count("<table") >= 6
    assert "Convergence" in dom.stdout and "allreduce(transport=gloo)" in dom.stdout

    shot = tmp_path / "report.png"
    rendered = chromium("--window-size=1280,2400", f"--screenshot={shot}", (sweep / "report.html").as_uri(),
                        tmp_path=tmp_path)
    assert rendered.returncode == 0 and shot.exists(), rendered.stderr
    pixels = Image.open(shot).convert("L").getdata()
    non_white = sum(1 for p in pixels if p < 240) / len(pixels)
    assert non_white > 0.03  # text, tables and plots, not a blank page
    assert len(Image.open(shot).convert("RGB").getcolors(1 << 20)) > 100  # coloured plot lines, not just text


def test_cli_rebuilds_from_directories(multirun, tmp_path):
    sweep, _ = multirun
    run_dirs = sorted(p for p in sweep.iterdir() if (p / "summary.json").exists())
    result = run_cli(*run_dirs, "-o", tmp_path / "out")
    assert result.returncode == 0, result.stderr
    assert all((tmp_path / "out" / name).exists() for name in REPORT_FILES)
    assert len(read_csv(tmp_path / "out" / "runs.csv")) == 4
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
    fault_tolerance = lambda row: row.split(" | ")[6]  # noqa: E731  (Failures: the column after lost peers)
    assert re.fullmatch(r"failed in [0-9.]+ s", fault_tolerance(failure_row))  # an injected fault
    assert {fault_tolerance(line) for line in markdown.splitlines() if "| completed | 0 |" in line} == {"–"}
    assert "## Errors" in markdown and "Traceback" in markdown
    crashed_row = next(r for r in read_csv(tmp_path / "runs.csv") if r["status"] == "failed")
    assert crashed_row["fault_tolerance"].startswith("failed in ")
    assert crashed_row["failed_rank"] == "0" and int(crashed_row["total_samples"]) == 2 * 32  # partial data


def test_runs_of_different_datasets_are_not_ranked_together(multirun, other_runs, tmp_path):
    _, synthetic = other_runs
    result = run_cli(multirun[0], synthetic, "-o", tmp_path)
    assert result.returncode == 0, result.stderr
    markdown = (tmp_path / "report.md").read_text()
    assert "cover 2 (dataset / model) combinations" in markdown and "never against each other" in markdown
    digits, synthetic_part = markdown.split("## data=synthetic, model=tiny [synthetic data]")
    assert "## data=digits, model=tiny" in digits
    # Each section ranks from 1; the synthetic run is ranked by throughput and has no accuracy figure.
    assert re.search(r"^\| 1 \| single", synthetic_part, re.M) and "n/a (synthetic)" in synthetic_part
    assert "Ranked by global throughput" in synthetic_part
    html_page = (tmp_path / "report.html").read_text()
    assert html_page.count("<h2>data=") == 2 and "Convergence (synthetic data: no convergence meaning)" in html_page


def test_repeats_are_grouped_by_everything_but_seed(multirun):
    runs = [load_run(p) for p in sorted(multirun[0].iterdir()) if (p / "summary.json").exists()]
    groups = group_runs(runs)
    assert sorted((g.first.strategy, g.seeds()) for g in groups) == [("allreduce", [1, 2]), ("single", [1, 2])]


def test_cli_input_errors(tmp_path):
    empty = run_cli(tmp_path)
    assert empty.returncode == 2 and "no runs" in empty.stderr
    several = run_cli(tmp_path, tmp_path)
    assert several.returncode == 2 and "-o OUT" in several.stderr
    missing = run_cli(tmp_path / "nope")
    assert missing.returncode == 2 and "not a directory" in missing.stderr


def test_failed_report_is_logged_and_counted(tmp_path, capsys, monkeypatch):
    monkeypatch.setattr(report, "report_errors", [])
    report.ReportCallback().on_multirun_end(OmegaConf.create({"hydra": {"sweep": {"dir": str(tmp_path)}}}))
    assert "comparison report for" in capsys.readouterr().err
    assert report.report_errors and "no runs" in report.report_errors[0]


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
    """Figures a strategy reports in result.json (peers[*].result.strategy) reach the tables, whatever their names."""
    from metrics.report_tables import failures_table, strategy_table

    run = load_run(next(p for p in sorted(multirun[0].iterdir()) if (p / "summary.json").exists()))
    for rank, peer in enumerate(run.summary["peers"]):
        peer["result"]["strategy"] = {"rounds": {"ok": 9 + rank, "failed": 1}, "group": "a"}
    assert run.strategy_figures() == {"rounds.ok": 9.0, "rounds.failed": 1.0, "group": "a"}
    group = group_runs([run])[0]
    table = strategy_table([group])
    assert table.columns[1:] == ["group", "rounds.failed", "rounds.ok"] and table.rows[0][1:] == ["a", "1", "9"]
    failures = failures_table([group])
    assert "rounds.failed=1" in failures.rows[0][failures.columns.index("strategy failure counters")]
