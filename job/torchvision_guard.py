"""Import torchvision even where its compiled ops (`_C.so`) do not load against the installed torch: models,
transforms and datasets do not need them, so their fake-kernel registrations are skipped (with one warning)."""
import importlib.util
import sys
import types
import warnings
from pathlib import Path

import torch

_warned = False


def compiled_ops_load() -> bool:
    spec = importlib.util.find_spec("torchvision")
    if spec is None or not spec.submodule_search_locations:
        raise ImportError("torchvision is not installed: run `make setup`")
    library = next(Path(spec.submodule_search_locations[0]).glob("_C*.so"), None)
    if library is None:
        return False
    try:
        torch.ops.load_library(str(library))
    except (OSError, RuntimeError):
        return False
    return True


def import_torchvision() -> types.ModuleType:
    global _warned
    if "torchvision" not in sys.modules and not compiled_ops_load():
        if not _warned:
            warnings.warn(f"torchvision's compiled ops do not load against this torch ({torch.__version__}); models, "
                          "transforms and datasets work, torchvision.ops do not", RuntimeWarning, stacklevel=2)
            _warned = True
        sys.modules.setdefault("torchvision._meta_registrations", types.ModuleType("torchvision._meta_registrations"))
    import torchvision

    return torchvision
