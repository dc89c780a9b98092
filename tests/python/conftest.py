# Makes `import lmcore` find the module built by CMake (build/release/python by default, or
# $LMCORE_BUILD_DIR/python), and exposes the repository root to tests.
import os
import pathlib
import sys

ROOT = pathlib.Path(__file__).resolve().parents[2]
BUILD = pathlib.Path(os.environ.get("LMCORE_BUILD_DIR", ROOT / "build" / "release"))
sys.path.insert(0, str(BUILD / "python"))
os.environ.setdefault("LMCORE_NUM_THREADS", "2")
