#!/usr/bin/env python3
"""Regenerates the section "Against KINSOL and PETSc" of docs/results.md.

Runs implicit-compare with every registered solver (libimplicit's and the
KINSOL / PETSc backends the build has) on hopfield-digits at full size (1797
stored digits and queries, beta 2) and on the other built-in problems at 100
samples, one run each, on this machine; writes the table between the markers
<!-- backends:begin --> and <!-- backends:end --> of docs/results.md (or prints
it with --print).

  scripts/compare-backends.py [--build build] [--print]
"""
import argparse
import json
import os
import platform
import subprocess
import sys
import tempfile

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
BEGIN, END = "<!-- backends:begin -->", "<!-- backends:end -->"
RUNS = [  # (problem, extra flags)
    ("hopfield-digits", ["--patterns", "1797", "--beta", "2"]),
    ("sparse-hopfield", []),
    ("rbm", []),
    ("deq-tanh", []),
    ("et-digits", []),
]


def run(compare, problem, flags, workdir):
    path = os.path.join(workdir, problem + ".json")
    command = [compare, "--quiet", "--problem", problem, "--solvers", "all", "--json", path] + flags
    subprocess.run(command, check=True, stdout=subprocess.DEVNULL)
    with open(path) as f:
        return command, json.load(f)["results"]


def cell(row):
    if row["status"] in ("skipped", "invalid_input"):
        return "—"
    text = "%d/%d, %.1f, %.3f s" % (row["converged_samples"], row["samples"], row["evaluations_per_sample"],
                                     row["seconds"])
    return "**" + text + "**" if row["converged_samples"] == row["samples"] else text


def cpu_name():
    try:
        with open("/proc/cpuinfo") as f:
            for line in f:
                if line.startswith("model name"):
                    return line.split(":", 1)[1].strip()
    except OSError:
        pass
    return platform.processor() or "unknown CPU"


def main():
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--build", default=os.path.join(ROOT, "build"), help="build directory (default: build)")
    parser.add_argument("--print", action="store_true", help="print the section instead of writing it")
    args = parser.parse_args()
    compare = os.path.join(args.build, "apps", "implicit-compare")
    results, commands = {}, []
    with tempfile.TemporaryDirectory() as workdir:
        for problem, flags in RUNS:
            command, rows = run(compare, problem, flags, workdir)
            commands.append(" ".join(os.path.relpath(c, ROOT) if c == compare else c for c in command
                                     if not c.endswith(".json") and c != "--json"))
            results[problem] = rows
    solvers, library = [], {}
    for rows in results.values():
        for row in rows:
            if row["solver"] not in library:
                solvers.append(row["solver"])
                library[row["solver"]] = row.get("library", "")
    header = "| solver | library | " + " | ".join(p for p, _ in RUNS) + " |"
    lines = [BEGIN,
             "Converged samples, mean evaluations of f per sample (the start and the backends' final check",
             "included), wall time; **bold**: every sample converged; — : the solver does not apply to the map",
             "(it needs an energy, or Jacobian-vector products). Tolerance 1e-8 on |f(z) − z| per sample, at most 200 iterations per solve. Machine: " +
             cpu_name() + ", %d cores; regenerate with `scripts/compare-backends.py`." % os.cpu_count(),
             "",
             header, "|" + "---|" * (len(RUNS) + 2)]
    for solver in solvers:
        cells = []
        for problem, _ in RUNS:
            row = next((r for r in results[problem] if r["solver"] == solver), None)
            cells.append(cell(row) if row else "")
        lines.append("| `%s` | %s | %s |" % (solver, library[solver], " | ".join(cells)))
    lines += ["", "Commands:", ""] + ["    " + c for c in commands] + [END]
    section = "\n".join(lines)
    if args.print:
        print(section)
        return 0
    path = os.path.join(ROOT, "docs", "results.md")
    with open(path) as f:
        text = f.read()
    if BEGIN not in text or END not in text:
        sys.exit("compare-backends: %s has no %s ... %s markers" % (path, BEGIN, END))
    text = text[:text.index(BEGIN)] + section + text[text.index(END) + len(END):]
    with open(path, "w") as f:
        f.write(text)
    print("compare-backends: wrote %s" % path)
    return 0


if __name__ == "__main__":
    sys.exit(main())
