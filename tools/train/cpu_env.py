"""Process environment that makes Debian's CPU torch fast enough to train on
a small shared machine. Import and call setup() before importing torch; it
re-executes the script once with:

  * OpenBLAS (Debian: libopenblas0-pthread) ahead of the reference BLAS that
    python3-torch is linked against through the libblas.so.3 alternative,
    for this process only (LD_LIBRARY_PATH); about 10x faster matrix products.
  * jemalloc (Debian: libjemalloc2) as malloc, keeping freed pages (no decay):
    glibc returns large blocks to the kernel and every step then pays the
    page faults again, which costs more than the arithmetic here.
  * OMP_WAIT_POLICY=PASSIVE: OpenMP threads sleep instead of spinning, which
    matters when the cores are shared.

Missing libraries are skipped (the run is then slower, and its floating-point
results differ from a run with OpenBLAS).
"""
import os
import sys

OPENBLAS_DIR = "/usr/lib/x86_64-linux-gnu/openblas-pthread"
JEMALLOC = "/usr/lib/x86_64-linux-gnu/libjemalloc.so.2"
_MARK = "MLASERVE_TRAIN_ENV"


def wanted(threads):
    env = {"OMP_WAIT_POLICY": "PASSIVE", "OMP_NUM_THREADS": str(threads),
           "OPENBLAS_NUM_THREADS": str(threads)}
    if os.path.exists(os.path.join(OPENBLAS_DIR, "libblas.so.3")):
        paths = [p for p in os.environ.get("LD_LIBRARY_PATH", "").split(":") if p]
        if OPENBLAS_DIR not in paths:
            paths.insert(0, OPENBLAS_DIR)
        env["LD_LIBRARY_PATH"] = ":".join(paths)
    if os.path.exists(JEMALLOC):
        pre = [p for p in os.environ.get("LD_PRELOAD", "").split(":") if p]
        if JEMALLOC not in pre:
            pre.insert(0, JEMALLOC)
        env["LD_PRELOAD"] = ":".join(pre)
        env["MALLOC_CONF"] = "dirty_decay_ms:-1,muzzy_decay_ms:-1"
    return env


def setup(threads=2):
    """Re-executes the running script with the environment above (once)."""
    if os.environ.get(_MARK):
        return
    env = dict(os.environ)
    env.update(wanted(threads))
    env[_MARK] = "1"
    sys.stdout.flush()
    sys.stderr.flush()
    os.execve(sys.executable, [sys.executable] + sys.argv, env)


def describe():
    return (f"LD_LIBRARY_PATH={os.environ.get('LD_LIBRARY_PATH', '')} "
            f"LD_PRELOAD={os.environ.get('LD_PRELOAD', '')} "
            f"OMP_WAIT_POLICY={os.environ.get('OMP_WAIT_POLICY', '')}")
