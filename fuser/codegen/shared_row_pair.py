"""The shared-row kernel with each row split over a pair of programs (SharedRowConfig.pair).

A row's column sums may not fit one program's registers: the LayerNorm backward's dw and db at
32768 columns need 2 x 32768 fp32 accumulators a program, its whole register file. Here the
programs come in pairs (2P of them, one a processor, launched cooperatively so that all are
resident at once); program 2p + h takes the columns [h C/2, (h + 1) C/2) of the rows p, p + P,
... and keeps the column accumulators of its half. Its half of each staged row input sits in
shared memory, three rows at once. Iteration k of a program (row k):

1. loads its partner's partial row sums of row k (volatile loads: from L2, not this L1);
2. starts copying row k + 2's half into the buffer row k - 1 left;
3. runs the first pass over row k + 1's half (waiting for its chunks), zeroing the partner's
   words of row k - 1 on the way, and publishes the partial sums (relaxed atomic exchanges);
4. loads row k + 2's row values (a saved mean and rstd), used an iteration later;
5. waits for the partner's sums of row k if they were not in, and adds them to its own;
6. runs the last pass over row k's half: its row outputs and the column terms.

So the exchange's latency hides behind a whole pass. A row's first pass runs an iteration
before its last, so the row's values (its index, mask, statistics) are computed into names
suffixed `_n` and carried to the next iteration (`_renamed`, `_carried`).

A published sum is one int32 word: the fp32 sum's bits plus one, so that zero means not yet
published (the bits 0xFFFFFFFF, a NaN no fp32 arithmetic produces, cannot be sent). The words
are the launch's zeroed counters of the stream (scratch.Semaphores), one a (row, half, sum),
and one more word after them, `broken`. A program zeroes the words it read once all its
threads have read them: those of row k - 1 after the barrier that follows the first wait of
row k + 1's pass (one the kernel needs anyway: the chunks other threads copied), its last
row's after a barrier at its end; so they are zero again for the next launch. A word that
never comes (a partner never resident, which the cooperative launch rules out) is polled SPIN
times, then reads as NaN, and `broken` is set: a later launch on the stream, whose words that
late partner may have left set, takes every partner's sum as NaN too. Wrong results that
show, rather than a hang or a silently wrong one.

On the H200 a hand-written form of this kernel (benchmarks/sweep_layernorm_pair.py, pair2)
read 0.72 of copy for the LayerNorm backward at 4096x32768, against 0.55-0.60 for db apart.
"""
from __future__ import annotations

import re
from typing import Optional

from ..schedulers.heuristics import SHARED_ROW_PAIR_BUFFERS as BUFFERS  # row k, k + 1, k + 2
from .kernel import ArgSpec
from .outline import NotOutlined, free_reads
from .shared_row import _CHUNK, _PASS, _ROW, SharedRowWriter, gluon_names, renamed
from .types import STORAGE

SPIN = 1 << 22  # polls of a partner's words before taking them as never coming (seconds of L2 round trips)
_ASSIGNED = re.compile(r"\s*(\w+) = ")
_KEYWORDS = re.compile(r"\s*(if|elif|else|for|while|return)\b")
_TOP_EQ = re.compile(r"(?<![=!])(?<![^<]<)(?<![^>]>)=(?!=)")  # an `=` of no comparison (`<<=` is one)
_SUM = re.compile(r"tl\.sum\((acc\w+), axis=1, keep_dims=True\)")
_NAME = re.compile(r"(?<![.\w])([A-Za-z_]\w*)\b")


class PairedRowWriter(SharedRowWriter):
    """The pair form of SharedRowWriter (see the module's doc). Only plans of two passes over
    the row (one set of fp32 row sums, then the outputs), as a norm backward given its
    statistics: `program_lines` is None for others."""

    first_row, row_step = "pair", "NP"

    def variant_name(self) -> str:
        return (f"two Gluon programs a row, each a processor holding half the row in shared memory "
                f"({self.config.chunks} chunks of {self.config.block1} columns)")

    def program_lines(self, head: list[str], row_lines: list[str]) -> Optional[list[str]]:
        markers = [k for k, line in enumerate(row_lines) if _PASS.fullmatch(line)]
        if len(markers) != 2 or self.in_shared or not {"barrier", "thread_barrier"} & gluon_names():
            return None
        pre, mid, post = row_lines[:markers[0]], row_lines[markers[0] + 1:markers[1]], row_lines[markers[1] + 1:]
        sums = list(dict.fromkeys(_SUM.findall("\n".join(mid))))
        inits = {m.group(1): line for line in pre if (m := _ASSIGNED.match(line))}
        # only fp32 sums: each publishes one word of its fp32 bits
        if not sums or "tl.reduce(" in "\n".join(mid) or any(
                not inits.get(acc, "").endswith(", tl.float32, LAYOUT)") for acc in sums):
            return None
        n, ns = self.config.chunks, len(sums)
        first = pre + [line for j in range(n) for line in
                       [f"async_copy.wait_group({2 * n - 1 - j})"] + self._chunk(0, j, "nb")]
        if any(_unrenamed(line) for line in first):
            return None  # (an assignment `_renamed` does not follow: no pair form rather than a wrong one)
        # (its words a (row, half); one more, `broken`, after those of every row)
        self.add_param("SEM_ptr", ArgSpec("semaphore", dim=ns))
        self._words = ns
        next_first, assigned = _renamed(first, {"row": "rown"})
        totals = {acc: f"tl.full([BLOCK0, 1], p{i} + (w{i} - 1).to(tl.float32, bitcast=True), tl.float32, LAYOUT)"
                  for i, acc in enumerate(sums)}
        last = [_SUM.sub(lambda m: totals[m.group(1)], line) for line in mid] + self._last_pass() + post
        try:
            carried = _carried(first, assigned, last)
        except (NotOutlined, SyntaxError):
            return None  # (lines the analysis does not follow, a loop: no pair form rather than a wrong one)
        words = [f"w{i} = tl.load(SEM_ptr + theirs + {i}, volatile=True)" for i in range(ns)]
        loop = ["k = (row - pair) // NP",
                f"this = (k % {BUFFERS}).to(tl.int32)",
                f"nb = ((k + 1) % {BUFFERS}).to(tl.int32)",
                f"free = ((k + 2) % {BUFFERS}).to(tl.int32)",
                f"theirs = (row * 2 + 1 - half) * {ns}"] + words + ["far = row + 2 * NP"]
        loop += self._row_copies("far", "free")
        loop += self._next_row_first(next_first, sums) + self._wait(words) + last
        loop += [f"{name} = {name}_n" for name in carried] + [f"p{i} = p{i}_n" for i in range(ns)]
        return (self._pair_prologue(head) + _renamed(first, {"row": "pair", "nb": "0"}, suffix="")[0]
                + self._publish("pair", "", sums) + ["for row in range(pair, R, NP):"]
                + ["    " + line for line in loop] + self._pair_epilogue(ns))

    def _publish(self, row: str, suffix: str, sums: list[str]) -> list[str]:
        """The program's partial sums of `row` (accumulators `sums`, names suffixed), published."""
        lines = [f"p{i}{suffix} = tl.sum(tl.sum({acc}{suffix}, axis=1), axis=0)" for i, acc in enumerate(sums)]
        return lines + [f"if {row} < R:"] + [
            f"    tl.atomic_xchg(SEM_ptr + ({row} * 2 + half) * {len(sums)} + {i}, "
            f"p{i}{suffix}.to(tl.int32, bitcast=True) + 1, sem='relaxed')" for i in range(len(sums))]

    def _next_row_first(self, next_first: list[str], sums: list[str]) -> list[str]:
        """Row k + 1's first pass (`next_first`: its names suffixed), with the last row's words zeroed on the way, its
        sums published, then row k + 2's row values loaded."""
        ns = len(sums)
        # the row values of row k + 2 (loaded a row ahead) wait until after the first pass: loaded
        # before it, they held registers through it and the kernel took 304 -> 326 us at
        # 4096x32768 on the H200
        ahead = [line for line in next_first if re.match(r"\s*\w+_next_n = tl\.load\(", line)]
        # the words of the last row, read an iteration ago, zeroed for the next launch after the
        # first wait of the first pass: the barrier there, which the loads of chunks other
        # threads copied need anyway (Gluon would put it before them), is written out, so that
        # every thread has read the words before any zeroes them. There, not after the pass,
        # few registers are live (after it, Triton 3.9 spilled 32 bytes at 32768 columns)
        first_pass = [line for line in next_first if line not in ahead]
        at = next(k for k, line in enumerate(first_pass) if line.startswith("async_copy.wait_group(")) + 1
        zero = ["BARRIER()", "if row > pair:"] + [
            f"    tl.store(SEM_ptr + theirs - 2 * NP * {ns} + {i}, 0)" for i in range(ns)]
        return ["rown = row + NP"] + first_pass[:at] + zero + first_pass[at:] + self._publish("rown", "_n", sums) + ahead

    def _wait(self, words: list[str]) -> list[str]:
        """Wait for the partner's words of row k (loaded as `words` at the iteration's top);
        those that never came read as NaN (`spin`: SPIN, or 0 once a partner never came: the
        program's later rows wait no more)."""
        ns = len(words)
        late = " | ".join(f"(w{i} == 0)" for i in range(ns))
        lines = ["polls = 0", f"while ({late}) & (polls < spin):"] + ["    " + w for w in words]
        lines += ["    polls += 1",
                  "gave_up = polls >= spin",
                  "if gave_up:  # a partner that never came: this launch and every later one NaN",
                  f"    tl.store(SEM_ptr + 2 * R * {ns}, 1)",
                  "    spin = 0",
                  "ok = ((gave_up == 0) & (broken == 0)).to(tl.int32)"]
        return lines + [f"w{i} = w{i} * ok  # (a zero word reads as NaN)" for i in range(ns)]

    def _chunk(self, k: int, j: int, buffer: str) -> list[str]:
        """Pass k's lines for chunk j of this program's half, its row inputs in `buffer`."""
        slot = f"index({buffer} * {self.config.chunks} + {j})"
        return [f"c_start = col0 + {j} * BLOCK1"] + [
            _ROW.sub(lambda m: f"T{m.group(1)}_smem.{slot}", t).replace(_CHUNK, str(j)) for t in self.passes[k]]

    def _last_pass(self) -> list[str]:
        accs = [f"acc{e.out.name}" for e in self.column_reductions]
        lines = []
        for j in range(self.config.chunks):  # (an accumulator a chunk)
            lines += renamed(self._chunk(1, j, "this"), {acc: f"{acc}_{j}" for acc in accs})
        return lines

    def _row_copies(self, row: str, buffer: str) -> list[str]:
        """Start copying this program's half of `row` (none past the last row) into `buffer`,
        one copy group a chunk."""
        lines = []
        for j in range(self.config.chunks):
            index = f"(col0 + {j} * BLOCK1 + cols)"
            # (a half is whole chunks: the gate's. `cols >= 0`, which the compiler folds, gives the
            # row's condition the chunk's shape; a column bound it cannot fold cost each copy
            # integer compares and selects, and the kernel is bound by its instruction issue)
            lines += [f"COPY(T{v.name}_smem.index({buffer} * {self.config.chunks} + {j}), T{v.name}_ptr + {row} * "
                      f"T{v.name}_stride0 + {index} * T{v.name}_stride1, mask=(cols >= 0) & ({row} < R))"
                      for v in self.staged_rows] + ["async_copy.commit_group()"]
        return lines

    def _pair_prologue(self, head: list[str]) -> list[str]:
        cfg = self.config
        lines = ["LAYOUT: tl.constexpr = tl.BlockedLayout([1, SPT], [1, 32], [1, WARPS], [1, 0])"] + head
        lines += ["NP = tl.num_programs(0) // 2", "pair = pid // 2", "half = pid % 2", "col0 = half * (C // 2)",
                  f"broken = tl.load(SEM_ptr + 2 * R * {self._words})", f"spin = {SPIN}"]
        lines += self.first_row_loads + [f"cols = {self.arange('BLOCK1', 1)}"]
        for v in self.staged:
            slots = BUFFERS * cfg.chunks if id(v) in self.row_ids else cfg.chunks
            lines.append(f"T{v.name}_smem = tl.allocate_shared_memory({STORAGE[v.dtype]}, [{slots}, 1, BLOCK1], "
                         "tl.SwizzledSharedLayout(1, 1, 1, [1, 0]))")
        lines += self._column_copies("col0 + ")
        return lines + self._row_copies("pair", "0") + self._row_copies("(pair + NP)", "1") + self._accumulators()

    def _pair_epilogue(self, ns: int) -> list[str]:
        # the partner's words of this program's last row, zeroed once every thread has read them
        # (`pair < R` as the prologue's publish: the launch takes at most R pairs)
        lines = ["async_copy.wait_group(0)",  # (the copies past the last row copy nothing)
                 "BARRIER()", "last = pair + (R - 1 - pair) // NP * NP", "if pair < R:"]
        lines += [f"    tl.store(SEM_ptr + (last * 2 + 1 - half) * {ns} + {i}, 0)" for i in range(ns)]
        return lines + self._workspace_stores("pair", "col0 + ")

    def imports(self) -> list[str]:
        # Gluon's CTA barrier was renamed between releases
        return super().imports() + ["BARRIER = getattr(tl, 'barrier', None) or getattr(tl, 'thread_barrier')"]


def _unrenamed(line: str) -> bool:
    """Whether `line` assigns other than `name = ...` (augmented, tuple, subscript or annotated
    assignments): an `=` at the top level of the statement, outside brackets, that `_ASSIGNED`
    does not match."""
    if _KEYWORDS.match(line) or _ASSIGNED.match(line):
        return False
    depth = 0
    for k, ch in enumerate(line):
        depth += ch in "([{"
        depth -= ch in ")]}"
        if ch == "=" and depth == 0 and _TOP_EQ.match(line, k):
            return True
    return False


def _renamed(lines: list[str], fixed: dict[str, str], suffix: str = "_n") -> tuple[list[str], set[str]]:
    """`lines` with every name they assign suffixed (from its assignment on; a name read before
    it is assigned here is the value carried in) and the names of `fixed` replaced; and the
    names assigned."""
    assigned: set[str] = set()
    out = []
    for line in lines:
        def rename(m: re.Match) -> str:
            name = m.group(1)
            return fixed.get(name, name + suffix if name in assigned else name)
        target = _ASSIGNED.match(line)
        if target is not None:
            indent, rest = line[:target.start(1)], line[target.end(1):]
            name = target.group(1)
            renamed_rest = _NAME.sub(rename, rest)
            assigned.add(name)
            out.append(f"{indent}{fixed.get(name, name + suffix)}{renamed_rest}")
        else:
            out.append(_NAME.sub(rename, line))
    return out, assigned


def _carried(first: list[str], assigned: set[str], rest: list[str]) -> list[str]:
    """The names `first` assigns that the rest of an iteration reads before assigning them, or
    that `first` itself reads before assigning (a row value loaded a row ahead): those carried
    from a row's first pass to its last pass, and to the next row's first."""
    return sorted(assigned & (free_reads(rest) | free_reads(first)))
