"""Power draw and SM clock while the GPU was busy, per bench set (device-run.sh `bench` writes power.csv)."""
import sys
from collections import Counter

sets, cur = [], None
for line in open(sys.argv[1]):
    line = line.strip()
    if line.startswith("## "):
        cur = (line[3:], [])
        sets.append(cur)
        continue
    f = [x.strip() for x in line.split(",")]
    if cur is None or len(f) < 6:
        continue
    try:
        watts, limit, mhz = float(f[1].split()[0]), float(f[2].split()[0]), float(f[3].split()[0])
    except ValueError:
        continue
    cur[1].append((watts, limit, mhz, f[5]))
for name, rows in sets:
    busy = [r for r in rows if r[0] > 300]  # samples while kernels ran (idle draw is ~100 W)
    if not busy:
        print(f"{name}: no busy samples ({len(rows)} in all)")
        continue
    w = sorted(r[0] for r in busy)
    c = sorted(r[2] for r in busy)
    reasons = Counter(r[3] for r in busy).most_common(2)
    print(f"{name}: {len(busy)} busy samples, power median {w[len(w) // 2]:.0f} W (max {w[-1]:.0f}, limit "
          f"{busy[0][1]:.0f}), SM clock median {c[len(c) // 2]:.0f} MHz (min {c[0]:.0f}), event reasons {reasons}")
