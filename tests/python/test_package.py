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
