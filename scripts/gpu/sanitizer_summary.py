#!/usr/bin/env python3
"""Reads compute-sanitizer's output on stdin; writes its first lines (and every line that is not part of an
error report) to the log named by argv[1], then each distinct error (kind, kernel, the accesses' source lines)
with how many times it was reported, so that a run that prints every hazard stays small. Used by
scripts/gpu/gpu-sanitize.sh."""
import re
import sys
from collections import Counter

KEEP_FIRST = 400
log = open(sys.argv[1], "w")
kinds = Counter()
current = None  # [kind, kernel-or-sites...]
n = 0
site = re.compile(r"(Read|Write|Access)[^@]*? at (.*?)\+0x[0-9a-f]+ in (\S+:\d+)")
for line in sys.stdin:
    n += 1
    body = line.removeprefix("========= ").rstrip("\n")
    if n <= KEEP_FIRST:
        log.write(line)
    m = re.match(r"\s*(Error|Warning): (.*?)( detected)? at ", body)
    if m:
        if current:
            kinds[tuple(current)] += 1
        current = [m.group(2)]
        continue
    s = site.search(body)
    if current is not None and s:
        # The function name with its template arguments says which config; drop lambda wrappers.
        fn = re.sub(r"::\[lambda.*", " (lambda)", s.group(2))
        current.append(f"{s.group(1)} {s.group(3)} {fn}")
        continue
    if current is not None and (body.strip() == "" or body.startswith("Saved host") or "Host Frame" in body
                                or "Current Value" in body or body.startswith("    ")):
        continue
    if current is not None:
        kinds[tuple(current)] += 1
        current = None
    if n > KEEP_FIRST:
        log.write(line)
if current:
    kinds[tuple(current)] += 1
log.write(f"\n== distinct reports ({sum(kinds.values())} in all)\n")
for key, count in kinds.most_common():
    log.write(f"{count:>9}  " + "\n           ".join(key) + "\n")
log.close()
