"""Config composition and validation: bad input is one clear line and exit code 2, before any process starts.

Unit tier: launchers.config.check_overrides / validate on configs composed in this process.
Integration tier: the same through train.py's command line (exit code 2, one line on stderr).
"""
import pytest
from omegaconf import OmegaConf
from helpers import compose_config, strategy_names, strategy_of
from job.errors import ConfigError
from launchers.config import check_command, check_overrides, group_options, validate
from launchers.schema import RULES

pytestmark = pytest.mark.timeout(60)


def rejected(*overrides: str) -> str:
    """The ConfigError message for these overrides, from check_overrides or validate."""
    with pytest.raises(ConfigError) as caught:
        check_overrides(list(overrides))
        validate(compose_config(*overrides))
    return str(caught.value)


# --- unit tier ------------------------------------------------------------------------------
def test_defaults_compose_and_validate():
    cfg = compose_config()
    assert (cfg.strategy.name, cfg.model.name, cfg.data.name, cfg.peers) == ("single", "resnet18", "digits", 1)
    validate(cfg)


@pytest.mark.parametrize("group", ["model", "data", "optim", "sampler", "network"])
def test_every_group_option_composes(group):
    for option in group_options(group):
        cfg = compose_config(f"{group}={option}")
        assert cfg[group] is not None


@pytest.mark.parametrize("strategy", strategy_names())
def test_every_strategy_validates_with_two_peers(strategy):
    validate(compose_config(f"strategy={strategy}", "peers=2"))  # single peers=2: the equal-resource baseline


BAD_INPUT = [
    ("strategy=nonsense", "unknown strategy 'nonsense'"),
    ("strategy=allreduce,nonsense", "unknown strategy 'nonsense'"),
    ("model=vgg99", "unknown model 'vgg99'"),
    ("data=mnist", "unknown data 'mnist'"),
    ("strategy=alreduce", "unknown strategy 'alreduce' (did you mean allreduce? choose from: allreduce, diloco,"),
    ("network=lann", "unknown network 'lann' (did you mean lan? choose from:"),
    ("hydra/launcher=slrum", "unknown hydra/launcher 'slrum' (did you mean slurm? choose from: basic, slurm,"),
    ("data=imagefolder", "data.root has no default with data=imagefolder: add data.root=..."),
    ("data=cifar10", "data.root has no default with data=cifar10: add data.root=..."),
    ("peers=0", "peers must be >= 1 (a whole number), got 0"),
    ("peers=-1", "peers must be >= 1 (a whole number), got -1"),
    ("peer_cpus=0", "peer_cpus must be >= 1"),
    ("batch_size=0", "batch_size must be >= 1"),
    ("lr=0", "lr must be > 0"),
    ("fault.kill_peer=5", "fault.kill_peer=5 is not a worker rank"),
    ("device=tpu", "device must be one of auto, cpu, cuda, got tpu"),
    ("repeats=0", "repeats must be an integer >= 1 (or auto: planned from the recorded noise), got 0"),
    ("report.smallest_effect=0.8", "report.smallest_effect must be a ratio > 1 (e.g. 1.25: 25 % either way), got 0.8"),
]


@pytest.mark.parametrize("override, message", BAD_INPUT)
def test_bad_input_is_a_config_error(override, message):
    assert message in rejected(override)


@pytest.mark.parametrize("overrides, message", [
    (("strategy=diloco", "diloco.inner_steps=0"), "diloco.inner_steps must be >= 1 (a whole number), got 0"),
    (("strategy=diloco", "diloco.outer_lr=0"), "diloco.outer_lr must be > 0, got 0"),
    (("strategy=diloco", "diloco.outer_momentum=1"), "diloco.outer_momentum must be in [0, 1), got 1"),
    (("strategy=localsgd", "localsgd.every=0"), "localsgd.every must be >= 1 (a whole number), got 0"),
    (("strategy=localsgd", "localsgd.warmup_steps=-1"), "localsgd.warmup_steps must be >= 0 (a whole number), got -1"),
    (("strategy=localsgd", "transport=mpi"), "transport=mpi is not supported, use transport=gloo"),
])
def test_bad_strategy_knobs_are_config_errors(overrides, message):
    assert message in rejected(*overrides, "peers=2")


@pytest.mark.parametrize("override", ["diloco.inner_optim=sgd", "+diloco.inner_optim=sgd", "++diloco.inner_optim=sgd"])
def test_diloco_inner_optim_points_to_the_optim_group(override):
    with pytest.raises(ConfigError, match="diloco.inner_optim is no knob of diloco: the inner optimizer is the optim "
                                          "group, e.g. optim=adamw"):
        check_overrides(["strategy=diloco", override])


def test_diloco_trains_with_adamw_unless_told_otherwise():
    """The preset picks the inner optimizer through the optim group, so the one-process baseline can share it."""
    assert compose_config("strategy=diloco").optim.name == "adamw"
    assert compose_config("strategy=diloco", "optim=sgd").optim.name == "sgd"
    assert compose_config("strategy=allreduce").optim.name == "sgd"


def test_hivemind_target_batch_below_the_batch_size():
    message = rejected("strategy=hivemind", "peers=2", "batch_size=64", "hivemind.target_batch_size=32")
    assert message == "hivemind.target_batch_size=32 is smaller than batch_size=64"


@pytest.mark.parametrize("data, message", [
    ("cifar10", "holds no cifar-10-batches-py"),
    ("imagefolder", "has no 'train/' folder"),
])
def test_missing_dataset_root(tmp_path, data, message):
    text = rejected(f"data={data}", f"data.root={tmp_path / 'absent'}")
    assert message in text and str(tmp_path / "absent") in text


def command_refused(*overrides: str) -> str:
    """The ConfigError message of train.py's one check of a command line (launchers.config.check_command)."""
    with pytest.raises(ConfigError) as caught:
        check_command(list(overrides))
    return str(caught.value)


@pytest.mark.parametrize("overrides, message", [
    (("strategy=diloco", "diloco.inner_step=5"), "unknown key diloco.inner_step (did you mean diloco.inner_steps?)"),
    (("strategy=diloco", "+diloco.inner_step=5"), "unknown key diloco.inner_step (did you mean diloco.inner_steps?)"),
    (("strategy=diloco", "++diloco.inner_step=5"), "unknown key diloco.inner_step (did you mean diloco.inner_steps?)"),
    (("+max_step=5",), "unknown key max_step (did you mean max_steps?)"),
    (("+target.valeu=0.9",), "unknown key target.valeu (did you mean target.value?)"),
    (("ring.controller=mpi",), "ring.controller is a knob of strategy=ring, not of strategy=single"),
    (("+ring.controller=mpi",), "ring.controller is a knob of strategy=ring, not of strategy=single"),
    (("no_such_knob=3",), "unknown key no_such_knob (--help lists the knobs)"),
])
def test_unknown_keys_are_refused_with_the_closest_known_one(overrides, message):
    assert command_refused(*overrides) == message


@pytest.mark.parametrize("override, message", [
    ("peers=abc", "peers must be a number (as its default 1), got 'abc'"),
    ("progress=1", "progress must be true or false (as its default True), got 1"),
    ("lr=[1,2]", "lr must be a number (as its default 0.01), got [1, 2]"),
    ("peers=1.5", "peers must be >= 1 (a whole number), got 1.5"),
])
def test_values_of_the_wrong_type_are_refused(override, message):
    assert command_refused(override) == message


@pytest.mark.parametrize("overrides, message", [
    (("peers=0",), "peers must be >= 1 (a whole number), got 0"),
    (("peers=-3",), "peers must be >= 1 (a whole number), got -3"),
    (("network.bandwidth_mbit=-5",), "network.bandwidth_mbit must be > 0 Mbit/s"),
    (("strategy=hivemind", "peers=2", "hivemind.target_batch_size=16"),
     "hivemind.target_batch_size=16 is smaller than batch_size=32"),
    (("strategy=nonsense",), "unknown strategy 'nonsense'"),
])
def test_the_command_check_runs_the_validation(overrides, message):
    assert message in command_refused(*overrides)


@pytest.mark.parametrize("strategy", strategy_names())
def test_every_strategy_preset_passes_the_command_check(strategy):
    check_command([f"strategy={strategy}"])


def test_every_rule_names_a_knob_of_the_default_config():
    """A rule for a knob that no longer exists would silently check nothing."""
    cfg, absent = compose_config(), object()
    assert [key for key in RULES if OmegaConf.select(cfg, key, default=absent) is absent] == []


@pytest.mark.parametrize("strategy", strategy_names())
def test_every_strategy_rule_names_a_knob_of_its_block(strategy):
    cfg = compose_config(f"strategy={strategy}")
    block = cfg.get(strategy) or {}
    assert [knob for knob in strategy_of(strategy).rules if knob not in block] == []


@pytest.mark.parametrize("override, message", [
    ("network.per_peer=[10,10,10]", "network.per_peer has 3 entries but the run has 2 processes"),
    ("network.bandwidth_mbit=0", "network.bandwidth_mbit must be > 0 Mbit/s"),
    ("network.latency_ms=-1", "network.latency_ms must be >= 0"),
    ("network.mtu=40", "network.mtu must be a whole number of bytes from 68 to 65535"),
    ("network.mtu=70000", "network.mtu must be a whole number of bytes from 68 to 65535"),
    ("network.mtu=1500.5", "network.mtu must be a whole number of bytes"),
    ("launch.nnodes=2", "network=emulated puts every peer on this machine"),
])
def test_bad_network_knobs(override, message):
    """Checked before the emulated network is probed (which would start a process)."""
    emulated = ["strategy=allreduce", "network=emulated", "peers=2", "launch.master_port=29511"]
    assert message in rejected(*emulated, override)


@pytest.mark.parametrize("override, message", [
    ("network.bandwidth_mbit=0", "network.bandwidth_mbit must be > 0 Mbit/s"),
    ("network.per_peer=[10,10,10]", "network.per_peer has 3 entries but the run has 2 processes"),
])
def test_bad_knobs_of_the_default_network(override, message):
    """network=auto checks the link's knobs as network=emulated does, whether or not it will emulate the link."""
    assert message in rejected("strategy=allreduce", "peers=2", override)


def test_fault_rank_must_be_a_rank_the_strategy_starts():
    assert "fault.kill_peer=1 is not a worker rank" in rejected("strategy=single", "peers=2", "fault.kill_peer=1")


def test_multiruns_go_through_the_block_sweeper_also_on_slurm():
    for preset in ([], ["experiment=slurm"]):
        sweeper = compose_config(*preset, return_hydra_config=True).hydra.sweeper
        assert sweeper._target_ == "hydra_plugins.avgbench_sweeper.BlockSweeper"
    assert sweeper.job_subdir == "block{block}/{name}/node{env:SLURM_NODEID,0}"  # each node its own folder
