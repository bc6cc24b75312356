"""diloco: the outer step on the averaged pseudo-gradient (unit tier, a two-worker all-reduce played by hand),
and real runs on digits (integration tier): it learns, workers agree after a sync, and each sync moves the
all-reduce's payload of the parameters, on the steps the schedule says."""
import pytest
import torch

from helpers import compose_config
from job.contract import PeerContext
from metrics.recording.rundir import WORKER, LaunchSpec, RunDir
from strategies.diloco import DiLoCo

pytestmark = pytest.mark.timeout(60)


class OtherWorker:
    """The transport of worker 0 of two: its all-reduce adds worker 1's tensor (given), as a real one would."""

    rank, world_size = 0, 2

    def __init__(self, other: torch.Tensor):
        self.other, self.sent = other, []

    def broadcast(self, tensor, src):
        pass  # rank 0 is the source: its tensor stays

    def allreduce_sum(self, tensor):
        self.sent.append(tensor.clone())
        tensor += self.other


def diloco_worker(tmp_path, other_delta, *knobs):
    cfg = compose_config("strategy=diloco", "peers=2", *knobs)
    spec = LaunchSpec(roles=[WORKER, WORKER], threads=1, batch_size=32, effective_batch=32)
    strategy = DiLoCo(cfg, PeerContext(0, 2, 0, 2, "127.0.0.1", 0, RunDir(tmp_path)), spec)
    transport = OtherWorker(other_delta)
    strategy.connect = lambda: setattr(strategy, "transport", transport)
    torch.manual_seed(0)
    model = torch.nn.Linear(3, 2)
    strategy.setup(model, torch.optim.SGD(model.parameters(), lr=0.1))
    return strategy, model, transport


def set_params(model, flat):
    torch.nn.utils.vector_to_parameters(flat.clone(), model.parameters())  # the parameters become views of it


def params(model):
    return torch.nn.utils.parameters_to_vector(model.parameters()).detach().clone()


def test_outer_lr_one_without_momentum_is_the_mean_of_the_workers_models(tmp_path):
    other_now = torch.arange(8, dtype=torch.float32)  # worker 1's parameters at the sync
    strategy, model, transport = diloco_worker(tmp_path, None, "diloco.outer_lr=1.0", "diloco.outer_momentum=0")
    start = params(model)
    transport.other = start - other_now  # worker 1's pseudo-gradient: its start minus its now
    mine = start + 0.5
    set_params(model, mine)
    strategy.steps = strategy.inner_steps - 1  # the next step syncs
    strategy.optimizer.zero_grad(set_to_none=True)  # no gradient: the inner update leaves it where it is
    report = strategy.step(32)
    torch.testing.assert_close(params(model), (mine + other_now) / 2)
    torch.testing.assert_close(transport.sent[0], start - mine)  # it sent its own pseudo-gradient
    assert report.bytes_sent == report.bytes_recv == 8 * 4  # 2(N-1)/N x S with N=2: S, 8 float32
    assert report.round == 0 and strategy.outer_steps == 1


def test_the_outer_step_is_nesterov_sgd_on_the_mean_pseudo_gradient(tmp_path):
    strategy, model, transport = diloco_worker(tmp_path, None)  # the preset: outer lr 0.7, momentum 0.9
    start = params(model)
    transport.other = torch.full((8,), 0.3)
    for sync in range(2):
        set_params(model, params(model) - 0.1)  # an inner phase moved it by -0.1: pseudo-gradient +0.1
        strategy.steps = strategy.inner_steps * (sync + 1) - 1
        strategy.optimizer.zero_grad(set_to_none=True)
        strategy.step(32)
    mean = (0.1 + 0.3) / 2
    # Nesterov (torch.optim.SGD, dampening 0): buffer b1 = g, b2 = 0.9 b1 + g; update g + 0.9 b
    first = mean + 0.9 * mean
    second = mean + 0.9 * (0.9 * mean + mean)
    torch.testing.assert_close(params(model), start - 0.7 * (first + second))
