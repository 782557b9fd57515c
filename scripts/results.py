#!/usr/bin/env python3
"""Regenerates the measured tables of docs/results.md.

Each section of the page that holds figures lies between the markers
<!-- results:NAME:begin --> and <!-- results:NAME:end -->; this script runs the
section's commands with the programs of a build (each writes --json), renders
the table, and writes it between the markers with the commands, the date, the
commit, the build and the machine. Prose outside the markers (why a default is
what it is) is left alone.

  scripts/results.py                       the quick sections (a few minutes)
  scripts/results.py --section backends    one section (repeatable)
  scripts/results.py --long                also the trainings (et: ~10 min,
                                           graph: ~1 h on 2 cores)
  scripts/results.py --print               print instead of writing
  scripts/results.py --build build-native  the programs of another build

Sections: compare (implicit-compare, the default run), hopfield-beta (all 1797
digits, beta 0.5..8), backends (every solver against KINSOL and PETSc),
hopfield (implicit-hopfield), et (implicit-et, seeds 1 and 2; --long), graph
(implicit-graph, 3 graphs x 2 train ratios x 5 seeds; --long). Figures depend
on the machine; run on a quiet one.
"""
import argparse
import datetime
import json
import os
import platform
import subprocess
import sys
import tempfile

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
PAGE = os.path.join(ROOT, "docs", "results.md")
COMPARE_PROBLEMS = ["hopfield-digits", "sparse-hopfield", "deq-tanh", "et-digits", "rbm"]
BUILT_IN_SOLVERS = ["picard", "anderson", "broyden", "newton", "lbfgs", "gradient_flow"]


class Runner:
    """Runs a program of the build with --json and returns (command line, parsed JSON)."""

    def __init__(self, build, workdir):
        self.build, self.workdir, self.count = build, workdir, 0

    def __call__(self, program, args, threads=1):
        self.count += 1
        path = os.path.join(self.workdir, "run%d.json" % self.count)
        binary = os.path.join(self.build, "apps", program)
        env = dict(os.environ, OMP_NUM_THREADS=str(threads))
        print("results: " + " ".join([program] + args), file=sys.stderr, flush=True)
        subprocess.run([binary] + args + ["--json", path], check=True, stdout=subprocess.DEVNULL,
                       cwd=self.workdir, env=env)
        with open(path) as f:
            data = json.load(f)
        shown = os.path.join(os.path.relpath(self.build, ROOT), "apps", program)
        return "OMP_NUM_THREADS=%d %s %s" % (threads, shown, " ".join(args)), data


def number(x):
    """x as %g, without the exponent's leading zero (1e-8, not 1e-08)."""
    return ("%g" % x).replace("e-0", "e-").replace("e+0", "e+")


def commands_block(commands):
    return ["", "Commands:", ""] + ["    " + c for c in commands]


# ---- sections: each returns (lines of the table and its notes, commands) ----

def section_compare(run):
    command, data = run("implicit-compare", ["--quiet"])
    rows = {(r["problem"], r["solver"]): r for r in data["results"]}
    lines = ["Converged samples / samples, and mean evaluations of f per sample (trial points included; the",
             "active set stops evaluating a sample once it has converged); newton adds its rounds of",
             "Jacobian-vector products. **Bold**: the fewest evaluations among the solvers that converged on",
             "every sample. — : the solver does not apply to the map. Tolerance %s, at most %d iterations." % (
                 number(data["settings"]["tol"]), data["settings"]["max_iter"]),
             "",
             "| problem | " + " | ".join(BUILT_IN_SOLVERS) + " |",
             "|---|" + "---|" * len(BUILT_IN_SOLVERS)]
    for problem in COMPARE_PROBLEMS:
        ran = [rows.get((problem, s)) for s in BUILT_IN_SOLVERS]
        complete = [r["evaluations_per_sample"] for r in ran
                    if r and not r["skipped"] and r["converged_samples"] == r["samples"]]
        best = min(complete) if complete else None
        cells = []
        for r in ran:
            if r is None or r["skipped"] or r["status"] == "invalid_input":
                cells.append("—")
                continue
            evals = "%.1f" % r["evaluations_per_sample"]
            if best is not None and r["converged_samples"] == r["samples"] and \
                    r["evaluations_per_sample"] == best:
                evals = "**" + evals + "**"
            cell = "%d/%d, %s" % (r["converged_samples"], r["samples"], evals)
            if r["jacobian_products"]:
                cell += " (+%d JVP)" % r["jacobian_products"]
            if r["converged_samples"] < r["samples"]:
                cell += " (%s)" % r["status"]
            cells.append(cell)
        lines.append("| %s | %s |" % (problem, " | ".join(cells)))
    return lines, [command]


def section_hopfield_beta(run):
    solvers = ["picard", "anderson", "broyden", "lbfgs", "newton"]
    lines = ["All 1797 digits stored and queried. Mean evaluations of f per sample (newton: + rounds of",
             "Jacobian-vector products); a cell says how many samples converged when not all did.",
             "",
             "| β | " + " | ".join(solvers) + " |",
             "|---|" + "---|" * len(solvers)]
    commands = []
    for beta in ["0.5", "1", "2", "4", "8"]:
        command, data = run("implicit-compare", ["--quiet", "--problem", "hopfield-digits", "--patterns", "1797",
                                                 "--max-iter", "1000", "--solvers", ",".join(solvers),
                                                 "--beta", beta])
        commands.append(command)
        rows = {r["solver"]: r for r in data["results"]}
        cells = []
        for s in solvers:
            r = rows[s]
            cell = "%.1f" % r["evaluations_per_sample"]
            if r["jacobian_products"]:
                cell += " (+%d)" % r["jacobian_products"]
            if r["converged_samples"] < r["samples"]:
                cell += ", %d/%d converged" % (r["converged_samples"], r["samples"])
            cells.append(cell)
        lines.append("| %s | %s |" % (beta, " | ".join(cells)))
    return lines, commands


def section_backends(run):
    problems = [("hopfield-digits", ["--patterns", "1797", "--beta", "2"]), ("sparse-hopfield", []),
                ("rbm", []), ("deq-tanh", []), ("et-digits", [])]
    results, commands, settings = {}, [], set()
    for problem, flags in problems:
        command, data = run("implicit-compare", ["--quiet", "--problem", problem, "--solvers", "all"] + flags)
        commands.append(command)
        results[problem] = {r["solver"]: r for r in data["results"]}
        settings.add((data["settings"]["tol"], data["settings"]["max_iter"]))
    (tol, max_iter), = settings  # the same in every run
    solvers, library = [], {}
    for rows in results.values():
        for name, r in rows.items():
            if name not in library:
                solvers.append(name)
                library[name] = r.get("library", "")

    def cell(r):
        if r is None:
            return ""
        if r["skipped"] or r["status"] == "invalid_input":
            return "—"
        text = "%d/%d, %.1f, %.3f s" % (r["converged_samples"], r["samples"], r["evaluations_per_sample"],
                                         r["seconds"])
        return "**" + text + "**" if r["converged_samples"] == r["samples"] else text

    lines = ["Converged samples, mean evaluations of f per sample (the start and the backends' final check",
             "included), wall time; **bold**: every sample converged; — : the solver does not apply to the map",
             "(it needs an energy, or Jacobian-vector products). Tolerance %s on |f(z) − z| per sample, at" % number(tol),
             "most %d iterations per solve." % max_iter,
             "",
             "| solver | library | " + " | ".join(p for p, _ in problems) + " |",
             "|---|---|" + "---|" * len(problems)]
    for name in solvers:
        cells = [cell(results[p].get(name)) for p, _ in problems]
        lines.append("| `%s` | %s | %s |" % (name, library[name], " | ".join(cells)))
    return lines, commands


def section_hopfield(run):
    lines = ["| experiment | result |", "|---|---|"]
    commands = []
    for patterns, beta in [("100", "4"), ("1797", "2")]:
        command, d = run("implicit-hopfield", ["retrieval", "--patterns", patterns, "--beta", beta, "--quiet"])
        commands.append(command)
        lines.append("| `retrieval --patterns %s --beta %s` | hit rate one step %.4g, converged %.4g "
                     "(%d/%d converged, %s, %d iterations, mean %.1f per sample, %.2f s) |" % (
                         patterns, beta, d["one_step_hit_rate"], d["converged_hit_rate"], d["converged_samples"],
                         d["samples"], d["solver"], d["iterations"], d["mean_iterations"], d["seconds"]))
    command, d = run("implicit-hopfield", ["completion", "--beta", "1"])
    commands.append(command)
    lines.append("| `completion --beta 1` | MSE on pixels 32..63: %.4f, mean-fill baseline %.4f (ratio %.2f) |" % (
        d["mse"], d["mean_fill_mse"], d["mse"] / d["mean_fill_mse"]))
    return lines, commands


def section_et(run):
    lines = ["Held-out MSE on the masked pixels (297 digits, the same masks for every method). The",
             "paired difference is the per-digit MSE of the one-step Hopfield baseline minus the ET's,",
             "mean ± standard error over the held-out digits.",
             "",
             "| seed | ET (implicit) | one-step Hopfield (β picked on held-out) | mean fill | "
             "Hopfield − ET (paired) | digits where ET is better | training |",
             "|---|---|---|---|---|---|---|"]
    commands = []
    for seed in ["1", "2"]:
        command, d = run("implicit-et", ["--seed", seed, "--quiet", "--checkpoint", "results-et.ckpt",
                                         "--image", "results-et.png"], threads=1)
        commands.append(command)
        lines.append("| %s | **%.4f** | %.4f (β %g) | %.4f | %.4f ± %.4f | %d of %d | %d steps, %.0f s |" % (
            seed, d["heldout_mse"], d["hopfield_mse"], d["hopfield_beta"], d["mean_fill_mse"],
            d["hopfield_difference"], d["hopfield_difference_stderr"], d["digits_better_than_hopfield"],
            d["heldout_digits"], d["steps"], d["train_seconds"]))
    return lines, commands


def section_graph(run):
    detectors = ["et", "lr-raw", "lr-neighbour-mean", "gcn"]
    lines = ["Test AUROC, mean ± standard error over 5 seeds (the same splits for every detector); the last",
             "column: the ET minus the best other detector by mean, paired over the seeds.",
             "",
             "| graph | train ratio | " + " | ".join(detectors) + " | et − best other (paired) |",
             "|---|---|" + "---|" * (len(detectors) + 1)]
    commands = []
    for graph in ["gen_1000", "inj_cora", "reddit"]:
        for ratio in ["0.4", "0.01"]:
            command, d = run("implicit-graph", ["--graph", graph, "--train-ratio", ratio, "--seeds", "5",
                                                "--threads", "2", "--quiet"])
            commands.append(command)
            by_name = {x["name"]: x for x in d["detectors"]}
            best = max(by_name.values(), key=lambda x: x["auroc_mean"])["name"]
            cells = []
            for name in detectors:
                x = by_name[name]
                text = "%.3f ± %.3f" % (x["auroc_mean"], x["auroc_se"])
                cells.append("**" + text + "**" if name == best else text)
            others = [x for x in d["detectors"] if x["name"] != "et"]
            rival = max(others, key=lambda x: x["auroc_mean"])["name"]
            diff = paired_difference(by_name["et"], by_name[rival])
            lines.append("| %s | %s | %s | %+.3f ± %.3f (%s) |" % (graph, ratio, " | ".join(cells), diff[0], diff[1],
                                                                   rival))
    return lines, commands


def paired_difference(a, b):
    """Mean and standard error over seeds of a's AUROC minus b's (the same splits)."""
    by_seed = {s["seed"]: s["auroc"] for s in b["per_seed"]}
    diffs = [s["auroc"] - by_seed[s["seed"]] for s in a["per_seed"] if s["seed"] in by_seed]
    n = len(diffs)
    mean = sum(diffs) / n
    var = sum((x - mean) ** 2 for x in diffs) / (n - 1) if n > 1 else 0.0
    return mean, (var / n) ** 0.5


SECTIONS = {"compare": section_compare, "hopfield-beta": section_hopfield_beta, "backends": section_backends,
            "hopfield": section_hopfield, "et": section_et, "graph": section_graph}
QUICK = ["compare", "hopfield-beta", "backends", "hopfield"]
LONG = ["et", "graph"]


# ---- the page ----------------------------------------------------------------

def cpu_name():
    try:
        with open("/proc/cpuinfo") as f:
            for line in f:
                if line.startswith("model name"):
                    return line.split(":", 1)[1].strip()
    except OSError:
        pass
    return platform.processor() or "unknown CPU"


def build_line(build):
    cache = {}
    try:
        with open(os.path.join(build, "CMakeCache.txt")) as f:
            for line in f:
                if ":" in line and "=" in line and not line.startswith(("//", "#")):
                    key, value = line.split("=", 1)
                    cache[key.split(":")[0]] = value.strip()
    except OSError:
        pass
    native = cache.get("IMPLICIT_NATIVE", "OFF")
    return "`%s` (%s, IMPLICIT_NATIVE=%s)" % (os.path.relpath(build, ROOT), cache.get("CMAKE_BUILD_TYPE", "?"), native)


def commit():
    try:
        sha = subprocess.run(["git", "-C", ROOT, "rev-parse", "--short", "HEAD"], check=True,
                             capture_output=True, text=True).stdout.strip()
        dirty = subprocess.run(["git", "-C", ROOT, "status", "--porcelain", "--untracked-files=no"], check=True,
                               capture_output=True, text=True).stdout.strip()
        return sha + (" with local changes" if dirty else "")
    except (OSError, subprocess.CalledProcessError):
        return "unknown"


def markers(name):
    return "<!-- results:%s:begin -->" % name, "<!-- results:%s:end -->" % name


def render(name, lines, commands, build):
    begin, end = markers(name)
    stamp = ("Regenerated by `scripts/results.py --section %s` on %s, commit %s, build %s; machine: %s, "
             "%d cores." % (name, datetime.date.today().isoformat(), commit(), build_line(build), cpu_name(),
                            os.cpu_count()))
    return "\n".join([begin, stamp, ""] + lines + commands_block(commands) + [end])


def main():
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--build", default=os.path.join(ROOT, "build"), help="build directory (default: build)")
    parser.add_argument("--section", action="append", choices=sorted(SECTIONS), help="a section to regenerate")
    parser.add_argument("--long", action="store_true", help="also the trainings: et and graph")
    parser.add_argument("--print", action="store_true", help="print the sections instead of writing them")
    args = parser.parse_args()
    names = args.section or (QUICK + LONG if args.long else QUICK)
    build = os.path.abspath(args.build)
    for program in ["implicit-compare", "implicit-hopfield", "implicit-et", "implicit-graph"]:
        if not os.access(os.path.join(build, "apps", program), os.X_OK):
            sys.exit("results: %s/apps/%s not found; build the programs first (cmake --build %s)" % (
                build, program, args.build))
    with open(PAGE) as f:
        page = f.read()
    for name in names:
        begin, end = markers(name)
        if not args.print and (begin not in page or end not in page):
            sys.exit("results: %s has no %s ... %s markers" % (PAGE, begin, end))
    with tempfile.TemporaryDirectory() as workdir:
        run = Runner(build, workdir)
        for name in names:
            lines, commands = SECTIONS[name](run)
            section = render(name, lines, commands, build)
            if args.print:
                print(section + "\n")
                continue
            begin, end = markers(name)
            page = page[:page.index(begin)] + section + page[page.index(end) + len(end):]
            with open(PAGE, "w") as f:  # after each section: a long run keeps what it finished
                f.write(page)
            print("results: wrote section %s of %s" % (name, os.path.relpath(PAGE, ROOT)), file=sys.stderr)
    return 0


if __name__ == "__main__":
    sys.exit(main())
