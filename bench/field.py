"""Published experiments with N >= 16, predicted by the projection from their single-device figures alone."""
import json
from dataclasses import asdict, dataclass
from pathlib import Path

from bench.jobs import train
from metrics.projection.evidence import Evidence, load_evidence
from metrics.projection.link import parse_link
from metrics.projection.project import calibration_problems, declared, measure, project

STEP_GOAL = 0.15        # |predicted / published step - 1|
EFFICIENCY_GOAL = 10.0  # |predicted - published scaling efficiency|, in points
GOAL_SHARE = 0.8        # of the cases within their goal
RUN_ATTEMPTS = 3        # structural runs tried until one holds its link and CPU
STRUCTURAL = ("model=tiny", "peers=2", "max_steps=30", "eval_every=0")
FP32 = 4                # bytes per gradient value

SOURCES = {
    "pytorch_ddp_benchmark": {
        "citation": "PyTorch, benchmarks/distributed/ddp/README.md (the DDP benchmark suite's example output: "
                    "PyTorch 1.4.0a0+05140f0, CUDA 10.0, NCCL), github.com/pytorch/pytorch",
        "hardware": "the README's closing paragraph, of its diff example on the same PyTorch build: 'DGX machines "
                    "with V100 GPUs', '4x 100Gb InfiniBand per machine'; the example output's nvidia-smi topology "
                    "shows 8 NVLink-connected GPUs and 4 mlx5 cards per machine; 16 GPUs = '2M/8G' (2 machines x 8 "
                    "GPUs); batch 32 per GPU; bucket_cap_mb 25 (the default)",
        "figure": "step_s",
    },
    "horovod_benchmarks": {
        "citation": "Horovod, docs/benchmarks.rst (512 GPUs: '128 servers with 4 Pascal GPUs each connected by "
                    "RoCE-capable 25 Gbit/s network ... 90% scaling efficiency for both Inception V3 and ResNet-101, "
                    "and 68% scaling efficiency for VGG-16') and the README of github.com/alsrgv/horovod (128 GPUs: "
                    "'32 servers with 4 Pascal GPUs each connected by RoCE-capable 25 Gbit/s network ... 90% ... "
                    "and 79% scaling efficiency for VGG-16'); tf_cnn_benchmarks, --batch_size 64, "
                    "--variable_update horovod",
        "hardware": "servers of 4 Pascal GPUs, one RoCE-capable 25 Gbit/s network; single-device throughput: "
                    "TensorFlow's benchmarks page (tensorflow/docs_src/performance/benchmarks.md, 'Details for NVIDIA "
                    "DGX-1 (NVIDIA Tesla P100)', 'Training synthetic data', 1 GPU, batch 64 per GPU): the Pascal GPU "
                    "taken to be a P100, which the Horovod text does not say",
        "figure": "efficiency",
    },
}

LEFT_OUT = [
    "Horovod's ResNet-101 (90 % at 128 and 512 GPUs): no single-device throughput of ResNet-101 on a Pascal GPU "
    "was found in a source (TensorFlow's P100 table has ResNet-50 and ResNet-152, not ResNet-101)",
    "hivemind-style averaging over slow links (Moshpit SGD, DeDLOC): hivemind's cost model failed its validation, "
    "so the projection gives no number for it (docs/projection.md)",
]

LIMITS = [
    "overlap: the structural run (a tiny CNN, one bucket) hid little communication behind backward, and the "
    "command line keeps that share of compute under a declared compute; DDP's buckets and Horovod's fusion hide "
    "more of the all-reduce behind a GPU's backward, which these predictions do not credit",
    "engine cost: the projection prices communication by the link rate alone; no per-byte CPU or GPU cost of the "
    "engine (NCCL here) enters, neither this machine's nor the cluster's",
    "payload share: a TCP stream's in 1500-byte frames on emulated links, applied to RoCE and InfiniBand",
    "topology: NCCL's rings and the nodes' NVLink/PCIe are mapped onto the cost model's one link per worker by "
    "giving it the node's network rate (the ring's slowest hop); per_gpu_share shows the other reading",
    "latency: not stated by the sources, taken as 0",
    "inputs from other sources: the Pascal GPU of Horovod's benchmark taken to be TensorFlow's P100 (DGX-1) of the "
    "same tf_cnn_benchmarks at batch 64; parameter counts of Keras's InceptionV3 and VGG16 for tf_cnn_benchmarks' "
    "models; the published efficiencies are whole percents",
]


@dataclass
class Case:
    """One published run: its source and what the prediction may use (single device, model size, link)."""

    source: str                # a key of SOURCES
    where: str                 # the table, passage or row the figures were read from
    model: str
    strategy: str              # the engine here: allreduce (torch DDP), ring (Horovod)
    peers: int                 # N, devices in all
    gpus_per_node: int
    link_mbit: float           # the node's network rate, Mbit/s (every card together)
    batch: int                 # samples per device and step
    compute_s: float           # one device's step, s: the source's single-device figure
    compute_from: str          # that figure as the source states it
    parameters: float          # the model's parameter count
    parameters_from: str
    published: float           # step time in s (figure step_s) or scaling efficiency in % (figure efficiency)

    @property
    def figure(self) -> str:
        return SOURCES[self.source]["figure"]

    @property
    def gradient_mb(self) -> float:
        return self.parameters * FP32 / 1e6


DDP_WHERE = "README example output, 'Benchmark: {} with batch size 32', p50 sec/iter of '1 GPUs -- no ddp' and " \
            "'16 GPUs -- 2M/8G'"
TORCHVISION = "torchvision model documentation, num_params"
P100 = "TensorFlow benchmarks, DGX-1 P100, training synthetic data, 1 GPU, batch 64: {} images/s"
KERAS = "Keras Applications table (keras.io/api/applications rounds them: 23.9M, 138.4M; full counts as an " \
        "earlier version of that table lists them): {} parameters"

CASES = [
    Case("pytorch_ddp_benchmark", DDP_WHERE.format("resnet50"), "resnet50", "allreduce", 16, 8, 400_000, 32,
         0.097, "0.097 s/iter (329/s) on 1 GPU without DDP", 25_557_032, TORCHVISION + " 25557032", 0.104),
    Case("pytorch_ddp_benchmark", DDP_WHERE.format("resnet101"), "resnet101", "allreduce", 16, 8, 400_000, 32,
         0.162, "0.162 s/iter (197/s) on 1 GPU without DDP", 44.5e6, "torchvision ResNet101_Weights.IMAGENET1K_V1: "
         "44.5M parameters (as tabulated in the lucid-dl/resnet-101 model card)", 0.179),
    Case("pytorch_ddp_benchmark", DDP_WHERE.format("resnext50_32x4d"), "resnext50_32x4d", "allreduce", 16, 8, 400_000,
         32, 0.145, "0.145 s/iter (220/s) on 1 GPU without DDP", 25_028_904, TORCHVISION + " 25028904", 0.157),
    Case("pytorch_ddp_benchmark", DDP_WHERE.format("resnext101_32x8d"), "resnext101_32x8d", "allreduce", 16, 8,
         400_000, 32, 0.415, "0.415 s/iter (77/s) on 1 GPU without DDP", 88_791_336, TORCHVISION + " 88791336",
         0.450),
    Case("horovod_benchmarks", "README of alsrgv/horovod, the 128-GPU benchmark (32 servers x 4 GPUs)", "inception3",
         "ring", 128, 4, 25_000, 64, 64 / 142, P100.format(142), 23_851_784, KERAS.format("InceptionV3: 23,851,784"),
         90.0),
    Case("horovod_benchmarks", "README of alsrgv/horovod, the 128-GPU benchmark (32 servers x 4 GPUs)", "vgg16",
         "ring", 128, 4, 25_000, 64, 64 / 154, P100.format(154), 138_357_544, KERAS.format("VGG16: 138,357,544"),
         79.0),
    Case("horovod_benchmarks", "docs/benchmarks.rst, the 512-GPU benchmark (128 servers x 4 GPUs)", "inception3",
         "ring", 512, 4, 25_000, 64, 64 / 142, P100.format(142), 23_851_784, KERAS.format("InceptionV3: 23,851,784"),
         90.0),
    Case("horovod_benchmarks", "docs/benchmarks.rst, the 512-GPU benchmark (128 servers x 4 GPUs)", "vgg16",
         "ring", 512, 4, 25_000, 64, 64 / 154, P100.format(154), 138_357_544, KERAS.format("VGG16: 138,357,544"),
         68.0),
]


def cli_arguments(case: Case, link_mbit: float | None = None) -> list[str]:
    """The command line's arguments that ask for this case's prediction (after the run directory)."""
    return ["--peers", str(case.peers), "--link", f"{link_mbit or case.link_mbit:g}",
            "--compute-s", repr(case.compute_s), "--gradient-mb", repr(case.gradient_mb)]


def predicted_row(case: Case, run: Path, evidence: Evidence, link_mbit: float | None = None) -> dict:
    """The projection's row for this case, through the command line's functions (declared compute and size)."""
    m = declared(measure(run, evidence.payload_shares, evidence), step_s=case.compute_s,
                 gradient_mb=case.gradient_mb)
    result = project(m, [parse_link(f"{link_mbit or case.link_mbit:g}")], [case.peers], evidence)
    return result["projections"][0]["rows"][0] | {"hidden_s": m.hidden_s}


def judged(case: Case, step_s: float | None) -> dict:
    """Predicted figure, error against the published one and whether it is within the goal."""
    if step_s is None:
        return {"predicted": None, "error": None, "within_goal": False}
    if case.figure == "step_s":
        error = step_s / case.published - 1
        return {"predicted": step_s, "error": error, "within_goal": abs(error) <= STEP_GOAL}
    efficiency = 100 * case.compute_s / step_s
    error = efficiency - case.published
    return {"predicted": efficiency, "error": error, "within_goal": abs(error) <= EFFICIENCY_GOAL}


def rankings(rows: list[dict]) -> list[dict]:
    """Every pair of one source's cases whose published figures differ, and whether the predictions keep its order."""
    pairs = []
    for i, a in enumerate(rows):
        for b in rows[i + 1:]:
            if a["source"] != b["source"] or a["published"] == b["published"] or None in (a["predicted"],
                                                                                          b["predicted"]):
                continue
            pairs.append({"source": a["source"], "pair": [a["label"], b["label"]],
                          "published": [a["published"], b["published"]], "predicted": [a["predicted"], b["predicted"]],
                          "preserved": (a["published"] > b["published"]) == (a["predicted"] > b["predicted"])})
    return pairs


def case_row(case: Case, run: Path, evidence: Evidence) -> dict:
    row = predicted_row(case, run, evidence)
    shared = predicted_row(case, run, evidence, case.link_mbit / case.gpus_per_node)
    return (asdict(case) | {"label": f"{case.model} N={case.peers}", "figure": case.figure,
                            "gradient_mb": case.gradient_mb, "cli": cli_arguments(case),
                            "predicted_step_s": row["step_s"], "hidden_s": row["hidden_s"],
                            "unvalidated_why": row["unvalidated_why"], "withheld": row["withheld"]}
            | judged(case, row["step_s"])
            | {"per_gpu_share": {"link_mbit": case.link_mbit / case.gpus_per_node, "counted": False}
               | judged(case, shared["step_s"])})


def summarize(rows: list[dict]) -> dict:
    """The share within the goal, the rankings per source and whether both goals were met."""
    pairs = rankings(rows)
    share = sum(r["within_goal"] for r in rows) / len(rows)
    by_source = {s: {"cases": sum(r["source"] == s for r in rows),
                     "within_goal": sum(r["within_goal"] for r in rows if r["source"] == s),
                     "rankings": sum(p["source"] == s for p in pairs),
                     "rankings_preserved": sum(p["preserved"] for p in pairs if p["source"] == s)} for s in SOURCES}
    every_ranking = all(p["preserved"] for p in pairs)
    return {"share_within_goal": share, "rankings": pairs, "every_ranking_preserved": every_ranking,
            "by_source": by_source, "goal_met": share >= GOAL_SHARE and every_ranking}


def structural_run(strategy: str, evidence: Evidence, cases: list[Case]) -> tuple[list[dict], dict]:
    """The strategy run here until a run holds its link and CPU; its cases' rows and what the run gave."""
    attempts = []
    for _ in range(RUN_ATTEMPTS):
        with train(f"strategy={strategy}", *STRUCTURAL) as run:
            problems = calibration_problems(run)
            attempts.append(problems)
            if problems:
                continue
            m = measure(run, evidence.payload_shares, evidence)
            return [case_row(c, run, evidence) for c in cases], {
                "overrides": [f"strategy={strategy}", *STRUCTURAL], "attempts": len(attempts),
                "refused_attempts": attempts[:-1], "knobs": m.knobs, "measured_compute_s": m.compute_s,
                "hidden_s": m.hidden_s, "compute_of": m.compute_of}
    raise RuntimeError(f"no {strategy} run held its link and CPU in {RUN_ATTEMPTS} attempts: {attempts}")


def run() -> dict:
    evidence = load_evidence()
    rows, runs = [], {}
    for strategy in dict.fromkeys(c.strategy for c in CASES):
        found, runs[strategy] = structural_run(strategy, evidence, [c for c in CASES if c.strategy == strategy])
        rows += found
    figures = summarize(rows)
    return {
        "name": "field",
        "ratio": figures["share_within_goal"],
        "goal": f">= {GOAL_SHARE:.0%} within ±{STEP_GOAL:.0%} step or ±{EFFICIENCY_GOAL:g} points, rankings kept",
        "setup": f"{len(CASES)} published cases (N = {min(c.peers for c in CASES)}-{max(c.peers for c in CASES)}) "
                 f"from {len(SOURCES)} sources, predicted from single-device compute, model size and link",
        "sources": SOURCES,
        "left_out": LEFT_OUT,
        "limits": LIMITS,
        "payload_shares": evidence.payload_shares,
        "structural_runs": runs,
        "rows": rows,
        **figures,
    }


if __name__ == "__main__":
    print(json.dumps(run(), indent=1, default=str))
