"""model=custom: a user's model, named by model.target, built as the peers build it and checked against the data
before launch; the report tells custom models apart and runs their baselines on the same model. The models live
outside the project's code (tests/usermodels/user_models.py, put on sys.path here)."""
from pathlib import Path

import pytest
import torch
from omegaconf import OmegaConf

from helpers import compose_config
from job.errors import ConfigError
from job.model import GhostBatchNorm2d, build_model
from launchers.config import validate
from metrics.report.baselines import baseline_overrides
from metrics.report.runs import Run
from metrics.summary.schema import Summary

pytestmark = pytest.mark.timeout(60)

USER_MODELS = Path(__file__).resolve().parent.parent / "usermodels"
# SmallNet(10 classes, 1 channel, hidden=4), counted by hand from its layers:
#   conv 1->4 3x3 no bias 36 | BN(4) 8 | linear (4 x 2 x 2)->10 160 + 10
SMALLNET_DIGITS_PARAMS = 36 + 8 + 170  # 214


@pytest.fixture(autouse=True)
def user_models_importable(monkeypatch):
    monkeypatch.syspath_prepend(str(USER_MODELS))


def custom(*overrides: str):
    return compose_config("model=custom", *overrides)


@pytest.mark.parametrize("target", ["user_models:build", f"{USER_MODELS / 'user_models.py'}:build"])
def test_the_peers_build_the_users_model_with_its_options_precision_and_ghost_batch_norm(target):
    cfg = custom(f"model.target={target}", "+model.options.hidden=4", "dtype=float64", "batch_size=16")
    validate(cfg)
    model = build_model(cfg, 10, 1)
    assert type(model).__name__ == "SmallNet"
    assert sum(p.numel() for p in model.parameters()) == SMALLNET_DIGITS_PARAMS
    assert {p.dtype for p in model.parameters()} == {torch.float64}
    assert [m.group for m in model.modules() if isinstance(m, GhostBatchNorm2d)] == [16]


def test_ghost_batch_norm_keeps_a_frozen_batch_norm_frozen():
    cfg = custom("model.target=user_models:frozen_batch_norm", "+model.options.hidden=4")
    validate(cfg)
    model = build_model(cfg, 10, 1)
    assert sum(p.numel() for p in model.parameters() if p.requires_grad) == SMALLNET_DIGITS_PARAMS - 8  # BN(4)'s 8
    assert any(isinstance(m, GhostBatchNorm2d) for m in model.modules())


def test_an_entry_point_of_an_installed_package_names_a_model(tmp_path, monkeypatch):
    dist = tmp_path / "users_package-1.0.dist-info"
    dist.mkdir()
    (dist / "METADATA").write_text("Metadata-Version: 2.1\nName: users-package\nVersion: 1.0\n")
    (dist / "entry_points.txt").write_text("[avgbench.models]\nsmallnet = user_models:build\n")
    monkeypatch.syspath_prepend(str(tmp_path))
    cfg = custom("model.target=smallnet", "+model.options.hidden=4")
    validate(cfg)
    assert sum(p.numel() for p in build_model(cfg, 10, 1).parameters()) == SMALLNET_DIGITS_PARAMS
    with pytest.raises(ConfigError, match=r"model.target=bignet is neither .* \(installed: smallnet\)"):
        validate(custom("model.target=bignet"))


@pytest.mark.parametrize("overrides, error", [
    ([], "model.target has no default with model=custom: add model.target=..."),
    (["model.target=user_models:seven_classes"],
     r"maps a batch of shape \(2, 1, 32, 32\) to \(2, 7\), but data.name=digits has 10 classes"),
    (["model.target=no_such_package.models:build"], r"cannot import it \(ModuleNotFoundError: No module named"),
    (["model.target=user_models:no_such_function"], r"cannot import it \(AttributeError"),
    (["model.target=user_models.py:build"], r"cannot import it \(ValueError: user_models.py is not an absolute path"),
    (["model.target=user_models:NOT_CALLABLE"], "is a int, not a callable"),
    (["model.target=user_models:not_a_module"], "returned a str, not a torch.nn.Module"),
    (["model.target=user_models:frozen"], "has no trainable parameters"),
    (["model.target=user_models:build", "+model.depth=3"], r"building it .* \(TypeError: .*'depth'"),
    (["model.target=user_models:fails_loudly"], r"\(ValueError: first line second line\)"),
    (["model.target=user_models:gray_only", "data=synthetic", "data.channels=3"],
     r"its forward on a batch of shape \(2, 3, 32, 32\) \(data.name=synthetic\) failed \(RuntimeError"),
])
def test_a_model_that_cannot_train_on_the_data_is_a_one_line_error_before_launch(overrides, error):
    with pytest.raises(ConfigError, match=error) as caught:
        validate(custom(*overrides))
    assert "\n" not in str(caught.value)


def test_an_image_folders_classes_are_its_train_subfolders(tmp_path):
    for split in ("train", "test"):
        for label in ("cat", "dog", "owl"):
            (tmp_path / split / label).mkdir(parents=True)
    (tmp_path / "train" / "notes.txt").write_text("not a class")
    folder = ("data=imagefolder", f"data.root={tmp_path}", "data.image_size=16")
    validate(custom("model.target=user_models:build", *folder))
    with pytest.raises(ConfigError, match=r"to \(2, 7\), but data.name=imagefolder has 3 classes"):
        validate(custom("model.target=user_models:seven_classes", *folder))


def test_the_report_tells_custom_models_apart_and_runs_their_baselines_on_the_same_model():
    def run(target: str) -> Run:
        cfg = custom(f"model.target={target}", "strategy=allreduce", "peers=2")
        return Run(Path("/runs/x"), Summary.from_dict({"config": OmegaConf.to_container(cfg, resolve=True)}), [])

    assert run("user_models:build").dataset == ("digits", "user_models:build")
    assert run("user_models:build").dataset != run("other_models:build").dataset
    overrides = baseline_overrides(run("user_models:build"), 2, 1)
    assert overrides["model"] == "custom" and overrides["model.target"] == "user_models:build"


def test_only_model_options_take_keys_of_your_own():
    """The schema refuses an unknown key beside model.target (a misspelt knob), and takes any key under
    model.options (the builder's keyword arguments)."""
    from helpers import refused

    assert refused("model=custom", "model.target=user_models:build", "+model.hidden=4").startswith(
        "unknown key model.hidden")
    from launchers.schema import check_keys

    check_keys({"model": {"name": "custom", "target": "m:f", "options": {"hidden": 4, "any": [1]}}},
               {"model": {"name": "custom", "target": "???", "options": {}}})
