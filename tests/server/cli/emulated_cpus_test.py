#!/usr/bin/env python3
"""The CPU backend on processors the test host is not, under qemu-x86_64's user-mode emulation.

The kernels are built per instruction set and chosen at run time from cpuid; on an AVX-512 host
the AVX2 and scalar builds run only when forced (MLASERVE_CPU_ISA), which cannot show an
AVX-512 instruction that reached code every build shares, nor a dispatch that misreads a
processor it has never seen. Here `mlaserve generate` runs as an AVX2-only Intel processor
(Haswell), an AVX2-only AMD processor (EPYC-Rome, Zen 2) and a processor without AVX (Nehalem,
the x86-64 baseline plus SSE4.2). For each:

- the `cpu_backend` start-up line names the build that processor can run (`avx2`, `scalar`),
  and says no decode row takes AMX tiles there (`decode_tiles=off`) even when
  MLASERVE_CPU_DECODE_TILES asks for all;
- the PyTorch reference's goldens hold: generate_golden_test.py runs against a wrapper that
  starts the binary under the emulated processor (qemu stops the process with SIGILL at the first
  instruction the processor lacks);
- the processor's own kernel build passes cpu_vs_ref_gemm_test (every GEMM path and shape of
  that test against the oracle).

MLASERVE_CPU_PREFETCH=t1:1 skips the start-up prefetch probe (about a minute under emulation);
the probe's kernel is the decode GEMM the goldens run anyway.

Usage: emulated_cpus_test.py --mlaserve=BIN --gemm_test=BIN --models=DIR
"""
import argparse
import os
import re
import shutil
import stat
import subprocess
import sys
import tempfile
import unittest

ARGS = None
HERE = os.path.dirname(os.path.abspath(__file__))

# qemu CPU model -> the kernel build the dispatch must choose for it.
PROCESSORS = {
    "Haswell-v4": "avx2",
    "EPYC-Rome-v1": "avx2",
    "Nehalem-v1": "scalar",
}


def emulated_env():
    env = dict(os.environ)
    env["MLASERVE_CPU_PREFETCH"] = "t1:1"
    env.pop("MLASERVE_CPU_ISA", None)
    return env


@unittest.skipIf(shutil.which("qemu-x86_64") is None,
                 "qemu-x86_64 (Debian package qemu-user) is not installed")
class EmulatedCpusTest(unittest.TestCase):
    def setUp(self):
        self.tmp = tempfile.mkdtemp(prefix="emulated_cpus.")

    def tearDown(self):
        shutil.rmtree(self.tmp, ignore_errors=True)

    def wrapper(self, cpu, binary):
        """A script that runs `binary` with its arguments on the emulated `cpu`."""
        path = os.path.join(self.tmp, f"{os.path.basename(binary)}-{cpu}")
        with open(path, "w") as f:
            f.write(f'#!/bin/sh\nexec qemu-x86_64 -cpu {cpu} {binary} "$@"\n')
        os.chmod(path, os.stat(path).st_mode | stat.S_IXUSR)
        return path

    def test_dispatch_picks_the_processors_build(self):
        model = os.path.join(ARGS.models, sorted(os.listdir(ARGS.models))[0])
        for cpu, isa in PROCESSORS.items():
            with self.subTest(cpu=cpu):
                proc = subprocess.run(
                    [self.wrapper(cpu, ARGS.mlaserve), "generate", f"--model={model}",
                     "--backend=cpu", "--prompt_ids=1,2,3", "--max_tokens=2", "--output=json"],
                    capture_output=True, text=True, timeout=300,
                    env=dict(emulated_env(), MLASERVE_CPU_DECODE_TILES="all"))
                self.assertEqual(proc.returncode, 0, proc.stderr[-2000:])
                chosen = re.search(r"cpu_backend .*\bisa=(\S+)", proc.stderr)
                self.assertIsNotNone(chosen, proc.stderr[-2000:])
                self.assertEqual(chosen.group(1), isa)
                tiles = re.search(r"cpu_backend .*\bdecode_tiles=(\S+)", proc.stderr)
                self.assertIsNotNone(tiles, proc.stderr[-2000:])
                self.assertEqual(tiles.group(1), "off")

    def test_goldens_hold_on_every_emulated_processor(self):
        for cpu in PROCESSORS:
            with self.subTest(cpu=cpu):
                proc = subprocess.run(
                    [sys.executable, os.path.join(HERE, "generate_golden_test.py"),
                     f"--mlaserve={self.wrapper(cpu, ARGS.mlaserve)}", f"--models={ARGS.models}",
                     "--backends=cpu"],
                    capture_output=True, text=True, timeout=600, env=emulated_env())
                self.assertEqual(proc.returncode, 0, proc.stdout[-2000:] + proc.stderr[-4000:])

    def test_gemm_parity_of_each_processors_build(self):
        # One emulated processor per kernel build (the first that names it).
        first = {}
        for cpu, isa in PROCESSORS.items():
            first.setdefault(isa, cpu)
        for isa, cpu in first.items():
            with self.subTest(cpu=cpu):
                proc = subprocess.run(
                    [self.wrapper(cpu, ARGS.gemm_test), f"--gtest_filter=*/{isa}"],
                    capture_output=True, text=True, timeout=900, env=emulated_env())
                self.assertEqual(proc.returncode, 0, proc.stdout[-4000:] + proc.stderr[-2000:])
                # The filter matched tests and none of them skipped (the build runs there).
                self.assertRegex(proc.stdout, r"\[  PASSED  \] [1-9]\d* tests?\.")
                self.assertNotIn("[  SKIPPED ]", proc.stdout)


def main():
    global ARGS
    parser = argparse.ArgumentParser()
    parser.add_argument("--mlaserve", required=True)
    parser.add_argument("--gemm_test", required=True)
    parser.add_argument("--models", required=True)
    ARGS, rest = parser.parse_known_args()
    unittest.main(argv=[sys.argv[0]] + rest, verbosity=2)


if __name__ == "__main__":
    main()
