#!/usr/bin/env python3
"""Reads ptxas's resource report (nvcc -Xptxas -v) of every kernel in kernels/cuda/*.cu.

Each .cu is compiled to a cubin for every architecture given (the flags the build uses are passed
by CMake), and the test fails when a kernel spills registers ("spill stores" or "spill loads"
above 0) or its static shared memory exceeds the per-block limit of sm_90 (227 KiB; dynamic
shared memory is sized at launch and checked by the launchers). With --markdown, writes the
table (kernel, registers, shared memory, stack, spills) that docs/performance.md carries.
"""
import argparse
import concurrent.futures
import glob
import os
import re
import subprocess
import sys
import tempfile

SMEM_LIMIT = 227 * 1024

ENTRY = re.compile(r"Compiling entry function '(\S+)' for '(\S+)'")
FRAME = re.compile(r"(\d+) bytes stack frame, (\d+) bytes spill stores, (\d+) bytes spill loads")
USED = re.compile(r"Used (\d+) registers(?:.*?, (\d+) bytes smem)?")


def compile_report(nvcc, flags, src, arch, out_dir):
    out = os.path.join(out_dir, os.path.basename(src) + "." + arch + ".cubin")
    cmd = [nvcc, *flags, f"-arch=sm_{arch}", "-cubin", "-Xptxas", "-v", src, "-o", out]
    proc = subprocess.run(cmd, capture_output=True, text=True)
    if proc.returncode != 0:
        sys.exit(f"{' '.join(cmd)} failed:\n{proc.stderr}")
    return proc.stderr


def demangle(names):
    out = subprocess.run(["c++filt"], input="\n".join(names), capture_output=True, text=True)
    return out.stdout.splitlines() if out.returncode == 0 else names


def short_name(demangled):
    name = demangled.replace("(anonymous namespace)::", "").split("(")[0]
    return name.split("::")[-1]


def parse(report, src):
    rows, current = [], None
    for line in report.splitlines():
        if m := ENTRY.search(line):
            current = {"mangled": m.group(1), "arch": m.group(2), "file": os.path.basename(src),
                       "stack": 0, "spill_stores": 0, "spill_loads": 0, "regs": 0, "smem": 0}
            rows.append(current)
        elif current and (m := FRAME.search(line)):
            current["stack"], current["spill_stores"], current["spill_loads"] = map(int, m.groups())
        elif current and (m := USED.search(line)):
            current["regs"] = int(m.group(1))
            current["smem"] = int(m.group(2) or 0)
    return rows


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--nvcc", required=True)
    ap.add_argument("--source_dir", required=True)
    ap.add_argument("--archs", required=True, help="semicolon-separated, e.g. 90a")
    ap.add_argument("--flag", action="append", default=[], help="an nvcc flag (repeatable)")
    ap.add_argument("--markdown", help="write the resource table here")
    args = ap.parse_args()

    sources = sorted(glob.glob(os.path.join(args.source_dir, "kernels", "cuda", "*.cu")))
    flags = ["-std=c++20", "-O3", f"-I{args.source_dir}", *args.flag]
    archs = [a for a in args.archs.split(";") if a]
    with tempfile.TemporaryDirectory() as tmp, concurrent.futures.ThreadPoolExecutor(2) as pool:
        jobs = [(src, pool.submit(compile_report, args.nvcc, flags, src, arch, tmp))
                for src in sources for arch in archs]
        rows = [row for src, job in jobs for row in parse(job.result(), src)]
    if not rows:
        sys.exit("ptxas reported no kernels")
    for row, name in zip(rows, demangle([r["mangled"] for r in rows])):
        row["kernel"] = short_name(name)
    rows.sort(key=lambda r: (r["file"], r["kernel"], r["arch"]))

    failures = []
    for r in rows:
        print(f"{r['file']:<18} {r['kernel']:<22} {r['arch']:<7} regs {r['regs']:>3}  "
              f"smem {r['smem']:>6}  stack {r['stack']:>4}  "
              f"spills {r['spill_stores']}/{r['spill_loads']}")
        if r["spill_stores"] or r["spill_loads"]:
            failures.append(f"{r['kernel']} ({r['file']}, {r['arch']}) spills registers")
        if r["smem"] > SMEM_LIMIT:
            failures.append(f"{r['kernel']} ({r['file']}) uses {r['smem']} bytes of shared memory")
    if args.markdown:
        with open(args.markdown, "w") as f:
            f.write("| kernel | file | arch | registers | shared memory (bytes) | stack (bytes) "
                    "| spill stores / loads (bytes) |\n|---|---|---|---:|---:|---:|---|\n")
            for r in rows:
                f.write(f"| {r['kernel']} | {r['file']} | {r['arch']} | {r['regs']} | {r['smem']} "
                        f"| {r['stack']} | {r['spill_stores']} / {r['spill_loads']} |\n")
    if failures:
        sys.exit("\n".join(failures))
    print(f"{len(rows)} kernels: no spills, shared memory within {SMEM_LIMIT} bytes")


if __name__ == "__main__":
    main()
