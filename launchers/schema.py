"""The configuration schema: conf/'s YAML gives each knob's default and type, RULES its allowed values."""
import difflib
from typing import Any, Sequence

from omegaconf import DictConfig, OmegaConf

from job.errors import ConfigError
from job.rules import Rule, above, by_rank, integer, integer_from, number, one_of
from job.model import DTYPES, MODELS
from job.data import DATASETS
from job.optim import OPTIMIZERS, SCALINGS
from launchers.lock import LOCK_MODES
from metrics.report.primary import CHOICES as PRIMARY_CHOICES
from metrics.summary.target import ESTIMATORS
from netemu.checks import NETWORK_MODES
from netemu.cpu import ISOLATE_MODES
from netemu.fabric import MAX_MTU, MIN_MTU
from strategies.transport import TRANSPORTS


RULES: dict[str, Rule] = {  # dotted knob -> its allowed values (a knob without an entry: any value of its type)
    "model.name": one_of(*MODELS),
    "data.name": one_of(*DATASETS),
    "optim.name": one_of(*OPTIMIZERS),
    "peers": integer_from(1),
    "peer_cpus": integer_from(1),
    "batch_size": integer_from(1),
    "max_steps": integer_from(1),
    "lr": above(0),
    "lr_scaling": one_of(*SCALINGS),
    "warmup_steps": integer_from(0),
    "repeats": Rule(lambda v: v == "auto" or integer(v) and v >= 1,
                    "must be an integer >= 1 (or auto: planned from the recorded noise)"),
    "block": Rule(lambda v: v is None or integer(v) and v >= 0,
                  "must be null or an integer >= 0 (the multirun sets it)"),
    "dtype": one_of(*DTYPES),
    "eval_every": integer_from(0),
    "eval_confirm_after": integer_from(0),
    "precise_bn_samples": integer_from(0),
    "noise_scale_every": integer_from(0),
    "measure_window.after_step": integer_from(0),
    "measure_window.steps": integer_from(1),
    "target.metric": one_of("test_accuracy", "test_loss"),
    "target.estimator": one_of(*ESTIMATORS),
    "target.bootstrap": Rule(lambda v: integer(v) and v >= 0, "must be an integer >= 0 (resamples; 0: none)"),
    "report.primary": one_of(*PRIMARY_CHOICES),
    "report.baselines": one_of("auto", "off"),
    "report.max_blocks": integer_from(2),
    "report.smallest_effect": Rule(lambda v: number(v) and v > 1, "must be a ratio > 1 (e.g. 1.25: 25 % either way)"),
    "speed_reference.samples": integer_from(2),  # BatchNorm in training needs more than one value per channel
    "speed_reference.repetitions": integer_from(0),
    "speed_reference.max_share": Rule(lambda v: number(v) and 0 < v < 1, "must be a fraction in (0, 1)"),
    "speed_reference.tolerance": Rule(lambda v: number(v) and 0 < v < 1, "must be a fraction in (0, 1)"),
    "lock": one_of(*LOCK_MODES),
    "transport": one_of(*TRANSPORTS),
    "progress_interval_s": above(0),
    "sampler.interval": above(0),
    "timeouts.collective_s": above(0),
    "timeouts.startup_s": above(0),
    "timeouts.shutdown_s": above(0),
    "launch.nnodes": integer_from(1),
    "launch.node_rank": integer_from(0),
    "network.name": one_of(*NETWORK_MODES),
    "network.bandwidth_mbit": Rule(lambda v: v is None or number(v) and v > 0,
                                   "must be > 0 Mbit/s (or null: unshaped)"),
    "network.per_peer": Rule(lambda v: by_rank(v, lambda r: number(r) and r > 0),
                             "must list rates > 0 Mbit/s by rank (null entries: network.bandwidth_mbit)"),
    "network.latency_ms": Rule(lambda v: v is None or number(v) and v >= 0, "must be >= 0"),
    "network.mtu": Rule(lambda v: integer(v) and MIN_MTU <= v <= MAX_MTU,
                        f"must be a whole number of bytes from {MIN_MTU} to {MAX_MTU} (a veth pair's range; 1500: "
                        "standard Ethernet, 9000: jumbo frames)"),
    "emulate.isolate": one_of(*ISOLATE_MODES),
    "emulate.dilation": Rule(lambda v: number(v) and v >= 1, "must be >= 1"),
    "emulate.period_us": Rule(lambda v: integer(v) and 1000 <= v <= 1_000_000, "must be in [1000, 1000000]"),
    "fault.at_step": integer_from(1),
}


def check_value(key: str, value: object, rule: Rule | None = None) -> None:
    """ConfigError unless `rule` (default: RULES') allows `value` for the dotted knob `key`."""
    rule = rule or RULES[key]
    if not rule.accepts(value):
        raise ConfigError(f"{key} {rule.expects}, got {value}")


def check_values(cfg: DictConfig, block: str, block_rules: dict[str, Rule]) -> None:
    """ConfigError for the first knob of RULES, or of `block_rules` under `block`, with a value not allowed."""
    rules = RULES | {f"{block}.{knob}": rule for knob, rule in block_rules.items()}
    for key, rule in rules.items():
        node, _, leaf = key.rpartition(".")
        parent = OmegaConf.select(cfg, node) if node else cfg
        if parent is not None and leaf in parent:
            check_value(key, parent[leaf], rule)


def _leaves(tree: dict[str, Any], prefix: str = "") -> list[str]:
    """Every dotted key of the tree, each block before its keys."""
    return [key for name, value in tree.items()
            for key in [f"{prefix}{name}", *(_leaves(value, f"{prefix}{name}.") if isinstance(value, dict) else [])]]


def unknown_key(key: str, known: dict[str, Any]) -> ConfigError:
    """The error for a key the schema does not hold, with the closest known key where one is close."""
    close = difflib.get_close_matches(key, _leaves(known), n=1)
    hint = f" (did you mean {close[0]}?)" if close else " (--help lists the knobs)"
    return ConfigError(f"unknown key {key}{hint}")


def unknown_choice(group: str, choice: str, options: Sequence[str]) -> ConfigError:
    """The error for an option a config group does not have, with the closest one where one is close."""
    close = difflib.get_close_matches(choice, options, n=1)
    hint = f"did you mean {close[0]}? " if close else ""
    return ConfigError(f"unknown {group} '{choice}' ({hint}choose from: {', '.join(options)})")


def check_mandatory(cfg: DictConfig) -> None:
    """ConfigError naming the first value conf/ leaves mandatory (???) that the command did not set."""
    if missing := sorted(OmegaConf.missing_keys(cfg)):
        key = missing[0]
        block = key.split(".")[0]
        chosen = OmegaConf.select(cfg, f"{block}.name")  # the group option that asks for it, e.g. data=imagefolder
        raise ConfigError(f"{key} has no default{f' with {block}={chosen}' if chosen else ''}: add {key}=...")


def holds(tree: dict[str, Any], key: str) -> bool:
    for part in key.split("."):
        if not isinstance(tree, dict) or part not in tree:
            return False
        tree = tree[part]
    return True


TYPE_NAMES = {bool: "true or false", int: "a number", float: "a number", list: "a list", dict: "a block of knobs"}


def accepted(default: object, rule: Rule | None) -> str:
    """What a knob accepts, in words (the knob tables' column): its rule, else its default's type."""
    if rule is not None:
        return rule.expects.removeprefix("must be ").removeprefix("must ")
    return "any" if default is None else TYPE_NAMES.get(type(default), "text")


def _type_fits(value: object, default: object) -> bool:
    if value is None or default is None:  # null: off, or unset (the rules say where it is not allowed)
        return True
    if isinstance(default, bool):
        return isinstance(value, bool)
    if isinstance(default, (int, float)):
        return number(value)  # integer-ness, where it matters, is a rule
    if isinstance(default, str):
        return not isinstance(value, (list, dict))  # a name may read as a number (run_id=7)
    return isinstance(value, type(default))


def check_keys(cfg: dict[str, Any], schema: dict[str, Any]) -> None:
    """Every key of `cfg` is in `schema` with the default's type ({}: any keys); ConfigError names the first not."""
    def walk(tree: dict[str, Any], known: dict[str, Any], prefix: str) -> None:
        for key, value in tree.items():
            path = f"{prefix}{key}"
            if key not in known:
                raise unknown_key(path, schema)
            default = known[key]
            if default == {}:  # an open block (e.g. model.options): any keys
                continue
            if isinstance(value, dict) and isinstance(default, dict):
                walk(value, default, f"{path}.")
            elif not _type_fits(value, default):
                expected = TYPE_NAMES.get(type(default), "text")
                raise ConfigError(f"{path} must be {expected} (as its default {default!r}), got {value!r}")
    walk(cfg, schema, "")
