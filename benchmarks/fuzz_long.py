"""The long fuzz profile: the property-based tests with many examples, and their counts.

Runs tests/test_fuzz_conv.py, tests/test_fuzz_layers.py and tests/test_fuzz_gluon_conv.py
(the Gluon convolutions' host side, kernels emulated; and the random hostile calls of
tests/test_hostile_inputs.py) under ``TRIDNN_FUZZ=long`` with
``TRIDNN_FUZZ_EXAMPLES`` examples per property, collects the per-module counts the
tests write to ``TRIDNN_FUZZ_STATS``, and prints problems and algorithm runs per op
plus pytest's verdict. Usage (niced: the machine is shared):

    nice -n 19 .venv/bin/python benchmarks/fuzz_long.py --examples 4000 --json out/fuzz_long.json
"""
from __future__ import annotations

import argparse
import collections
import json
import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
TARGETS = ["tests/test_fuzz_conv.py", "tests/test_fuzz_layers.py", "tests/test_fuzz_gluon_conv.py",
           "tests/test_hostile_inputs.py::test_random_hostile_values_raise_documented_errors"]


def main(argv=None):
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--examples", type=int, default=4000, help="examples per property")
    parser.add_argument("--json", type=Path)
    parser.add_argument("targets", nargs="*", default=TARGETS)
    args = parser.parse_args(argv)
    stats_file = Path(tempfile.mkstemp(prefix="tridnn-fuzz-", suffix=".jsonl")[1])
    env = dict(os.environ, TRIDNN_FUZZ="long", TRIDNN_FUZZ_EXAMPLES=str(args.examples),
               TRIDNN_FUZZ_STATS=str(stats_file))
    start = time.time()
    result = subprocess.run([sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider", *args.targets],
                            cwd=ROOT, env=env, capture_output=True, text=True)
    seconds = time.time() - start
    counts = collections.Counter()
    for line in stats_file.read_text().splitlines():
        counts.update(json.loads(line)["counts"])
    stats_file.unlink()
    summary = pytest_summary(result.stdout)
    problems = {k.split("/", 1)[1]: v for k, v in counts.items() if k.startswith("problems/")}
    runs = {k.split("/", 1)[1]: v for k, v in counts.items() if k.startswith("runs/") and k.count("/") == 1}
    report = dict(date=time.strftime("%Y-%m-%d %H:%M:%S %Z"), examples_per_property=args.examples,
                  seconds=round(seconds), pytest=summary, exit_status=result.returncode,
                  problems=problems, problems_total=sum(problems.values()), runs=runs,
                  runs_total=sum(runs.values()), counts=dict(sorted(counts.items())))
    print(json.dumps({k: v for k, v in report.items() if k != "counts"}, indent=1))
    if result.returncode:
        print(result.stdout[-6000:])
    if args.json:
        args.json.parent.mkdir(parents=True, exist_ok=True)
        args.json.write_text(json.dumps(report, indent=1))
    return result.returncode


def pytest_summary(stdout: str) -> str:
    lines = [line for line in stdout.splitlines() if " passed" in line or " failed" in line]
    return lines[-1].strip("= ") if lines else stdout[-300:]


if __name__ == "__main__":
    sys.exit(main())
