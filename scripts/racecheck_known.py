#!/usr/bin/env python3
"""Classifies compute-sanitizer racecheck reports against lowbit's known stage-copy class.

usage: racecheck_known.py RACECHECK_LOG BINARY [CUOBJDUMP]

A report pairs two accesses ("Race reported between <A> access at <site>" and "and <B> access
at <site>"). It is in the known class (docs/perf.md, "Racecheck") when its write is an async-proxy
copy into shared memory -- a bulk copy, a TMA load or a cp.async, which complete on the stage's
mbarrier before the reads the report pairs it with -- found either by the inlined helper's name
(cp_async_bulk, cp_async_4) or, where the sanitizer names only the kernel, by the SASS
instruction at the reported offset (UBLKCP, UTMALDG, LDGSTS) in BINARY. cuBLASLt's nvjet kernels
(the tests' baseline) are counted apart. Prints: "<reports outside nvjet> <outside the known class>"
and then the unknown reports, one per line.
"""
import re
import subprocess
import sys

ASYNC_COPY = re.compile(r"\b(UBLKCP|UTMALDG|LDGSTS)\b")
NAMED_COPY = re.compile(r"cp_async_bulk|cp_async_4")


def norm(name):
    name = name.replace("(bool)0", "false").replace("(bool)1", "true").replace("(int)", "")
    name = re.sub(r"^void ", "", name.strip())
    return re.sub(r"\s+", "", name)


def kernel_sass(binary, cuobjdump):
    out = subprocess.run([cuobjdump, "-sass", binary], capture_output=True, text=True).stdout
    kernels, cur, names = {}, None, []
    for line in out.splitlines():
        m = re.match(r"\s+Function : (\S+)", line)
        if m:
            cur = m.group(1)
            names.append(cur)
            kernels[cur] = {}
            continue
        m = re.match(r"\s+/\*([0-9a-f]{4,})\*/\s+(.*?);", line)
        if m and cur:
            kernels[cur][int(m.group(1), 16)] = m.group(2)
    demangled = subprocess.run(["c++filt"], input="\n".join(names), capture_output=True, text=True).stdout.splitlines()
    return {norm(d): kernels[n] for n, d in zip(names, demangled)}


def main():
    log, binary = sys.argv[1], sys.argv[2]
    cuobjdump = sys.argv[3] if len(sys.argv) > 3 else "cuobjdump"
    lines = open(log, errors="replace").read().splitlines()
    reports = []
    for i, line in enumerate(lines):
        m = re.search(r"Race reported between (Read|Write) access at (.*)", line)
        if m and i + 1 < len(lines):
            n = re.search(r"and (Read|Write) access at (.*)", lines[i + 1])
            if n:
                reports.append(((m.group(1), m.group(2)), (n.group(1), n.group(2))))
    sass = None
    outside = unknown = 0
    bad = []
    for a, b in reports:
        if "nvjet" in a[1] or "nvjet" in b[1]:
            continue
        outside += 1
        write = a if a[0] == "Write" else b if b[0] == "Write" else None
        known = False
        if write is not None:
            site = re.sub(r" in \S+:\d+.*$", "", write[1])
            site = re.sub(r" \[\d+ hazards\]$", "", site)
            if NAMED_COPY.search(site):
                known = True
            else:
                m = re.match(r"(.*)\+0x([0-9a-f]+)$", site)
                if m:
                    if sass is None:
                        sass = kernel_sass(binary, cuobjdump)
                    instr = sass.get(norm(m.group(1)), {}).get(int(m.group(2), 16), "")
                    known = bool(ASYNC_COPY.search(instr))
        if not known:
            unknown += 1
            bad.append(a[0] + " " + a[1] + " || " + b[0] + " " + b[1])
    print(outside, unknown)
    for r in bad[:5]:
        print(r[:400])


if __name__ == "__main__":
    main()
