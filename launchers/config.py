"""Checks on the composed config, run before any process starts, and the strategy it names."""
from pathlib import Path

from hydra.core.override_parser.overrides_parser import OverridesParser
from omegaconf import ListConfig, OmegaConf

from job.data import DATASETS, check_data_config
from job.device import resolve_device
from job.errors import ConfigError
from job.fault import check_fault_config
from job.model import DTYPES, MODELS
from job.optim import OPTIMIZERS, SCALINGS
from job.registry import resolve
from launchers.lock import LOCK_MODES
from launchers.shape import fit_peers
from metrics.summary.target import check_target
from metrics.report.primary import CHOICES as PRIMARY_CHOICES
from metrics.report.projected import parse_targets
from netemu.checks import check_network_config
from netemu.cpu import check_emulate_config, emulate_of
from netemu.dilation import checked_dilation

CONF_DIR = Path(__file__).resolve().parent.parent / "conf"
RESOLVERS = {  # arithmetic for experiment presets, and the strategies' default peer count
    "fit_peers": fit_peers,
    "steps_for": lambda samples, batch, scale: max(1, round(samples * scale / batch)),
    "per_peer": lambda total, peers: max(1, total // peers),
    "times": lambda a, b: a * b,
    "at_least": lambda value, floor: max(int(value), int(floor)),
    "project_root": lambda: str(CONF_DIR.parent),  # e.g. a batch job's PYTHONPATH (conf/hydra/launcher/slurm.yaml)
}
for _name, _fn in RESOLVERS.items():
    OmegaConf.register_new_resolver(_name, _fn, replace=True)



def group_options(group: str) -> list[str]:
    return sorted(p.stem for p in (CONF_DIR / group).glob("*.yaml"))


CHOICES = {"strategy": group_options("strategy"), "model": MODELS, "data": DATASETS, "optim": OPTIMIZERS}


def strategy_class(cfg):
    """The class conf/strategy/NAME.yaml names in strategy.target (a strategies.base.Strategy)."""
    return resolve(cfg.strategy.target)


def registered_strategy(name: str):
    """The class conf/strategy/NAME.yaml names in strategy.target, without composing a config."""
    return resolve(OmegaConf.load(CONF_DIR / "strategy" / f"{name}.yaml").strategy.target)


def check_overrides(args: list[str]) -> None:
    """Reject an unknown option of a config group (e.g. strategy=foo), and a strategy knob that its strategy says is
    set elsewhere (Strategy.knobs_elsewhere), before Hydra starts."""
    groups = {p.name for p in CONF_DIR.iterdir() if p.is_dir()}
    strategies = group_options("strategy")
    for arg in args:
        key, sep, value = arg.lstrip("+~").partition("=")
        block, _, knob = key.partition(".")
        if block in strategies and (where := registered_strategy(block).knobs_elsewhere.get(knob)):
            raise ConfigError(f"{key} is no knob of {block}: {where}")
        if not sep or key not in groups or "(" in value:
            continue
        options = group_options(key)
        for choice in value.split(","):
            if choice and choice != "null" and choice not in options:
                raise ConfigError(f"unknown {key} '{choice}' (choose from: {', '.join(options)})")


PROJECT = "report.project"


def project_targets(value, overrides: list[str]) -> list[str]:
    """report.project's LINK:N targets, each checked (ConfigError where one is bad): its override among a command's
    `overrides` (`report.project=lan:8,1000:16` is one list, not a sweep of the jobs), else `value`."""
    for override in OverridesParser.create().parse_overrides(overrides):
        if override.get_key_element() == PROJECT:
            value = override.value().list if override.is_sweep_override() else override.value()
    specs = [str(v) for v in value] if isinstance(value, (list, ListConfig)) else [] if value is None else [str(value)]
    try:
        parse_targets(specs)
    except ValueError as exc:
        raise ConfigError(str(exc)) from None
    return specs


def _require(condition: bool, message: str) -> None:
    if not condition:
        raise ConfigError(message)


def check_repeats(value) -> int | str:
    """repeats: the blocks of a multirun, an integer >= 1, or auto (planned from the recorded noise)."""
    _require(value == "auto" or isinstance(value, int) and not isinstance(value, bool) and value >= 1,
             f"repeats must be an integer >= 1, got {value} (or auto: planned from the recorded noise)")
    return value


def validate(cfg) -> None:
    for group, known in CHOICES.items():
        name = cfg[group].name
        _require(name in known, f"unknown {group} '{name}' (choose from: {', '.join(sorted(known))})")
    for knob in ("peers", "peer_cpus", "batch_size", "max_steps"):
        _require(int(cfg[knob]) >= 1, f"{knob} must be >= 1, got {cfg[knob]}")
    _require(float(cfg.lr) > 0, f"lr must be > 0, got {cfg.lr}")
    _require(cfg.lr_scaling in SCALINGS, f"lr_scaling must be one of {', '.join(SCALINGS)}, got {cfg.lr_scaling}")
    _require(int(cfg.warmup_steps) >= 0, f"warmup_steps must be >= 0, got {cfg.warmup_steps}")
    _require(cfg.lock in LOCK_MODES, f"lock must be one of {', '.join(LOCK_MODES)}, got {cfg.lock}")
    _require(cfg.report.baselines in ("auto", "off"), f"report.baselines must be auto or off, got {cfg.report.baselines}")
    _require(cfg.report.primary in PRIMARY_CHOICES,
             f"report.primary must be one of {', '.join(PRIMARY_CHOICES)}, got {cfg.report.primary}")
    _require(int(cfg.report.max_blocks) >= 2, f"report.max_blocks must be >= 2, got {cfg.report.max_blocks}")
    margin = cfg.report.equivalence_margin
    _require(isinstance(margin, (int, float)) and 0 < margin < 1,
             f"report.equivalence_margin must be a fraction in (0, 1), got {margin}")
    effect = cfg.report.smallest_effect
    _require(isinstance(effect, (int, float)) and effect > 1,
             f"report.smallest_effect must be a ratio > 1 (e.g. 1.25: 25 % either way), got {effect}")
    check_repeats(cfg.repeats)
    project_targets(cfg.report.project, [])
    _require(cfg.block is None or (isinstance(cfg.block, int) and cfg.block >= 0),
             f"block must be null or an integer >= 0 (the multirun sets it), got {cfg.block}")
    _require(int(cfg.eval_every) >= 0, f"eval_every must be >= 0, got {cfg.eval_every}")
    _require(int(cfg.noise_scale_every) >= 0, f"noise_scale_every must be >= 0, got {cfg.noise_scale_every}")
    _require((problem := check_target(cfg.target)) is None, str(problem))
    _require(cfg.dtype in DTYPES, f"dtype must be one of {', '.join(DTYPES)}, got {cfg.dtype}")
    _require(int(cfg.precise_bn_samples) == 0 or int(cfg.precise_bn_samples) >= int(cfg.batch_size),
             f"precise_bn_samples must be 0 (off) or at least batch_size={cfg.batch_size}, got {cfg.precise_bn_samples}")
    reference = cfg.speed_reference
    _require(int(reference.samples) >= 2, f"speed_reference.samples must be >= 2 (BatchNorm in training needs more "
                                          f"than one value per channel), got {reference.samples}")
    _require(int(reference.repetitions) >= 0, f"speed_reference.repetitions must be >= 0, got {reference.repetitions}")
    for knob in ("max_share", "tolerance"):
        _require(0 < float(reference[knob]) < 1,
                 f"speed_reference.{knob} must be a fraction in (0, 1), got {reference[knob]}")
    _require(float(cfg.sampler.interval) > 0, f"sampler.interval must be > 0, got {cfg.sampler.interval}")
    for name, value in cfg.timeouts.items():
        _require(float(value) > 0, f"timeouts.{name} must be > 0, got {value}")
    launch = cfg.launch
    _require(launch.nnodes >= 1 and 0 <= launch.node_rank < launch.nnodes,
             f"launch.node_rank must be in [0, {launch.nnodes}), got {launch.node_rank}")
    _require(launch.nnodes == 1 or launch.master_port, "several hosts need a fixed launch.master_port")
    check_data_config(cfg.data)
    resolve_device(cfg.device)
    strategy = strategy_class(cfg)
    strategy.validate(cfg)
    spec = strategy.launch_spec(cfg)
    check_fault_config(cfg, spec.workers)
    processes = spec.processes
    _require(processes % launch.nnodes == 0,
             f"{processes} processes do not split evenly over launch.nnodes={launch.nnodes}")
    check_network_config(cfg.network, processes, launch.nnodes)
    check_emulate_config(cfg, spec.threads, processes)
    check_dilation_checked(cfg)
    strategy.check_available(cfg)


def check_dilation_checked(cfg) -> None:
    """Dilation is offered only up to the factor the strategy's checks passed on this machine, unless asked for."""
    emulate = emulate_of(cfg)
    if emulate["dilation"] == 1:
        return
    checked, source = checked_dilation(cfg.strategy.name)
    _require(emulate["dilation"] <= checked or emulate["allow_unchecked_dilation"],
             f"strategy {cfg.strategy.name} is checked for emulate.dilation up to {checked:g} ({source}), not "
             f"{emulate['dilation']:g}; emulate.allow_unchecked_dilation=true runs it anyway, marked 'dilation "
             "unchecked'")
