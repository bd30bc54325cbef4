"""`pip install .` into a fresh virtual environment, then python tests
against the installed package (not build/python).

    pip_venv.py SOURCE VENV EXTENSION TEST...

Makes VENV (--system-site-packages: Debian's torch, numpy, setuptools,
wheel and pytest), pip-installs SOURCE there offline (--no-build-isolation
--no-index --no-deps) with GIFT_PREBUILT_EXTENSION=EXTENSION (the _gift
CMake built: nothing is rebuilt), checks that `import gift` finds the
installed package inside VENV, and runs pytest on each TEST with VENV's
interpreter. Exit status: the first failure's.
"""

import os
import shutil
import subprocess
import sys


def main(source, venv, extension, tests):
    shutil.rmtree(venv, ignore_errors=True)
    subprocess.check_call([sys.executable, "-m", "venv",
                           "--system-site-packages", venv])
    python = os.path.join(venv, "bin", "python")
    env = dict(os.environ, GIFT_PREBUILT_EXTENSION=extension,
               PIP_NO_CACHE_DIR="1", PIP_DISABLE_PIP_VERSION_CHECK="1")
    subprocess.check_call([python, "-m", "pip", "install", "--quiet",
                           "--no-build-isolation", "--no-index", "--no-deps",
                           source], env=env)
    where = subprocess.check_output(
        [python, "-c", "import gift, gift._gift; print(gift.__file__); "
         "print(gift._gift.__file__)"], text=True).split()
    real = os.path.realpath(venv) + os.sep
    for path in where:
        if not os.path.realpath(path).startswith(real):
            sys.exit(f"pip_venv: {path} is not inside the venv {venv}")
    print("installed:", *where)
    for test in tests:
        rc = subprocess.call([python, "-m", "pytest", "-q", "-p",
                              "no:cacheprovider", test])
        if rc != 0:
            return rc
    return 0


if __name__ == "__main__":
    if len(sys.argv) < 5:
        sys.exit(__doc__)
    sys.exit(main(sys.argv[1], sys.argv[2], sys.argv[3], sys.argv[4:]))
