#!/usr/bin/env python3
"""Where a one-launch step's time goes, from a FUSE_STEP_TRACE file (fuse-runtime's one_launch/tables.rs):

    scripts/gpu/step-trace.py TRACE.tsv[.xz] [--launches N]

The file holds one table per persistent kernel dropped (the last replay's tasks): launch, block, name, then
the stamps in ns (setup, body, grid_wait, body_end, signalled, mark0 .. mark2; '-' where not written). Printed for the
largest table (the step's main kernel): the step's span; per kernel name, the tasks' body times (median), the wait inside them and the kernel's
own marks (FUSE_TASK_MARK 0 .. 2, after the wait); per launch
(the first N), when its first task started, when its last grid wait returned, when its last task ended and
signalled, and the gap from the launch before's last signal to its own last grid-wait return (the hand-off);
then the span split by kernel: hand-offs, critical bodies (last wait returning -> last task ending), signals;
then per kernel each phase of a task (to the body, to its wait, to each mark, to its end, to its signal).
"""
import lzma
import statistics
import sys


def tables(path):
    opener = lzma.open if path.endswith(".xz") else open
    with opener(path, "rt") as f:
        table = None
        for line in f:
            cells = line.rstrip("\n").split("\t")
            if cells[0] == "launch":
                table = []
                yield table
                continue
            stamps = [None if c == "-" else int(c) for c in cells[3:11]]
            stamps += [None] * (8 - len(stamps))  # traces from before the kernels' marks have 5 stamps
            table.append((int(cells[0]), int(cells[1]), cells[2], *stamps))


def main():
    args = sys.argv[1:]
    if not args:
        sys.exit(__doc__)
    shown = int(args[args.index("--launches") + 1]) if "--launches" in args else 12
    # The step's main persistent kernel: the table with the most tasks (a tail kernel after an argmax is small).
    last = max(list(tables(args[0])), key=len, default=None)
    if not last:
        sys.exit("no tasks in the trace")
    start = min(t[3] for t in last)
    end = max(t[7] for t in last)
    launch_count = len({t[0] for t in last})
    print(f"{len(last)} tasks of {launch_count} launches: {(end - start) / 1000:.1f} us from the first set-up to the last signal")
    by_name = {}
    for t in last:
        by_name.setdefault(t[2], []).append(t)
    print(f"{'kernel':60} {'tasks':>6} {'body us':>8} {'wait us':>8} {'setup us':>9}  marks (us after the wait)")
    for name, ts in sorted(by_name.items(), key=lambda kv: -len(kv[1])):
        body = statistics.median((t[6] - t[4]) / 1000 for t in ts)
        wait = [(t[5] - t[4]) / 1000 for t in ts if t[5] is not None]
        setup = statistics.median((t[4] - t[3]) / 1000 for t in ts)
        marks = []
        for k in (8, 9, 10):
            after = [(t[k] - (t[5] if t[5] is not None else t[4])) / 1000 for t in ts if t[k] is not None]
            marks.append(f"{statistics.median(after):.2f}" if after else "-")
        print(f"{name[:60]:60} {len(ts):6} {body:8.2f} {statistics.median(wait) if wait else 0:8.2f} {setup:9.2f}  {' '.join(marks)}")
    launches = {}
    for t in last:
        launches.setdefault(t[0], []).append(t)
    print(f"\n{'launch':>6} {'name':44} {'tasks':>5} {'first':>8} {'waited':>8} {'ended':>8} {'signal':>8} {'handoff':>8}")
    previous_signal = None
    handoffs = []
    for j in sorted(launches):
        ts = launches[j]
        first = min(t[4] for t in ts) - start
        waited = max((t[5] for t in ts if t[5] is not None), default=None)
        ended = max(t[6] for t in ts) - start
        signal = max(t[7] for t in ts) - start
        waited = None if waited is None else waited - start
        handoff = None if waited is None or previous_signal is None else waited - previous_signal
        if handoff is not None:
            handoffs.append(handoff)
        if j < shown:
            fmt = lambda v: "-" if v is None else f"{v / 1000:.2f}"
            print(f"{j:6} {ts[0][2][:44]:44} {len(ts):5} {fmt(first):>8} {fmt(waited):>8} {fmt(ended):>8} {fmt(signal):>8} {fmt(handoff):>8}")
        previous_signal = signal
    if handoffs:
        print(f"\nhand-off (launch before's last signal -> this launch's last grid wait returns): median "
              f"{statistics.median(handoffs) / 1000:.2f} us, sum {sum(handoffs) / 1000:.1f} us over {len(handoffs)} launches")
    # The step's span split along its launches: each launch from the one before's last signal to its own
    # (its hand-off, its critical body: last wait returning -> last task ending, and ending -> signal),
    # summed by kernel.
    parts = {}
    previous_signal = None
    for j in sorted(launches):
        ts = launches[j]
        waited = max((t[5] for t in ts if t[5] is not None), default=None)
        body_from = waited if waited is not None else min(t[4] for t in ts)
        ended, signal = max(t[6] for t in ts), max(t[7] for t in ts)
        span = signal - (previous_signal if previous_signal is not None else start)
        handoff = body_from - (previous_signal if previous_signal is not None else start)
        p = parts.setdefault(ts[0][2], [0, 0.0, 0.0, 0.0, 0.0])
        p[0] += 1
        p[1] += span / 1000
        p[2] += max(handoff, 0) / 1000
        p[3] += max(ended - body_from, 0) / 1000
        p[4] += (signal - ended) / 1000
        previous_signal = signal
    print(f"\n{'kernel':60} {'launches':>8} {'span us':>8} {'handoff':>8} {'body':>8} {'signal':>8}")
    for name, (n, span, handoff, body, signal) in sorted(parts.items(), key=lambda kv: -kv[1][1]):
        print(f"{name[:60]:60} {n:8} {span:8.1f} {handoff:8.1f} {body:8.1f} {signal:8.1f}")
    phases(by_name)


# A task's phases, from one stamp to the next written (index into the stamps: setup 3, body 4, grid wait 5,
# body end 6, signal 7, marks 8 .. 10), in the order they happen.
PHASES = [("setup", 3), ("body", 4), ("wait", 5), ("mark0", 8), ("mark1", 9), ("mark2", 10), ("end", 6), ("signal", 7)]


def phases(by_name):
    """Per kernel, each phase's time (from the stamp before that the task wrote) as 10th percentile / median /
    90th percentile in us: what a task spends before its wait, after it, inside the kernel's marks, after
    its last mark, and signalling."""
    print(f"\nper task, us from the stamp before (p10 / median / p90; '-' where no task wrote the stamp)")
    for name, ts in sorted(by_name.items(), key=lambda kv: -len(kv[1])):
        cells = []
        for label, k in PHASES[1:]:
            spans = []
            for t in ts:
                if t[k] is None:
                    continue
                before = max((t[j] for _, j in PHASES[: PHASES.index((label, k))] if t[j] is not None), default=None)
                if before is not None:
                    spans.append((t[k] - before) / 1000)
            if spans:
                spans.sort()
                pick = lambda q: spans[min(len(spans) - 1, int(q * len(spans)))]
                cells.append(f"{label} {pick(0.1):.2f}/{statistics.median(spans):.2f}/{pick(0.9):.2f}")
        print(f"  {name[:60]}: " + ", ".join(cells))


if __name__ == "__main__":
    main()
