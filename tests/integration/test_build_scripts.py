"""The Horovod build scripts: the compiler wrapper, and build_horovod.sh's build settings (dry run)."""
import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from helpers import ROOT

pytestmark = pytest.mark.integration  # runs the build scripts and g++

WRAPPER = ROOT / "scripts" / "cxx17-wrapper.sh"
BUILD = ROOT / "scripts" / "build_horovod.sh"

# Uses std::string and std::runtime_error without including <string> or <stdexcept>.
NO_INCLUDES_CC = """
int main() {
    std::string s = "x";
    try { throw std::runtime_error(s); }
    catch (const std::exception& e) { return e.what()[0] == 'x' ? 0 : 1; }
}
"""


def write_script(path: Path, text: str) -> Path:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text("#!/bin/sh\n" + text)
    path.chmod(0o755)
    return path


@pytest.mark.timeout(60)
def test_wrapper_raises_the_standard_and_forces_the_includes(tmp_path):
    fake_cxx = write_script(tmp_path / "fake-cxx", 'for a in "$@"; do echo "$a"; done\n')
    args = ["-std=c++14", "-DMSG=a b", "-c", "x.cc", "-std=c++11", "-O2", "-std=gnu++14", "-std=gnu++11",
            "-std=c++17", "-std=c++20", "-o", "x.o"]
    out = subprocess.run([str(WRAPPER), *args], env=os.environ | {"AVGBENCH_REAL_CXX": str(fake_cxx)},
                         capture_output=True, text=True, check=True).stdout
    assert out.splitlines() == [
        "-include", "string", "-include", "stdexcept",
        "-std=c++17", "-DMSG=a b", "-c", "x.cc", "-std=c++17", "-O2", "-std=c++17", "-std=c++17",
        "-std=c++17", "-std=c++20", "-o", "x.o"]


@pytest.mark.timeout(60)
@pytest.mark.skipif(shutil.which("g++") is None, reason="needs g++")
def test_wrapper_compiles_code_that_relies_on_transitive_includes(tmp_path):
    src = tmp_path / "t.cc"
    src.write_text(NO_INCLUDES_CC)
    env = {k: v for k, v in os.environ.items() if k != "AVGBENCH_REAL_CXX"}

    plain = subprocess.run(["g++", "-std=c++14", "-c", str(src), "-o", str(tmp_path / "t.o")],
                           capture_output=True, text=True)
    assert plain.returncode != 0 and "string" in plain.stderr  # the file really lacks the headers

    subprocess.run([str(WRAPPER), "-std=c++14", "-c", str(src), "-o", str(tmp_path / "t.o")],
                   env=env, check=True)
    subprocess.run([str(WRAPPER), str(tmp_path / "t.o"), "-o", str(tmp_path / "t")], env=env, check=True)  # link
    assert subprocess.run([str(tmp_path / "t")]).returncode == 0


def dry_run(tmp_path: Path, cuda: str | None, **env: str) -> subprocess.CompletedProcess:
    """build_horovod.sh in dry-run mode, in a venv whose python sees a fake torch (CPU or CUDA build)."""
    fake = tmp_path / "fake"
    # Its pip refuses to run: a dry run must neither install nor build.
    write_script(fake / "venv" / "bin" / "python",
                 f'[ "$1 $2" = "-m pip" ] && {{ echo "fake venv: no pip" >&2; exit 99; }}\nexec {sys.executable} "$@"\n')
    version = "2.13.0+cpu" if cuda is None else "2.13.0"
    (fake / "torch").mkdir()
    (fake / "torch" / "__init__.py").write_text(
        f"__version__ = {version!r}\nclass version:\n    cuda = {cuda!r}\n")
    env = {"PATH": "/usr/bin:/bin", "HOME": str(tmp_path), "PYTHONPATH": str(fake),
           "AVGBENCH_HOROVOD_DRY_RUN": "1", "AVGBENCH_WHEEL_CACHE": str(tmp_path / "cache")} | env
    return subprocess.run([str(BUILD), str(fake / "venv")], env=env, capture_output=True, text=True)


def build_env(out: str) -> dict[str, str]:
    return dict(line.split("=", 1) for line in out.splitlines() if "=" in line and " " not in line)


@pytest.mark.timeout(60)
def test_dry_run_cpu_torch(tmp_path):
    res = dry_run(tmp_path, cuda=None)
    assert res.returncode == 0, res.stdout + res.stderr
    env = build_env(res.stdout)
    assert env["CMAKE_POLICY_VERSION_MINIMUM"] == "3.5"
    assert env["CXX"] == str(WRAPPER)
    assert env["HOROVOD_WITH_PYTORCH"] == env["HOROVOD_WITH_GLOO"] == env["HOROVOD_WITH_MPI"] == "1"
    assert "HOROVOD_GPU_OPERATIONS" not in env
    assert "pip wheel" in res.stdout and "horovod==0.28.1" in res.stdout
    assert f"would build into {tmp_path}/cache/horovod-0.28.1-torch2.13.0+cpu-cp" in res.stdout
    assert "cuda" not in res.stdout


@pytest.mark.timeout(60)
def test_dry_run_cuda_torch_without_toolkit_says_what_to_install(tmp_path):
    (tmp_path / "cuda").mkdir()
    res = dry_run(tmp_path, cuda="12.8", HOROVOD_CUDA_HOME=str(tmp_path / "cuda"))
    assert res.returncode == 1
    assert "CUDA 12.8 build" in res.stdout
    assert "install the CUDA toolkit 12.8" in res.stdout
    if not any(Path(d, "nccl.h").exists() for d in ("/usr/include", "/usr/local/include")):  # no system NCCL
        assert "install libnccl2 and libnccl-dev" in res.stdout
    assert "pip wheel" not in res.stdout


@pytest.mark.timeout(60)
def test_dry_run_cuda_torch_builds_with_nccl(tmp_path):
    cuda = tmp_path / "cuda"
    write_script(cuda / "bin" / "nvcc", 'echo "Cuda compilation tools, release 12.8, V12.8.93"\n')
    (cuda / "include").mkdir()
    (cuda / "include" / "nccl.h").write_text("")
    (cuda / "lib64").mkdir()
    (cuda / "lib64" / "libnccl.so").write_text("")
    res = dry_run(tmp_path, cuda="12.8", HOROVOD_CUDA_HOME=str(cuda))
    assert res.returncode == 0, res.stdout + res.stderr
    env = build_env(res.stdout)
    assert env["HOROVOD_GPU_OPERATIONS"] == "NCCL"
    assert env["HOROVOD_NCCL_LINK"] == "SHARED"
    assert env["HOROVOD_CUDA_HOME"] == str(cuda)
    assert env["CMAKE_POLICY_VERSION_MINIMUM"] == "3.5"
    assert "WARNING" not in res.stdout
    # The CUDA variant has its own cache entry.
    assert f"would build into {tmp_path}/cache/horovod-0.28.1-torch2.13.0-cp" in res.stdout
    assert res.stdout.split(" with\n")[0].endswith("-cuda12.8")
