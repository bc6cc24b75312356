"""The private APIs of hivemind and Horovod that strategies/hivemind_internals.py and
strategies/ring.py rely on still exist: an upgrade that moves one fails here, loudly,
before it silently breaks byte accounting or a deadline."""
import inspect

import pytest
import torch


def test_hivemind_accounting_hook_points_exist():
    from hivemind.averaging import allreduce, averager

    assert callable(allreduce.serialize_torch_tensor)
    assert callable(allreduce.deserialize_torch_tensor)
    assert callable(averager.deserialize_torch_tensor)
    assert inspect.isasyncgenfunction(allreduce.AllReduceRunner._generate_input_for_peer)
    assert inspect.iscoroutinefunction(averager.DecentralizedAverager._aggregate_with_group)
    from hivemind.proto import runtime_pb2

    assert "buffer" in runtime_pb2.Tensor.DESCRIPTOR.fields_by_name


def test_hivemind_state_averager_can_be_substituted():
    from hivemind.optim import optimizer as hivemind_optimizer
    from hivemind.optim.state_averager import TrainingStateAverager

    from strategies import hivemind_internals

    assert hivemind_optimizer.TrainingStateAverager is TrainingStateAverager  # looked up at build time
    assert "lock_optimizer" in inspect.getsource(TrainingStateAverager.__init__)
    assert inspect.signature(TrainingStateAverager.get_current_state).parameters.keys() == {"self"}
    with hivemind_internals.cloning_state_averager():
        assert issubclass(hivemind_optimizer.TrainingStateAverager, TrainingStateAverager)
        assert hivemind_optimizer.TrainingStateAverager is not TrainingStateAverager
    assert hivemind_optimizer.TrainingStateAverager is TrainingStateAverager


@pytest.mark.timeout(60)
def test_horovod_keeps_pending_allreduces_in_handles():
    hvd = pytest.importorskip("horovod.torch", reason="Horovod is not built (make setup)")
    from strategies.ring import handed_bytes, pending_allreduces

    hvd.init()  # one rank, no launcher: Horovod registers no hooks then, so read how it would fill _handles
    try:
        model = torch.nn.Linear(4, 2)
        optimizer = hvd.DistributedOptimizer(torch.optim.SGD(model.parameters(), lr=0.1),
                                             named_parameters=model.named_parameters())
        assert optimizer._handles == {} and pending_allreduces(optimizer) == []
        hook_source = inspect.getsource(type(optimizer)._make_hook)
        assert "self._handles[p] = (handle, ctx)" in hook_source
        assert "self._allreduce_grad_async(p)" in hook_source
        # handed_bytes reads the tensor given to each pending all-reduce from _handle_map
        handle = hvd.allreduce_async_(torch.ones(5, dtype=torch.float16), name="probe")
        assert handed_bytes(hvd, [handle]) == 10
        hvd.synchronize(handle)
        assert handle not in hvd.mpi_ops._handle_map
    finally:
        hvd.shutdown()


def test_ddp_hooks_look_up_all_reduce_in_their_module():
    """strategies.allreduce.CountedCollectives stands in for `dist` in torch's hook modules."""
    from torch.distributed.algorithms.ddp_comm_hooks import default_hooks, powerSGD_hook

    for module in (default_hooks, powerSGD_hook):
        assert "dist.all_reduce(" in inspect.getsource(module)
        assert module.dist.all_reduce is not None


def test_ddp_hook_collectives_are_routed_through_their_module_attribute():
    from torch.distributed.algorithms.ddp_comm_hooks import default_hooks, powerSGD_hook

    from strategies.torch_internals import route_ddp_hook_collectives

    original = default_hooks.dist
    stand_in = object()
    try:
        route_ddp_hook_collectives(stand_in)
        assert default_hooks.dist is stand_in and powerSGD_hook.dist is stand_in
    finally:
        route_ddp_hook_collectives(original)
    assert default_hooks.dist is original


@pytest.mark.timeout(60)
def test_a_receive_from_any_rank_names_its_sender():
    """strategies.torch_internals.source_rank on a real gloo receive (two in-process ranks): rank 0 hears rank 1."""
    from strategies.torch_internals import source_rank
    from strategies.transport import in_process_gloo

    def rank(r: int, group):
        tensor = torch.full((4,), float(r))
        if r == 1:
            return group.send([tensor], 0, 7).wait()
        work = group.recv_anysource([tensor], 7)
        work.wait()
        return source_rank(work), tensor.tolist()

    results, errors = in_process_gloo(rank)
    assert not errors and results[0] == (1, [1.0] * 4)


def test_hydra_basic_sweeper_offers_what_the_block_sweeper_uses():
    import importlib

    from launchers.hydra_internals import BASIC_SWEEPER, basic_sweeper

    BasicSweeper = basic_sweeper()

    module, _, name = BASIC_SWEEPER.rpartition(".")
    found = getattr(importlib.import_module(module), name)  # by name: another test may have reloaded the module
    assert (found.__module__, found.__qualname__) == (BasicSweeper.__module__, BasicSweeper.__qualname__)
    for method in ("split_arguments", "split_overrides_to_chunks", "get_job_batch", "is_done", "_parse_config",
                   "setup", "sweep"):
        assert callable(getattr(BasicSweeper, method)), method
    assert {"max_batch_size", "params"} <= inspect.signature(BasicSweeper.__init__).parameters.keys()


def test_a_nodes_value_as_written_before_interpolation():
    from omegaconf import OmegaConf

    from launchers.hydra_internals import raw_value

    OmegaConf.register_new_resolver("private_api_probe", lambda x: int(x) * 2, replace=True)
    cfg = OmegaConf.create({"peers": "${private_api_probe:3}", "plain": 4})
    assert cfg.peers == 6 and raw_value(cfg, "peers") == "${private_api_probe:3}" and raw_value(cfg, "plain") == "4"


def test_hydras_command_line_parser_reads_overrides_and_cfg():
    from launchers.hydra_internals import get_args_parser

    args = get_args_parser().parse_args(["--cfg", "job", "peers=2", "strategy=ring"])
    assert args.cfg == "job" and args.overrides == ["peers=2", "strategy=ring"] and not args.multirun
