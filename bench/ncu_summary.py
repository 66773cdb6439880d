"""Sums an `ncu --csv --page raw --metrics gpu__time_duration.sum` log by kernel name (profile-stage.sh)."""
import csv
import sys
from collections import defaultdict

lines = open(sys.argv[1]).read().splitlines()
start = next(i for i, line in enumerate(lines) if line.startswith('"ID",'))  # the program's own output comes first
rows = [r for r in csv.reader(lines[start:]) if r]
head = 0
cols = rows[head]
name_i, t_i = cols.index("Kernel Name"), cols.index("gpu__time_duration.sum")
total, count = defaultdict(float), defaultdict(int)
for r in rows[head + 1:]:
    try:
        ns = float(r[t_i].replace(",", ""))  # ncu groups thousands
    except (ValueError, IndexError):
        continue  # the units row
    name = r[name_i].split("(")[0].replace("void ", "")[:90]
    total[name] += ns
    count[name] += 1
all_ns = sum(total.values())
print(f"kernels: {sum(count.values())}, GPU time {all_ns / 1e6:.2f} ms")
for name, ns in sorted(total.items(), key=lambda kv: -kv[1])[:40]:
    print(f"{ns / 1e6:9.3f} ms {100 * ns / all_ns:5.1f} % {count[name]:6d} x {ns / count[name] / 1e3:9.2f} us  {name}")
