"""Makes the benchmark scripts run on a machine whose `python3` on PATH lacks Pillow or numpy.

scripts/setup (with ENLARGER_BENCH_DEPS=1) installs Debian's python3-pil and python3-numpy, which
only /usr/bin/python3 sees; a pyenv or venv interpreter earlier on PATH usually has neither.
Import this module before numpy or PIL.
"""
import os
import sys

DEBIAN_PYTHON = "/usr/bin/python3"


def require_pillow_and_numpy():
    try:
        import numpy  # noqa: F401
        import PIL  # noqa: F401
    except ImportError:
        script = sys.argv[0] not in ("", "-c")
        if script and os.path.realpath(sys.executable) != os.path.realpath(DEBIAN_PYTHON) and os.path.exists(DEBIAN_PYTHON):
            os.execv(DEBIAN_PYTHON, [DEBIAN_PYTHON, *sys.argv])
        sys.exit("needs Pillow and numpy: apt-get install python3-pil python3-numpy")


require_pillow_and_numpy()
