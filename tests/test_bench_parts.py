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
    assert twice.returncode != 0 and "more than one part" in twice.stderr


def test_a_part_out_of_range_is_refused():
    done = bench("--quick", "--part", "3/2", "--list")
    assert done.returncode != 0 and "expected K/N" in done.stderr
