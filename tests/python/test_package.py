# The lmcore package: the extension as lmcore._lmcore, its names re-exported, its submodules importable
# by dotted name, and `cmake --install` placing a tree that Debian's python3 imports.
import os
import pathlib
import subprocess
import sys

import pytest

import lmcore
from conftest import BUILD


def test_package_layout():
    assert pathlib.Path(lmcore.__file__).name == "__init__.py"
    assert lmcore._lmcore.__name__ == "lmcore._lmcore"
    assert lmcore.__version__ == lmcore._lmcore.__version__


def test_every_extension_name_is_reexported():
    public = [n for n in dir(lmcore._lmcore) if not n.startswith("_")]
    assert len(public) > 50
    missing = [n for n in public if getattr(lmcore, n, None) is not getattr(lmcore._lmcore, n)]
    assert missing == []
    assert issubclass(lmcore.Error, ValueError)


def test_submodules_import_by_dotted_name():
    import lmcore.dist
    import lmcore.layers
    from lmcore.layers import rope_forward

    assert lmcore.dist is lmcore._lmcore.dist
    assert rope_forward is lmcore._lmcore.layers.rope_forward
    assert callable(lmcore.dist.launch)


@pytest.mark.skipif(not (BUILD / "cmake_install.cmake").exists(), reason="needs a CMake build tree")
def test_cmake_install_places_an_importable_package(tmp_path):
    prefix = tmp_path / "prefix"
    r = subprocess.run(["cmake", "--install", str(BUILD), "--prefix", str(prefix), "--component", "python"],
                       capture_output=True, text=True)
    assert r.returncode == 0, r.stderr
    site = prefix / "lib" / f"python{sys.version_info.major}.{sys.version_info.minor}" / "dist-packages"
    assert (site / "lmcore" / "__init__.py").exists()
    assert list((site / "lmcore").glob("_lmcore*.so"))
    # The default prefix /usr/local gives the folder Debian's python3 reads.
    assert str(pathlib.Path("/usr/local") / site.relative_to(prefix)) in sys.path
    env = dict(os.environ, PYTHONPATH=str(site))
    code = "import lmcore, lmcore.dist; print(lmcore.__file__); print(lmcore.dist.launch)"
    r = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, env=env, cwd=tmp_path)
    assert r.returncode == 0, r.stderr
    assert r.stdout.splitlines()[0].startswith(str(site))


def _lmcore_info(env_value):
    env = dict(os.environ, LMCORE_CPU_CAPABILITY=env_value)
    return subprocess.run([str(BUILD / "lmcore"), "info"], capture_output=True, text=True, timeout=60, env=env)


def test_cpu_capability_caps_the_simd_target_of_the_cli_and_the_module():
    # Every x86-64 machine this runs on has SSE4; the cap is shown with the target it gives.
    r = _lmcore_info("sse4")
    assert r.returncode == 0, r.stderr
    line = next(l for l in r.stdout.splitlines() if l.startswith("simd target"))
    assert line.split()[2] == "SSE4", line
    assert "capped by LMCORE_CPU_CAPABILITY=sse4" in line and "AVX" not in line, line
    # The module reads it too, and its kernels give torch's results on the capped target.
    code = ("import lmcore, torch, torch.utils.dlpack as d; x = torch.randn(1000, 37, dtype=torch.float64).float();"
            "s = lmcore.sum(lmcore.from_dlpack(d.to_dlpack(x)), dim=-1);"
            "r = torch.utils.dlpack.from_dlpack(s).double(); xd = x.double();"
            "bound = 37 * 2.0 ** -24 * xd.abs().sum(-1);"  # a rounding per addition, at most
            "print(lmcore.simd_target(), float(((r - xd.sum(-1)).abs() / bound).max()))")
    env = dict(os.environ, LMCORE_CPU_CAPABILITY="default", PYTHONPATH=str(BUILD / "python"))
    p = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120, env=env)
    assert p.returncode == 0, p.stderr
    target, err = p.stdout.split()
    assert target in ("SCALAR", "EMU128"), p.stdout
    assert float(err) <= 1, p.stdout


def test_a_bad_cpu_capability_is_an_error_naming_the_variable_and_the_choices():
    r = _lmcore_info("avx1024")
    assert r.returncode == 1, (r.returncode, r.stdout, r.stderr)
    assert "LMCORE_CPU_CAPABILITY: 'avx1024' is not one of avx512, avx2, sse4, ssse3, default" in r.stderr, r.stderr
