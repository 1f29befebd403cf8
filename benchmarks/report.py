"""The benchmark's reports: the markdown table and its line against the targets, the chart, the
kernel-by-kernel breakdown, the files a run writes, and the merge of a run's parts
(`scripts/bench --merge`, `--breakdown`). The measuring is benchmarks/harness.py's."""
from __future__ import annotations

import datetime
import json
import math
import os
import sys
from pathlib import Path

try:
    from benchmarks import suite
except ImportError:  # run as a plain script without the repo on the path
    import suite

NON_PEERS = ("eager", "fuser", "fuser-fd")  # "best peer" is the best of the other columns
TARGET_SHARE = 0.85  # fuser's target on every row (BENCHMARKS.md), dotted line on the chart
PEER_NOISE = 0.02  # a row at the best peer within this share of it counts as at it (BENCHMARKS.md)


def log(msg: str) -> None:
    print(msg, file=sys.stderr, flush=True)


def format_cell(cell: dict | None, detail: bool = False) -> str:
    if not cell:
        return ""
    if "skipped" in cell:
        return f"({cell['skipped']})" if detail else ""
    if "error" in cell:
        return "error: " + cell["error"].replace("|", "\\|")
    if detail:
        costs = "".join(f", {label} {cell[key]:.4f} ms" for key, label in (("kernel_ms", "kernels"), ("host_ms", "host"))
                        if key in cell)
        return f"{cell['share']:.2f} of copy, {cell['ms']:.4f} ms, {cell['gbps']:.0f} GB/s{costs}"
    share = cell["share"]
    return f"{share:.2f}" if share >= 0.095 else f"{share:.2g}"  # tiny shapes: 2 digits


def geomean(values: list[float]) -> float | None:
    return math.exp(sum(map(math.log, values)) / len(values)) if values else None


def add_best_peer(rows: list[dict], contenders: list[str]) -> bool:
    """Add a "best peer" cell to each row (best share among the non-eager, non-fuser columns)."""
    peers = [c for c in contenders if c not in NON_PEERS]
    if not peers:
        return False
    for row in rows:
        timed = [p for p in peers if "share" in (row["results"].get(p) or {})]
        best = max(timed, key=lambda p: row["results"][p]["share"], default=None)
        row["results"]["best peer"] = best and {**row["results"][best], "from": best}
    return True


def column_geomeans(rows: list[dict], columns: list[str]) -> dict:
    means = {}
    for col in columns:
        shares = [r["results"][col]["share"] for r in rows
                  if r["results"].get(col) and "share" in r["results"][col]]
        means[col] = {"geomean": geomean(shares), "rows": len(shares), "of": len(rows)}
    return means


def markdown_table(rows: list[dict], columns: list[str], means: dict) -> str:
    lines = ["| case | " + " | ".join(columns) + " |",
             "| --- |" + " --- |" * len(columns)]
    for row in rows:
        cells = [format_cell(row["results"].get(c)) for c in columns]
        lines.append(f"| {row['name']} | " + " | ".join(cells) + " |")
    gm_cells = []
    for col in columns:
        m = means[col]
        text = "" if m["geomean"] is None else f"{m['geomean']:.2f}"
        if m["geomean"] is not None and m["rows"] < m["of"]:
            text += f" ({m['rows']}/{m['of']})"
        gm_cells.append(text)
    lines.append("| **geomean** | " + " | ".join(gm_cells) + " |")
    return "\n".join(lines)


def write_chart(path: Path, rows: list[dict], columns: list[str], title: str) -> str | None:
    """Grouped bar chart of the shares; returns a note instead when matplotlib is missing."""
    try:
        import matplotlib
        matplotlib.use("Agg")
        import matplotlib.pyplot as plt
    except ImportError:
        return "matplotlib not importable: no chart written"
    width = 0.8 / max(len(columns), 1)
    fig, ax = plt.subplots(figsize=(max(8.0, 0.6 * len(rows) * max(1, len(columns) / 3)), 5))
    for j, col in enumerate(columns):  # an explicit colour per column, bars or not
        xs, ys = [], []
        for i, row in enumerate(rows):
            cell = row["results"].get(col)
            if cell and "share" in cell:
                xs.append(i + (j - (len(columns) - 1) / 2) * width)
                ys.append(cell["share"])
        if xs:
            ax.bar(xs, ys, width=width, label=col, color=f"C{j}")
    ax.axhline(1.0, color="gray", linewidth=0.8, linestyle="--")
    ax.axhline(TARGET_SHARE, color="gray", linewidth=0.8, linestyle=":")
    ax.set_xticks(range(len(rows)))
    ax.set_xticklabels([r["name"] for r in rows], rotation=60, ha="right", fontsize=7)
    ax.set_ylabel("share of device-to-device copy bandwidth")
    ax.set_title(title, fontsize=9)
    ax.set_ylim(0, 1.2)  # room for the legend above the copy line
    ax.legend(fontsize=7, ncol=len(columns), loc="upper center")
    fig.tight_layout()
    fig.savefig(path, dpi=120)
    plt.close(fig)
    return None


def table_with_targets(rows: list[dict], columns: list[str], means: dict) -> str:
    """The markdown table, then its fuser columns against the targets (targets_summary)."""
    verdict = targets_summary(rows, columns)
    return markdown_table(rows, columns, means) + ("\n\n" + verdict if verdict else "")


def targets_summary(rows: list[dict], columns: list[str]) -> str:
    """A line per fuser column against issue 6's targets: its rows at TARGET_SHARE of copy or
    more, and at the best peer or above (PEER_NOISE allowed), each naming the rows that miss."""
    lines = []
    for col in (c for c in ("fuser", "fuser-fd") if c in columns):
        timed = [r for r in rows if "share" in (r["results"].get(col) or {})]
        if not timed:
            continue
        share = {r["name"]: r["results"][col]["share"] for r in timed}
        low = [f"{r['name']} {share[r['name']]:.2f}{kernels_note(r['results'][col])}" for r in timed
               if share[r["name"]] < TARGET_SHARE]
        line = (f"{col}: {len(timed) - len(low)} of {len(timed)} rows at {TARGET_SHARE} of copy or more"
                + (f" (below: {', '.join(low)})" if low else ""))
        compared = [(r, p) for r in timed if "share" in (p := r["results"].get("best peer") or {})]
        if compared:
            behind = [f"{r['name']} {share[r['name']]:.3f} < {p['share']:.3f} ({p['from']})" for r, p in compared
                      if share[r["name"]] < (1 - PEER_NOISE) * p["share"]]
            line += (f"; {len(compared) - len(behind)} of {len(compared)} at the best peer or above, "
                     f"{PEER_NOISE:.0%} allowed" + (f" (below: {', '.join(behind)})" if behind else ""))
        lines.append(line)
    return "\n".join(lines)


def breakdown(report: dict) -> str:
    """A line per timed cell of `report` that has its GPU busy time (`call_costs`): do_bench's
    time a call, the kernels' and the host's, then each kernel's, longest first."""
    lines = []
    for case in report["cases"]:
        for name, cell in case["results"].items():
            if "kernel_ms" not in cell or name == "best peer":
                continue
            host = f", host {cell['host_ms'] * 1e3:.1f}" if "host_ms" in cell else ""
            kernels = sorted((cell.get("kernels") or {}).items(), key=lambda kv: -kv[1])
            lines.append(f"{case['name']:30s} {name:16s} {cell['share']:.2f} of copy: {cell['ms'] * 1e3:.1f} us, "
                         f"kernels {cell['kernel_ms'] * 1e3:.1f}{host}"
                         + "".join(f"; {k} {v:.1f}" for k, v in kernels))
    return "\n".join(lines)


def bench_seconds(report: dict) -> str:
    """Where a bench run's time went: the seconds spent on each contender's cells (`cell_s`),
    most first, with their first calls (compiles), settling (fuser's background tuning) and
    timing (do_bench, kernel and host times); cells of reports before `cell_s` count their
    first calls and settling alone. Empty for a report with neither."""
    spent: dict[str, list[float]] = {}
    for case in report["cases"]:
        for name, cell in case["results"].items():
            if name == "best peer" or not cell or not ({"cell_s", "first_call_s"} & cell.keys()):
                continue
            parts = [cell.get(key, 0.0) for key in ("first_call_s", "tuned_s", "timing_s")]
            total = spent.setdefault(name, [0.0] * 4)
            for k, v in enumerate([cell.get("cell_s", sum(parts))] + parts):
                total[k] += v
    if not spent:
        return ""
    lines = [f"bench seconds by contender, {sum(t[0] for t in spent.values()):.0f} in all "
             "(first calls / settling / timing):"]
    for name, (total, first, settle, timing) in sorted(spent.items(), key=lambda kv: -kv[1][0]):
        lines.append(f"  {name:16s} {total:7.1f} ({first:.1f} / {settle:.1f} / {timing:.1f})")
    return "\n".join(lines)


def kernels_note(cell: dict) -> str:
    """For a cell below the target: the share its kernels alone would read (`kernel_ms`, no L2
    flush), and its host's time a call, which tell a slow kernel from a lagging host."""
    if "kernel_ms" not in cell:
        return ""
    host = f", host {cell['host_ms'] * 1e3:.0f} us a call" if "host_ms" in cell else ""
    return f" (kernels alone {cell['share'] * cell['ms'] / cell['kernel_ms']:.2f}{host})"


def output_stem(out_dir: Path) -> Path:
    out_dir.mkdir(parents=True, exist_ok=True)
    return out_dir / ("bench-" + datetime.datetime.now().strftime("%Y%m%d-%H%M%S"))


def write_partial(stem: Path, report: dict) -> None:
    """The rows timed so far as `<stem>.partial.json` (`"complete": false`), rewritten after each
    case: a run cut off by a device call's time limit still leaves them, which `--merge
    --allow-partial` takes. Removed once the whole report is written."""
    path = stem.with_name(stem.name + ".partial.json")
    tmp = path.with_name(path.name + ".tmp")
    tmp.write_text(json.dumps({**report, "complete": False}, indent=2) + "\n")
    os.replace(tmp, path)  # (whole or absent: a kill mid-write leaves the last one)


def write_outputs(out_dir: Path, report: dict, table: str, header: str,
                  title: str, stem: Path | None = None) -> list[str]:
    stem = stem or output_stem(out_dir)
    notes = []
    json_path = stem.with_suffix(".json")
    json_path.write_text(json.dumps(report, indent=2) + "\n")
    stem.with_suffix(".md").write_text(header + "\n\n" + table + "\n")
    notes.append(f"wrote {json_path} and {stem.with_suffix('.md')}")
    note = write_chart(stem.with_suffix(".png"), report["cases"], report["contenders"], title)
    notes.append(note or f"wrote {stem.with_suffix('.png')}")
    return notes


def part_of(part) -> tuple[int, int] | None:
    """(K, N) of a part `K/N`, or None."""
    try:
        k, n = (int(x) for x in str(part).split("/"))
    except ValueError:
        return None
    return (k, n) if 1 <= k <= n else None


# what the parts of one run must agree on
_SAME_RUN = ("device", "contenders", "quick", "seed", "torch", "triton", "liger_kernel", "python")


def merge_reports(paths: list[str], out: str, allow_partial: bool = False) -> int:
    """Join the reports of the N parts of one suite run (--part K/N, every K once) into one: the
    rows in suite order, the best peer and geomeans over all of them, the copy of each part
    named in the header. A part cut off before its end (`write_partial`) is refused unless
    `allow_partial`; then the rows it did not reach are named in the header and the report."""
    reports, parts = [], []  # (each file's report, its (K, N))
    for path in paths:
        try:
            report = json.loads(Path(path).read_text())
            part = part_of(report.get("part")) if isinstance(report, dict) else None
            if part is not None:  # (read here: a part without them is refused below)
                _ = report["copy"]["gbps"], report["cases"]
        except (OSError, ValueError, KeyError, TypeError) as e:
            sys.exit(f"bench: --merge: cannot read {path} as a report of a part: {type(e).__name__}: {e}")
        if part is None:
            sys.exit(f"bench: --merge: {path} is not a report of one part (--part K/N)")
        if report.get("complete", True) is False and not allow_partial:
            sys.exit(f"bench: --merge: {path} is a part cut off before its end ({len(report['cases'])} of "
                     f"{len(report.get('planned', []))} rows); pass --allow-partial to take it")
        reports.append(report)
        parts.append(part)
    first = reports[0]
    for path, r in zip(paths, reports):
        for key in _SAME_RUN:
            if r.get(key) != first.get(key):
                sys.exit(f"bench: --merge: {path} has {key} {r.get(key)!r}, {paths[0]} has {first.get(key)!r}: "
                         "parts of one run must agree")
    n = parts[0][1]
    if sorted(parts) != [(k, n) for k in range(1, n + 1)]:
        found = ", ".join(f"{k}/{m}" for k, m in parts)
        sys.exit(f"bench: --merge: expected the parts 1/{n} to {n}/{n} once each, got {found}")
    order = {c.name: k for k, c in enumerate(suite.build_suite(first["quick"]))}
    rows = sorted((row for r in reports for row in r["cases"]), key=lambda row: order.get(row["name"], len(order)))
    names = [row["name"] for row in rows]
    twice = sorted({name for name in names if names.count(name) > 1})
    if twice:
        sys.exit(f"bench: --merge: {twice} measured in more than one part")
    contenders = first["contenders"]
    for row in rows:
        row["results"].pop("best peer", None)
    columns = contenders + (["best peer"] if add_best_peer(rows, contenders) else [])
    means = column_geomeans(rows, columns)
    table = table_with_targets(rows, columns, means)
    copies = [r["copy"]["gbps"] for r in reports]
    title = (f"{first['device']}: copy {min(copies):.0f}-{max(copies):.0f} GB/s ({n} parts); "
             f"torch {first['torch']}, triton {first['triton']}")
    dates = [r["date"] for r in reports]
    header = f"{title}; {', '.join(dates)}; cells = share of each part's copy bandwidth"
    done = set(names)
    missing = [name for r in reports for name in r.get("planned", []) if name not in done]
    if missing:
        header += f"; not timed (a part cut off): {', '.join(missing)}"
    print(header + "\n\n" + table)
    report = {**first, "date": dates, "copy": [r["copy"] for r in reports], "part": f"1-{n}/{n} merged",
              "parts": list(paths), "columns": columns, "geomean": means, "cases": rows, "missing": missing}
    report.pop("complete", None)
    report.pop("planned", None)
    for note in write_outputs(Path(out), report, table, header, title):
        log("bench: " + note)
    return 0
