"""Checks on the composed config, run before any process starts, and the strategy it names."""
import sysconfig
from pathlib import Path
from typing import TYPE_CHECKING, Any, Callable, Sequence, cast

from hydra.core.override_parser.overrides_parser import OverridesParser
from hydra.core.override_parser.types import ChoiceSweep
from hydra.errors import HydraException, MissingConfigException
from omegaconf import DictConfig, ListConfig, OmegaConf
from omegaconf.errors import OmegaConfBaseException

from job.data import check_data_config
from job.device import resolve_device
from job.errors import ConfigError
from job.fault import check_fault_config
from job.model import check_model
from job.registry import resolve
from launchers.schema import check_keys, check_mandatory, check_values, holds, unknown_choice, unknown_key
from launchers.plugins import CONF_DIR, strategy_configs
from launchers.shape import fit_peers
from metrics.projection.cost import CostModel
from metrics.projection.models import cost_model
from metrics.recording.rundir import LaunchSpec
from metrics.summary.target import CAUSAL
from metrics.report.baselines import tool_command
from metrics.report.projected import parse_targets
from netemu.auto import LinkChoice, choose_link
from netemu.checks import check_network_config
from netemu.cpu import check_emulate_config, emulate_of
from netemu.dilation import checked_dilation

if TYPE_CHECKING:
    from strategies.base import Strategy
Validated = tuple["type[Strategy]", LaunchSpec, type[CostModel], LinkChoice | None]


def readme() -> str:
    """The README `--help` points to: the checkout's, else the one pip installed (pyproject.toml's data-files)."""
    installed = Path(sysconfig.get_path("data")) / "share" / "doc" / "avgbench"
    return str(next((folder / "README.md" for folder in (CONF_DIR.parent, installed)
                     if (folder / "docs" / "usage.md").is_file()), "README.md"))


RESOLVERS: dict[str, Callable[..., Any]] = {  # arithmetic for experiment presets, the default peers, --help's names
    "fit_peers": fit_peers,
    "steps_for": lambda samples, batch, scale: max(1, round(samples * scale / batch)),
    "per_peer": lambda total, peers: max(1, total // peers),
    "times": lambda a, b: a * b,
    "at_least": lambda value, floor: max(int(value), int(floor)),
    "project_root": lambda: str(CONF_DIR.parent),  # e.g. a batch job's PYTHONPATH (conf/hydra/launcher/slurm.yaml)
    "command": tool_command,  # as typed
    "readme": readme,
}
for _name, _fn in RESOLVERS.items():
    OmegaConf.register_new_resolver(_name, _fn, replace=True)



def group_options(group: str) -> list[str]:
    return sorted(p.stem for p in (CONF_DIR / group).glob("*.yaml"))



def strategy_class(cfg: DictConfig) -> "type[Strategy]":
    try:
        return resolve(cfg.strategy.target)
    except (ImportError, AttributeError, ValueError) as exc:
        raise ConfigError(f"strategy.target={cfg.strategy.target}: cannot import it ({type(exc).__name__}: {exc}); "
                          "is its module installed or on PYTHONPATH?") from None


def strategy_by_name(name: str, overrides: Sequence[str] = ()) -> "type[Strategy]":
    """The class strategy NAME's config names (launchers/plugins.py), without composing a config."""
    return resolve(OmegaConf.load(strategy_configs(overrides)[name]).strategy.target)


def check_overrides(args: list[str]) -> None:
    """Before Hydra starts: no unknown option of a config group, no strategy knob set elsewhere (knobs_elsewhere)."""
    groups = {p.name for p in CONF_DIR.iterdir() if p.is_dir()}
    strategies = strategy_configs(args)
    for arg in args:
        key, sep, value = arg.lstrip("+~").partition("=")
        block, _, knob = key.partition(".")
        if block in strategies and (where := strategy_by_name(block, args).knobs_elsewhere.get(knob)):
            raise ConfigError(f"{key} is no knob of {block}: {where}")
        if not sep or key not in groups or "(" in value:
            continue
        options = sorted(strategies) if key == "strategy" else group_options(key)
        for choice in value.split(","):
            if choice and choice != "null" and choice not in options:
                raise unknown_choice(key, choice, options)


PROJECT = "report.project"


def project_targets(value: object, overrides: list[str]) -> list[str]:
    """report.project's LINK:N targets, checked: its override in `overrides` (one list, not a sweep), else `value`."""
    for override in OverridesParser.create().parse_overrides(overrides):
        if override.get_key_element() == PROJECT:
            value = found.list if isinstance(found := override.value(), ChoiceSweep) else found
    specs = [str(v) for v in value] if isinstance(value, (list, ListConfig)) else [] if value is None else [str(value)]
    try:
        parse_targets(specs)
    except ValueError as exc:
        raise ConfigError(str(exc)) from None
    return specs


def _require(condition: bool, message: str) -> None:
    if not condition:
        raise ConfigError(message)


def compose_config(overrides: Sequence[str], return_hydra_config: bool = False) -> DictConfig:
    """The config train.py composes for these overrides; ConfigError (first line) where Hydra refuses them."""
    from hydra import compose, initialize_config_dir

    try:
        with initialize_config_dir(config_dir=str(CONF_DIR), version_base="1.3"):
            return compose(config_name="config", overrides=list(overrides), return_hydra_config=return_hydra_config)
    except MissingConfigException as exc:
        if not exc.options:  # no group option: a missing config file
            raise ConfigError(str(exc).strip().splitlines()[0]) from None
        group, _, choice = str(exc.missing_cfg_file).rpartition("/")  # e.g. hydra/launcher=slrum
        raise unknown_choice(group, choice, exc.options) from None
    except (HydraException, OmegaConfBaseException) as exc:
        raise ConfigError(str(exc).strip().splitlines()[0]) from None


def check_command(overrides: list[str]) -> None:
    """The one check of a run's command line: group options, keys (in the schema), types, then validate()."""
    check_overrides(overrides)
    groups = {p.name for p in CONF_DIR.iterdir() if p.is_dir()}
    parsed = OverridesParser.create().parse_overrides(overrides)
    choices = [text for text, o in zip(overrides, parsed)
               if o.key_or_group.split("/")[0] in groups | {"hydra"} or o.key_or_group == "hydra.searchpath"]
    schema, strategies = resolved(compose_config(choices)), strategy_configs(overrides)
    for override in parsed:
        key = override.key_or_group
        block = key.split(".")[0]
        if key.split("/")[0] in groups | {"hydra"} or block == "hydra" or override.is_delete():
            continue
        if block in strategies and block not in schema:
            raise ConfigError(f"{key} is a knob of strategy={block}, not of strategy={schema['strategy']['name']}")
        if not (override.is_add() or override.is_force_add()) and not holds(schema, key):
            raise unknown_key(key, schema)
    cfg = compose_config(overrides)
    check_keys(resolved(cfg), schema)
    validate(cfg)


def container(cfg: DictConfig, resolve: bool = True) -> dict[str, Any]:
    return cast(dict[str, Any], OmegaConf.to_container(cfg, resolve=resolve))  # a DictConfig's container is a dict


def resolved(cfg: DictConfig) -> dict[str, Any]:
    try:
        return container(cfg)
    except OmegaConfBaseException as exc:
        raise ConfigError(str(exc).strip().splitlines()[0]) from None


def validate(cfg: DictConfig, choose_network: bool = False) -> Validated:
    """Values, rules across knobs, the strategy's own and what it needs here: ConfigError or BackendUnavailable; the
    strategy, its launch spec, cost model and link (choose_network: network=auto resolved in cfg, then checked)."""
    check_mandatory(cfg)
    strategy = strategy_class(cfg)
    try:
        model = cost_model(cfg.strategy)
    except ValueError as exc:
        raise ConfigError(str(exc)) from None
    check_values(cfg, cfg.strategy.name, strategy.rules)
    project_targets(cfg.report.project, [])
    _require(not cfg.eval_in_training or cfg.target.estimator in CAUSAL,
             f"eval_in_training=true stops a run at its crossing: target.estimator must be one of {', '.join(CAUSAL)} "
             f"(they never look past the next evaluation), got {cfg.target.estimator}")
    _require(int(cfg.precise_bn_samples) == 0 or int(cfg.precise_bn_samples) >= int(cfg.batch_size),
             f"precise_bn_samples must be 0 (off) or at least batch_size={cfg.batch_size}, "
             f"got {cfg.precise_bn_samples}")
    launch = cfg.launch
    _require(launch.node_rank < launch.nnodes,
             f"launch.node_rank must be in [0, {launch.nnodes}), got {launch.node_rank}")
    _require(launch.nnodes == 1 or launch.master_port, "several hosts need a fixed launch.master_port")
    check_data_config(cfg.data)
    check_model(cfg)
    resolve_device(cfg.device)
    strategy.validate(cfg)
    spec = strategy.launch_spec(cfg)
    check_fault_config(cfg, spec.workers)
    processes = spec.processes
    _require(processes % launch.nnodes == 0,
             f"{processes} processes do not split evenly over launch.nnodes={launch.nnodes}")
    link = choose_link(cfg, processes, int(launch.nnodes)) if choose_network else None
    check_network_config(cfg.network, processes, launch.nnodes)
    check_emulate_config(cfg, spec.threads, processes)
    emulate = emulate_of(cfg)
    if emulate["dilation"] != 1:  # only up to the factor the strategy's checks passed on this machine, unless asked
        checked, source = checked_dilation(cfg.strategy.name)
        _require(emulate["dilation"] <= checked or emulate["allow_unchecked_dilation"],
                 f"strategy {cfg.strategy.name} is checked for emulate.dilation up to {checked:g} ({source}), not "
                 f"{emulate['dilation']:g}; emulate.allow_unchecked_dilation=true runs it anyway, marked 'dilation "
                 "unchecked'")
    strategy.check_available(cfg)
    return strategy, spec, model, link
