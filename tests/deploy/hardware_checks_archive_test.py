#!/usr/bin/env python3
"""Checks the archive that carries the GPU checks to a machine without the build's libraries.

scripts/stage-hardware-checks.sh packs the daemon, the bench client, the CUDA plugin and every
`_gpu` test with the shared libraries they link, less those the GPU machine brings (the C and
C++ runtimes, the driver, cuBLAS). The test stages an archive from this build and
  - lists it: the binaries, every `_gpu` test of the build, and no library that must come from
    the target;
  - unpacks it and resolves every binary's libraries with the archive's lib/ first: each one
    the staging did not leave out comes from lib/, so nothing of this build machine is needed;
  - runs the unpacked daemon (`--help`) and one `_gpu` test from there (it skips its tests
    without a device and passes with one).

Usage: hardware_checks_archive_test.py --source_dir=DIR --build_dir=DIR
"""
import argparse
import glob
import os
import re
import subprocess
import sys
import tarfile
import tempfile
import unittest

ARGS = None
# Libraries the target machine brings (scripts/stage-hardware-checks.sh leaves them out).
TARGET_LIBS = re.compile(
    r"^(linux-vdso|ld-linux|libc|libm|libpthread|libdl|librt|libresolv|libutil|libcuda|"
    r"libnvidia-|libcublas|libcublasLt|libstdc\+\+|libgcc_s)[.-]")


class HardwareChecksArchiveTest(unittest.TestCase):
    @classmethod
    def setUpClass(cls):
        cls.tmp = tempfile.TemporaryDirectory()
        cls.archive = os.path.join(cls.tmp.name, "checks.tar.xz")
        subprocess.run([os.path.join(ARGS.source_dir, "scripts/stage-hardware-checks.sh"),
                        ARGS.build_dir, cls.archive], check=True, stdout=subprocess.DEVNULL)
        cls.root = os.path.join(cls.tmp.name, "unpacked")
        with tarfile.open(cls.archive) as tar:
            cls.names = {os.path.normpath(n) for n in tar.getnames()}
            tar.extractall(cls.root)
        cls.env = dict(os.environ, LD_LIBRARY_PATH=os.path.join(cls.root, "lib"))

    @classmethod
    def tearDownClass(cls):
        cls.tmp.cleanup()

    def test_holds_the_binaries_and_every_gpu_test(self):
        for name in ("mlaserve", "mlaserve-bench", "mlaserve-kernel-ab", "mlaserve-graph-bench",
                     "mlaserve_cuda_plugin.so"):
            self.assertIn(f"bin/{name}", self.names)
        built = {os.path.basename(p) for p in glob.glob(os.path.join(ARGS.build_dir, "bin/*_gpu"))}
        self.assertTrue(built, "the build has no _gpu tests")
        self.assertEqual({n[len("bin/"):] for n in self.names if n.endswith("_gpu")}, built)
        libs = [os.path.basename(n) for n in self.names if n.startswith("lib/")]
        self.assertTrue(any(n.startswith("libgrpc++") for n in libs), libs)
        self.assertEqual([n for n in libs if TARGET_LIBS.match(n)], [])

    def test_every_library_not_left_out_comes_from_the_archive(self):
        lib_dir = os.path.join(self.root, "lib")
        for binary in glob.glob(os.path.join(self.root, "bin/*")):
            ldd = subprocess.run(["ldd", binary], env=self.env, capture_output=True, text=True,
                                 check=True).stdout
            for line in ldd.splitlines():
                fields = line.split()
                if len(fields) < 3 or fields[1] != "=>" or TARGET_LIBS.match(fields[0]):
                    continue
                self.assertEqual(os.path.dirname(fields[2]), lib_dir,
                                 f"{os.path.basename(binary)}: {line.strip()}")

    def test_the_unpacked_binaries_run(self):
        daemon = subprocess.run([os.path.join(self.root, "bin/mlaserve"), "--help"],
                                env=self.env, capture_output=True, text=True)
        self.assertIn("serve", daemon.stdout + daemon.stderr)
        test = subprocess.run(
            [os.path.join(self.root, "bin/cuda_top_logprobs_test_gpu")], capture_output=True,
            text=True, env=dict(self.env, MLASERVE_TEST_DATA=os.path.join(ARGS.source_dir,
                                                                         "tests/data")))
        self.assertEqual(test.returncode, 0, test.stdout[-2000:] + test.stderr[-2000:])
        self.assertRegex(test.stdout, r"\[==========\] \d+ tests? from .* ran")


if __name__ == "__main__":
    parser = argparse.ArgumentParser()
    parser.add_argument("--source_dir", required=True)
    parser.add_argument("--build_dir", required=True)
    ARGS, rest = parser.parse_known_args()
    unittest.main(argv=[sys.argv[0]] + rest)
