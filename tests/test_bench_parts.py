"""The benchmark harness split over device calls (`--part K/N`) and joined (`--merge`), on the
CPU smoke test: a device call's time limit is shorter than the whole suite's run."""
import json
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
CASES = "rmsnorm,gelu"  # (a few of the quick suite's cases: each part runs in seconds)


def bench(*args: str) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, str(ROOT / "benchmarks" / "harness.py"), *args],
                          capture_output=True, text=True, cwd=ROOT, timeout=300)


def test_parts_cover_the_suite_once_and_merge_into_one_table_in_suite_order(tmp_path):
    listed = bench("--quick", "--cases", CASES, "--list").stdout.split("contenders:")[0].split()
    names = [n for n in listed if "[" in n]
    parts = [[n for n in bench("--quick", "--cases", CASES, "--part", f"{k}/2", "--list").stdout.split() if "[" in n]
             for k in (1, 2)]
    assert sorted(parts[0] + parts[1]) == sorted(names) and not set(parts[0]) & set(parts[1])
    for k in (1, 2):
        done = bench("--quick", "--device", "cpu", "--cases", CASES, "--part", f"{k}/2", "--out", str(tmp_path / f"p{k}"))
        assert done.returncode == 0, done.stderr
    files = [str(next((tmp_path / f"p{k}").glob("*.json"))) for k in (1, 2)]
    merged = bench("--merge", *files, "--out", str(tmp_path / "merged"))
    assert merged.returncode == 0, merged.stderr
    report = json.loads(next((tmp_path / "merged").glob("*.json")).read_text())
    assert [row["name"] for row in report["cases"]] == names  # (the suite's order)
    assert len(report["copy"]) == 2 and "(2 parts)" in merged.stdout
    twice = bench("--merge", files[0], files[0], "--out", str(tmp_path / "twice"))
    assert twice.returncode != 0 and "expected the parts 1/2 to 2/2 once each" in twice.stderr


def test_a_part_out_of_range_is_refused():
    done = bench("--quick", "--part", "3/2", "--list")
    assert done.returncode != 0 and "expected K/N" in done.stderr


def report(part: str, rows: dict, seed: int = 0) -> dict:
    """A made-up report of one part: rows {case: {contender: share}}."""
    contenders = ["eager", "torch.compile", "liger", "fuser"]
    return {"device": "GPU", "torch": "2", "triton": "3", "liger_kernel": "0", "python": "3", "quick": False,
            "seed": seed, "date": f"d{part}", "copy": {"gbps": 4000.0 + len(part)}, "part": part,
            "contenders": contenders,
            "cases": [{"name": name, "results": {c: {"share": v} for c, v in cells.items()}} for name, cells in rows.items()]}


def test_merge_recomputes_the_best_peer_and_refuses_an_incomplete_or_mixed_set(tmp_path, capsys):
    """In process, on made-up reports with peers: the best peer taken over the joined rows,
    geomeans over all of them, the rows in suite order; a missing or repeated part, a part of
    another run (another seed), a report that is no part, each refused with a message."""
    sys.path.insert(0, str(ROOT))
    import pytest

    from benchmarks import suite
    from benchmarks.report import merge_reports

    names = [c.name for c in suite.build_suite(False)]
    a = report("1/2", {names[3]: {"eager": 0.1, "torch.compile": 0.5, "liger": 0.6, "fuser": 0.9}})
    b = report("2/2", {names[0]: {"eager": 0.2, "torch.compile": 0.7, "fuser": 0.8}})
    paths = []
    for k, r in enumerate((a, b, report("2/2", {}, seed=1), {"cases": []}, report("1/3", {}))):
        paths.append(str(tmp_path / f"r{k}.json"))
        Path(paths[-1]).write_text(json.dumps(r))
    assert merge_reports(paths[:2], str(tmp_path / "out")) == 0
    merged = json.loads(next((tmp_path / "out").glob("*.json")).read_text())
    assert [row["name"] for row in merged["cases"]] == [names[0], names[3]]
    assert [row["results"]["best peer"]["from"] for row in merged["cases"]] == ["torch.compile", "liger"]
    assert abs(merged["geomean"]["best peer"]["geomean"] - (0.7 * 0.6) ** 0.5) < 1e-9
    assert merged["part"] == "1-2/2 merged"
    assert f"fuser: 1 of 2 rows at 0.85 of copy or more (below: {names[0]} 0.80); 2 of 2 at the best peer" \
        in capsys.readouterr().out
    for bad, message in (([paths[0]], "expected the parts"), ([paths[0], paths[0]], "expected the parts"),
                         ([paths[0], paths[2]], "seed"), ([paths[0], paths[3]], "not a report of one part"),
                         ([paths[0], paths[4]], "expected the parts"), ([str(tmp_path / "out" / "x.json")], "cannot read")):
        with pytest.raises(SystemExit, match=message):
            merge_reports(bad, str(tmp_path / "bad"))


def test_the_table_ends_with_the_rows_that_miss_the_targets():
    """Under the table, a line per fuser column: its rows at 0.85 of copy or more and at the best
    peer or above (2% allowed), naming each row that misses (BENCHMARKS.md's targets)."""
    sys.path.insert(0, str(ROOT))
    from benchmarks import report

    shares = {"a[1x1]": {"torch.compile": 0.70, "fuser": 0.80, "fuser-fd": 0.90},   # below 0.85
              "b[1x1]": {"torch.compile": 0.90, "fuser": 0.885},                    # within 2% of its peer
              "c[1x1]": {"torch.compile": 0.95, "fuser": 0.90},                     # behind its peer
              "d[1x1]": {"torch.compile": 0.50}}                                     # fuser not timed
    rows = [{"name": n, "results": {c: {"share": v} for c, v in cells.items()}} for n, cells in shares.items()]
    columns = ["torch.compile", "fuser", "fuser-fd"]
    report.add_best_peer(rows, columns)
    fuser, fd = report.targets_summary(rows, columns + ["best peer"]).splitlines()
    assert fuser == ("fuser: 2 of 3 rows at 0.85 of copy or more (below: a[1x1] 0.80); 2 of 3 at the best peer or "
                     "above, 2% allowed (below: c[1x1] 0.900 < 0.950 (torch.compile))")
    assert fd == "fuser-fd: 1 of 1 rows at 0.85 of copy or more; 1 of 1 at the best peer or above, 2% allowed"
    assert report.targets_summary(rows, ["torch.compile"]) == ""


def test_a_part_cut_off_leaves_its_rows_which_merge_takes_when_allowed(tmp_path, monkeypatch):
    """A device call's time limit can stop a part mid-run: the rows it timed stay in its
    .partial.json (rewritten after each case), which --merge refuses unless --allow-partial,
    then naming the rows not reached. A whole part removes its .partial.json."""
    sys.path.insert(0, str(ROOT))
    import pytest

    from benchmarks import harness, report

    args = ["--quick", "--device", "cpu", "--cases", CASES, "--contenders", "eager"]
    planned = [c.name for c in harness.select_cases(True, CASES, "1/2")]
    assert len(planned) >= 2
    run_case, calls = harness.run_case, []

    def cut_off(case, *rest):  # the time limit, at the second case
        calls.append(case.name)
        if len(calls) == 2:
            raise KeyboardInterrupt
        return run_case(case, *rest)

    monkeypatch.setattr(harness, "run_case", cut_off)
    with pytest.raises(KeyboardInterrupt):
        harness.main(args + ["--part", "1/2", "--out", str(tmp_path / "p1")])
    (partial,) = (tmp_path / "p1").glob("*.partial.json")
    assert not list((tmp_path / "p1").glob("bench-*[0-9].json"))
    cut = json.loads(partial.read_text())
    assert cut["complete"] is False and [r["name"] for r in cut["cases"]] == planned[:1]
    monkeypatch.setattr(harness, "run_case", run_case)
    assert harness.main(args + ["--part", "2/2", "--out", str(tmp_path / "p2")]) == 0
    assert not list((tmp_path / "p2").glob("*.partial.json"))
    (whole,) = (tmp_path / "p2").glob("*.json")
    with pytest.raises(SystemExit, match="cut off before its end"):
        report.merge_reports([str(partial), str(whole)], str(tmp_path / "refused"))
    assert report.merge_reports([str(partial), str(whole)], str(tmp_path / "merged"), allow_partial=True) == 0
    merged = json.loads(next((tmp_path / "merged").glob("*.json")).read_text())
    assert merged["missing"] == planned[1:] and planned[0] in [r["name"] for r in merged["cases"]]
    assert "complete" not in merged


def test_a_row_below_the_target_says_whether_its_kernels_or_its_host_are_slow():
    """A cell with the GPU's busy time a call (`kernel_ms`) and the host's (`host_ms`): the
    summary names the share its kernels alone would read, which tells a slow kernel from a
    host that lags behind it (open lead 3 of docs/performance.md)."""
    sys.path.insert(0, str(ROOT))
    from benchmarks import report

    host_bound = {"share": 0.45, "ms": 0.300, "gbps": 1300.0, "kernel_ms": 0.135, "host_ms": 0.290}
    slow_kernel = {"share": 0.70, "ms": 0.200, "kernel_ms": 0.196}
    rows = [{"name": "a[1x1]", "results": {"fuser": host_bound}},
            {"name": "b[1x1]", "results": {"fuser": slow_kernel}},
            {"name": "c[1x1]", "results": {"fuser": {"share": 0.60, "ms": 0.1}}}]  # (a report from before)
    line = report.targets_summary(rows, ["fuser"])
    assert line == ("fuser: 0 of 3 rows at 0.85 of copy or more (below: a[1x1] 0.45 (kernels alone 1.00, host "
                    "290 us a call), b[1x1] 0.70 (kernels alone 0.71), c[1x1] 0.60)")
    detail = report.format_cell(host_bound, detail=True)
    assert detail.endswith(", kernels 0.1350 ms, host 0.2900 ms"), detail


def test_call_costs_time_the_host_with_the_gpu_kept_busy():
    """`busy_times` (shared with benchmarks/backward_host.py) times the host's calls; off the
    GPU `call_costs` has nothing to add to a cell."""
    sys.path.insert(0, str(ROOT))
    import torch

    from benchmarks import harness

    calls = []
    host_us, node = harness.busy_times(lambda: calls.append(1), torch.device("cpu"), calls=20, rounds=2)
    assert len(calls) == 40 and 0 < host_us < 1e4 and node != node  # (NaN without a timer)
    assert harness.call_costs(lambda: None, torch.device("cpu")) == {}


def test_a_cell_whose_cost_breakdown_fails_keeps_its_time():
    """The kernel and host times are a diagnostic: a profiler that fails there (no CUPTI, another
    profiler running) leaves the cell's timing and says why, not an error cell."""
    sys.path.insert(0, str(ROOT))
    from unittest import mock

    import torch

    from benchmarks import harness, suite

    cpu = torch.device("cpu")
    case = suite.make_case("rmsnorm_fwd", 8, 32)
    with mock.patch.object(harness, "call_costs", side_effect=RuntimeError("no CUPTI")):
        cell = harness.run_cell(case, "eager", harness.eager_reference(case, cpu, 0), cpu, 100.0, 0, False)
    assert cell["share"] > 0 and cell["costs_error"] == "RuntimeError: no CUPTI"


def test_the_breakdown_lists_each_cells_kernels_longest_first():
    """`scripts/bench --breakdown REPORT.json`: do_bench's time a call beside the kernels' and
    the host's, then each kernel's (us), for the cells timed on a GPU."""
    sys.path.insert(0, str(ROOT))
    from benchmarks import harness, report

    cell = {"share": 0.88, "ms": 0.1536, "kernel_ms": 0.1541, "host_ms": 0.1257,
            "kernels": {"fuser_inner_outer_combine_0e": 6.1, "fuser_inner_outer_persistent_66": 148.0}}
    found = {"cases": [{"name": "layernorm_bwd[16384x4096]",
                         "results": {"fuser": cell, "best peer": dict(cell, **{"from": "fuser"}),
                                     "eager": {"share": 0.4, "ms": 0.3}}}]}
    assert report.breakdown(found) == (
        "layernorm_bwd[16384x4096]      fuser            0.88 of copy: 153.6 us, kernels 154.1, host 125.7; "
        "fuser_inner_outer_persistent_66 148.0; fuser_inner_outer_combine_0e 6.1")
    assert harness.main(["--breakdown", str(ROOT / "docs" / "bench-2026-12-05-run31-h100.json")]) == 0


def test_the_bench_seconds_say_which_contender_the_run_spent_its_time_on():
    """Each cell records `cell_s`, the seconds the bench spent on it; `bench_seconds` adds them up
    by contender, most first, split into first calls, settling and timing (a device call has
    10 minutes: where they go decides what fits). Reports from before `cell_s` count their first
    calls and settling."""
    sys.path.insert(0, str(ROOT))
    import torch

    from benchmarks import harness, report, suite

    cpu = torch.device("cpu")
    case = suite.make_case("rmsnorm_fwd", 8, 32)
    cell = harness.run_cell(case, "eager", harness.eager_reference(case, cpu, 0), cpu, 100.0, 0, False)
    assert cell["cell_s"] >= cell["first_call_s"] + cell["tuned_s"] + cell["timing_s"] > 0
    found = {"cases": [{"results": {
        "eager": {"cell_s": 2.0, "first_call_s": 0.5, "tuned_s": 0.25, "timing_s": 1.0},
        "compile+cd": {"cell_s": 30.0, "first_call_s": 28.0, "tuned_s": 0.5, "timing_s": 1.25},
        "fuser": {"error": "mismatch: x", "cell_s": 4.0},
        "best peer": {"cell_s": 30.0, "first_call_s": 28.0, "from": "compile+cd"},
        "liger": {"skipped": "no implementation for this case"}}}]}
    assert report.bench_seconds(found) == (
        "bench seconds by contender, 36 in all (first calls / settling / timing):\n"
        "  compile+cd          30.0 (28.0 / 0.5 / 1.2)\n"
        "  fuser                4.0 (0.0 / 0.0 / 0.0)\n"
        "  eager                2.0 (0.5 / 0.2 / 1.0)")
    old = json.loads((ROOT / "docs" / "bench-2026-12-05-run31-h100.json").read_text())
    assert report.bench_seconds(old).splitlines()[1].startswith("  compile+cd")  # (its cd compiles: 208 s)
