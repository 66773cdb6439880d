"""The GEMM algorithms two tuning caches chose, side by side (a bench experiment: tuning_diff.py DIR_A DIR_B)."""
import glob
import json
import sys


def entries(d):
    out = {}
    for f in glob.glob(f"{d}/ernie-image/tuning-*.json"):
        out.update(json.load(open(f)).get("entries", {}))
    return out


a, b = entries(sys.argv[1]), entries(sys.argv[2])
for k in sorted(set(a) | set(b)):
    ea, eb = a.get(k, {}), b.get(k, {})
    if "algo" not in ea and "algo" not in eb:
        continue
    same = "same" if ea.get("algo") == eb.get("algo") else "DIFFERENT"
    print(f"{k[:90]:90} {ea.get('us', -1):9.1f} us {eb.get('us', -1):9.1f} us  {same}")
