"""One peer process, `python -m job.worker RUN_DIR` (job/contract.py); a failure's traceback goes to error.txt."""
import json
import os
import socket
import sys
import time
import traceback
from contextlib import contextmanager
from pathlib import Path
from typing import Any, Iterator, cast

import torch
from omegaconf import DictConfig, OmegaConf

from job.contract import PeerContext
from job.cpugroup import PeerCpu
from job.data import GlobalOrder, load_splits
from job.device import PeerDevice
from job.evaluation import (Evaluator, InTraining, MachineBoard, MachineEvaluation, PauseSharing, PreciseBatchNorm,
                            Snapshots)
from job.loop import TrainedStrategy, train
from job.model import build_model, parameter_digest
from job.optim import build_optimizer, scaled_lr
from job.process import boot_id, die_with_parent, exit_on_sigterm, exit_with, pin_cpus
from job.registry import resolve
from metrics.recording.rundir import WORKER, LaunchSpec, RunDir
from metrics.recording.sampler import ResourceSampler
from metrics.recording.steplog import StepLog


@contextmanager
def timed(phases: dict[str, float], phase: str) -> Iterator[None]:
    """Add the seconds the block takes to phases[phase]."""
    started = time.perf_counter()
    try:
        yield
    finally:
        phases[phase] = phases.get(phase, 0.0) + time.perf_counter() - started


def run_peer(cfg: DictConfig, ctx: PeerContext, spec: LaunchSpec, cpu: PeerCpu, started_at: float) -> None:
    """`started_at`: unix time main() began (the worker's wall phases, summary.json wall_phases_s, start there)."""
    peer = ctx.peer
    phases: dict[str, float] = {}
    host_cores = sorted(os.sched_getaffinity(0))  # this host's (an emulated host's own), before pinning
    cores = pin_cpus(ctx.local_rank, spec.threads)
    cpu.pinned(cores)
    torch.set_num_threads(len(cores))  # never more threads than cores: oversubscribed threads spin
    sampler = ResourceSampler(peer.resources, cfg.sampler.interval) if cfg.sampler.enabled else None
    if sampler:
        sampler.start()
        cpu.keep_out(sampler.native_id)
    role = spec.roles[ctx.rank]
    device = PeerDevice.for_peer(cfg.device if role == WORKER else "cpu", ctx.local_rank, ctx.local_world_size)
    with timed(phases, "imports_s"):  # the strategy's module
        strategy_class = resolve(cfg.strategy.target)
    strategy = strategy_class(cfg, ctx, spec, device)
    result: dict[str, Any] = {"rank": ctx.rank, "host": socket.gethostname(), "cores": cores, "boot_id": boot_id(),
                              "role": role, **device.describe()}
    try:
        if role == WORKER:
            log = StepLog(peer.path)
            snapshots = Snapshots(peer.snapshots, device.device, precise=bool(cfg.precise_bn_samples))
            board = MachineBoard(ctx.run.evaluation / MachineBoard.machine_name(), ctx.rank)
            board.register(host_cores)
            try:
                torch.manual_seed(cfg.seed)  # identical initial parameters on every peer
                with timed(phases, "data_s"):
                    splits = load_splits(cfg)
                with timed(phases, "model_s"):
                    model = build_model(cfg, splits.num_classes, splits.channels).to(device.device)
                    optimizer = build_optimizer(model.parameters(), cfg, spec.effective_batch)
                result["effective_lr"] = scaled_lr(cfg, spec.effective_batch)
                with timed(phases, "rendezvous_s"):
                    trained = strategy.setup(model, optimizer)
                with torch.random.fork_rng(devices=[]):  # the evaluator takes none of training's random draws
                    with timed(phases, "data_s"):
                        precise = PreciseBatchNorm(splits.train, int(cfg.precise_bn_samples), cfg.batch_size,
                                                   device.device) if cfg.precise_bn_samples else None
                    with timed(phases, "model_s"):
                        evaluator = Evaluator(build_model(cfg, splits.num_classes, splits.channels).to(device.device),
                                              splits.test, device.device, precise)
                result["evaluation"] = evaluation_mode(cfg, strategy_class)
                if result["evaluation"]["mode"] == "in_training":
                    target = cast(dict[str, Any], OmegaConf.to_container(cfg.target))  # a DictConfig's is a dict
                    snapshots.in_training = InTraining(evaluator, log, target,
                                                       peer.weights if cfg.keep_weights else None,
                                                       sharing_the_pauses(cfg, cpu, board, cores))
                order = GlobalOrder(len(splits.train), ctx.rank, spec.workers, spec.batch_size, cfg.seed)
                with timed(phases, "loop_s"):
                    result |= train(cfg, strategy, model, trained, splits, order, log, device, snapshots)
                phases["evaluation_paused_s"] = result.pop("evaluation_paused_s")
                result["param_sha256"] = parameter_digest(model)
                with timed(phases, "after_training_s"):
                    if snapshots.in_training:
                        result |= snapshots.evaluated_in_training(peer.eval_samples)
                    else:
                        result |= evaluate_after_training(cfg, ctx, cpu, board, evaluator, snapshots, log, host_cores)
                phases |= {"precise_bn_s": evaluator.precise_bn_s, "test_s": evaluator.test_s}
            finally:
                snapshots.discard()
                log.close()
        else:
            strategy.serve()
        result["strategy"] = strategy.summary()
        result["cpu"] = cpu.figures()
        result["wall_phases"] = {"started_at": started_at, "ended_at": time.time(), **phases}
        peer.result.write_text(json.dumps(result, indent=1))
    except BaseException as exc:
        record_failure(ctx, exc)  # before close() drops connections: the others' errors follow this one
        raise
    finally:
        strategy.close()
        if sampler:
            sampler.stop()


def evaluation_mode(cfg: DictConfig, strategy_class: type[TrainedStrategy]) -> dict[str, str]:
    """When this run evaluates its snapshots (mode: in_training or after_training), and why not in training if asked."""
    if not cfg.eval_in_training:
        return {"mode": "after_training"}
    if not strategy_class.stops_at_target(cfg):
        return {"mode": "after_training", "why": "eval_in_training asked, but a pause would change what this "
                "strategy measures (hivemind's wall-clock rounds, asynchronous ps), or its workers hold different "
                "states and do not stop together: they evaluated after training and ran to max_steps"}
    return {"mode": "in_training"}


def sharing_the_pauses(cfg: DictConfig, cpu: PeerCpu, board: MachineBoard, cores: list[int]) -> PauseSharing:
    """In a pause, the machine's workers evaluate each state once, on the cores that all of them leave idle."""
    @contextmanager
    def on_cores(evaluation_cores: list[int]) -> Iterator[None]:
        with cpu.quota_lifted():
            os.sched_setaffinity(0, evaluation_cores)
            torch.set_num_threads(len(evaluation_cores))
            try:
                yield
            finally:
                os.sched_setaffinity(0, cores)
                torch.set_num_threads(len(cores))

    return PauseSharing(board, float(cfg.timeouts.collective_s), on_cores, cpu.set_aside)


def evaluate_after_training(cfg: DictConfig, ctx: PeerContext, cpu: PeerCpu, board: MachineBoard, evaluator: Evaluator,
                            snapshots: Snapshots, log: StepLog, host_cores: list[int]) -> dict[str, Any]:
    """Evaluate the worker's snapshots with its machine's other workers, once its training ended."""
    def evaluate_on_host_cores(host_workers: int) -> None:  # every worker of the machine ended training
        cpu.release()
        torch.set_num_threads(len(pin_cpus(ctx.local_rank, max(1, len(host_cores) // host_workers), host_cores)))

    machine = MachineEvaluation(board, evaluator, float(cfg.timeouts.collective_s), evaluate_on_host_cores)
    done = snapshots.evaluate_all(machine, log, ctx.peer.eval_samples, ctx.peer.weights if cfg.keep_weights else None)
    return done | {"evaluation_cores": sorted(os.sched_getaffinity(0)), "evaluation_threads": torch.get_num_threads()}


def record_failure(ctx: PeerContext, exc: BaseException) -> None:
    """Write `exc`, being handled, to peer<RANK>/error.txt once, its mtime the failure's ns (earliest wins)."""
    if getattr(exc, "avgbench_recorded", False) or (isinstance(exc, SystemExit) and exc.code in (0, None)):
        return
    setattr(exc, "avgbench_recorded", True)  # a mark on the exception itself: main() sees it again
    failed_ns = time.time_ns()
    path = ctx.peer.error
    path.write_text(f"rank {ctx.rank} failed at {time.strftime('%H:%M:%S')}:\n{traceback.format_exc()}")
    os.utime(path, ns=(failed_ns, failed_ns))


def redirect_output(path: Path) -> None:
    """This peer's stdout and stderr (and its children's, e.g. daemons) go to its own log."""
    sys.stdout.flush()
    sys.stderr.flush()
    fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_APPEND, 0o644)
    os.dup2(fd, 1)
    os.dup2(fd, 2)
    os.close(fd)


def main(argv: list[str]) -> int:
    started_at = time.time()
    exit_on_sigterm()
    run = RunDir(Path(argv[0]).resolve())
    ctx = PeerContext.from_env(run.path)
    cpu = PeerCpu(run, ctx.rank)  # first: this peer's CPU group, for it and all it starts
    cfg = cast(DictConfig, OmegaConf.load(run.config))  # train.py saved a DictConfig
    ctx.peer.path.mkdir(parents=True, exist_ok=True)
    redirect_output(ctx.peer.output_log)
    try:
        die_with_parent(float(cfg.timeouts.shutdown_s))
        run_peer(cfg, ctx, LaunchSpec.load(run), cpu, started_at)
    except BaseException as exc:
        record_failure(ctx, exc)
        raise
    return 0


if __name__ == "__main__":
    exit_with(main, sys.argv[1:])
