"""Build hook: a wheel (``pip install .``) carries the Hydra tree and the vendored data.

``conf/`` and ``data/`` live beside the packages in a checkout; the wheel copies them to
``mlsys_repro/common/repro/_bundled/{conf,data}``, where ``mlsys_repro.common.repro.schema.asset_root`` finds them when
no checkout is around the code. Editable installs (``pip install -e .``) read the checkout and copy nothing. Everything
else is in ``pyproject.toml``.
"""

import shutil
from pathlib import Path

from setuptools import setup
from setuptools.command.build_py import build_py

ROOT = Path(__file__).resolve().parent
BUNDLED = ("conf", "data")


class BuildPyWithAssets(build_py):
    def run(self):
        super().run()
        if getattr(self, "editable_mode", False):
            return
        dest = Path(self.build_lib) / "mlsys_repro" / "common" / "repro" / "_bundled"
        for name in BUNDLED:
            shutil.rmtree(dest / name, ignore_errors=True)
            shutil.copytree(ROOT / name, dest / name, ignore=shutil.ignore_patterns("__pycache__", "*.pyc"))


setup(cmdclass={"build_py": BuildPyWithAssets})
