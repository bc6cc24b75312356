"""The shared sample order, data sets and models (ghost BatchNorm, precision)."""
import subprocess
import sys

import pytest

from helpers import ROOT


pytestmark = pytest.mark.timeout(120)


@pytest.mark.integration
def test_torchvision_guard_warns_once_and_models_work():
    code = (
        "import warnings\n"
        "warnings.simplefilter('always')\n"
        "from job.torchvision_guard import compiled_ops_load, import_torchvision\n"
        "ok = compiled_ops_load()\n"
        "with warnings.catch_warnings(record=True) as caught:\n"
        "    import_torchvision(); import_torchvision()\n"
        "import torchvision\n"
        "torchvision.models.resnet18(num_classes=3)\n"
        "n = sum('compiled ops' in str(w.message) for w in caught)\n"
        "print(ok, n)\n"
    )
    out = subprocess.run([sys.executable, "-c", code], cwd=ROOT, capture_output=True, text=True, timeout=120)
    assert out.returncode == 0, out.stderr
    ops_load, warnings_seen = out.stdout.split()
    assert warnings_seen == ("0" if ops_load == "True" else "1")
