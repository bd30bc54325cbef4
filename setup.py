"""setuptools' side of `pip install .` (pyproject.toml): the extension
gift._gift is built by CMake, not by setuptools.

build_ext runs `cmake --build BUILD --target gift_python` (BUILD is
$GIFT_CMAKE_BUILD_DIR, else ./build, configured here first when it has no
CMakeCache.txt) and copies BUILD/python/gift/_gift*.so into the wheel; with
$GIFT_PREBUILT_EXTENSION set it copies that file and builds nothing.
"""

import glob
import os
import shutil
import subprocess
import sys

from setuptools import Extension, setup
from setuptools.command.build_ext import build_ext

ROOT = os.path.dirname(os.path.abspath(__file__))


class CMakeBuild(build_ext):
    """build_ext for the one CMake-built extension."""

    def build_extension(self, ext):
        built = os.environ.get("GIFT_PREBUILT_EXTENSION") or self._cmake()
        target = self.get_ext_fullpath(ext.name)
        os.makedirs(os.path.dirname(target), exist_ok=True)
        shutil.copyfile(built, target)

    def _cmake(self):
        build = os.path.abspath(os.environ.get("GIFT_CMAKE_BUILD_DIR")
                                or os.path.join(ROOT, "build"))
        if not os.path.exists(os.path.join(build, "CMakeCache.txt")):
            subprocess.check_call(
                ["cmake", "-S", ROOT, "-B", build, "-DCMAKE_BUILD_TYPE=Release",
                 "-DGIFT_BUILD_TESTS=OFF", "-DGIFT_BUILD_BENCH=OFF",
                 f"-DPython3_EXECUTABLE={sys.executable}"])
        jobs = ([] if os.environ.get("CMAKE_BUILD_PARALLEL_LEVEL")
                else ["-j", str(os.cpu_count() or 1)])
        subprocess.check_call(["cmake", "--build", build, "--target",
                               "gift_python", *jobs])
        found = glob.glob(os.path.join(build, "python", "gift", "_gift*.so"))
        if len(found) != 1:
            raise RuntimeError(f"gift: expected one _gift*.so in {build}/"
                               f"python/gift, found {found}")
        return found[0]


os.makedirs(os.path.join(ROOT, "build-pip"), exist_ok=True)  # egg-base
setup(ext_modules=[Extension("gift._gift", sources=[])],
      cmdclass={"build_ext": CMakeBuild})
