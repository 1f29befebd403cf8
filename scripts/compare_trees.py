"""Time chosen suite rows through fuser in two trees, alternating, in one device call: this tree
against a git ref exported beside it. A kernel change is measured so, both trees on the same
machine at the same moment (a lease's hosts and GPUs differ by more than most changes gain).

    python3 scripts/compare_trees.py export REF DIR
        here: REF's fuser/ and benchmarks/ into DIR (a folder the device call carries)
    FUSER_SYSTEM_PYTHON=1 python3 scripts/compare_trees.py run DIR CASES [--rounds 2]
            [--contenders fuser,fuser-fd] [-- HARNESS ARGS]
        on the device: rounds of (DIR's tree, this tree), each a `benchmarks/harness.py` run in
        its own process on CASES (`kernel[MxN]`, comma-separated); prints each cell's share of
        copy in every round and the change of its median

Each run validates every cell against eager before timing it, as the bench does.
"""
from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent


def export(ref: str, into: Path) -> None:
    into.mkdir(parents=True, exist_ok=True)
    archive = subprocess.run(["git", "archive", ref, "fuser", "benchmarks"], cwd=ROOT, check=True,
                             capture_output=True).stdout
    subprocess.run(["tar", "-x", "-C", str(into)], input=archive, check=True)


def harness_shares(tree: Path, cases: str, contenders: str, extra: list[str]) -> dict:
    """{(case, contender): share of copy} of one harness run of `tree`'s fuser, in a new process."""
    with tempfile.TemporaryDirectory() as out:
        env = {**os.environ, "PYTHONPATH": str(tree) + os.pathsep + os.environ.get("PYTHONPATH", "")}
        cmd = [sys.executable, str(tree / "benchmarks" / "harness.py"), "--cases", cases,
               "--contenders", contenders, "--out", out, *extra]
        done = subprocess.run(cmd, env=env, cwd=tree, capture_output=True, text=True)  # (its fuser, not the cwd's)
        reports = sorted(Path(out).glob("bench-*.json"))
        if done.returncode != 0 or not reports:
            sys.exit(f"compare_trees: the harness failed in {tree}:\n{done.stdout[-2000:]}{done.stderr[-4000:]}")
        report = json.loads(reports[-1].read_text())
    wanted = contenders.split(",")
    cells = {(case["name"], name): cell for case in report["cases"] for name, cell in case["results"].items()
             if name in wanted}
    failed = [f"{case} {name}: {cell.get('error') or cell.get('skipped')}" for (case, name), cell in cells.items()
              if "share" not in cell]
    if failed:  # (a mismatch, or a tree whose fuser does not import)
        sys.exit(f"compare_trees: in {tree}: " + "; ".join(failed))
    return {key: cell["share"] for key, cell in cells.items()}


def run(base: Path, cases: str, rounds: int, contenders: str, extra: list[str]) -> dict:
    """Every round's shares by tree: {"base": [...], "this": [...]}, printed as they come."""
    found = {"base": [], "this": []}
    for k in range(rounds):
        for label, tree in (("base", base), ("this", ROOT)):
            shares = harness_shares(tree, cases, contenders, extra)
            found[label].append(shares)
            print(f"round {k + 1} {label}: " + "  ".join(f"{c} {n} {s:.3f}" for (c, n), s in shares.items()),
                  flush=True)
    print(f"\n| case | contender | {base.name} | this tree | change |\n| --- | --- | --- | --- | --- |")
    for key in found["base"][0]:
        before = statistics.median(r[key] for r in found["base"] if key in r)
        after = statistics.median(r[key] for r in found["this"] if key in r)
        print(f"| {key[0]} | {key[1]} | {before:.3f} | {after:.3f} | {after / before - 1:+.1%} |")
    return found


def main(argv=None) -> None:
    argv = list(sys.argv[1:] if argv is None else argv)
    extra = argv[argv.index("--") + 1:] if "--" in argv else []
    argv = argv[:argv.index("--")] if "--" in argv else argv
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    sub = p.add_subparsers(dest="command", required=True)
    e = sub.add_parser("export", help="a git ref's fuser/ and benchmarks/ into a folder")
    e.add_argument("ref")
    e.add_argument("dir", type=Path)
    r = sub.add_parser("run", help="alternate harness runs of the exported tree and this one")
    r.add_argument("dir", type=Path)
    r.add_argument("cases")
    r.add_argument("--rounds", type=int, default=2)
    r.add_argument("--contenders", default="fuser,fuser-fd")
    args = p.parse_args(argv)
    if args.command == "export":
        export(args.ref, args.dir)
    else:
        run(args.dir.resolve(), args.cases, args.rounds, args.contenders, extra)


if __name__ == "__main__":
    main()
