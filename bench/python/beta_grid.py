#!/usr/bin/python3
"""The β auto mode's grid (DESIGN §2) on the committed real gradients.

For every fc1/fc2 snapshot of tests/data/snap and every worker's gradient,
runs gift-fidelity's damped rank-32 low-rank transform (the run-time one)
with each β of the grid (0.3, 1, 3) and reports the one-step round-trip
RelL2 as a fraction of Euclidean E4M3, and which β a probe would keep (the
lowest mean over the workers). This is what giftd --beta=auto measures live
on probe steps; here the factor comes from the exact A.

  /usr/bin/python3 bench/python/beta_grid.py --bin build/tools/gift-fidelity
"""
import argparse
import glob
import json
import os
import subprocess
import sys
import tempfile

import numpy as np

GRID = (0.3, 1.0, 3.0)


def fidelity(exe, grad, a):
    methods = ",".join(["euclid"] + [f"lowrankA_32:{b:.1f}" for b in GRID])
    out = subprocess.run([exe, "--grad", grad, "--a", a, "--methods",
                          methods, "--json"], capture_output=True, text=True)
    if out.returncode != 0:
        sys.exit(f"gift-fidelity failed on {grad}: {out.stderr.strip()}")
    d = json.loads(out.stdout)
    rows = d["results"] if "results" in d else d["methods"]
    if isinstance(rows, dict):
        return {k: v["rel_l2"] for k, v in rows.items()}
    return {r["method"]: r["rel_l2"] for r in rows}


def main():
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("--bin", default="build/tools/gift-fidelity")
    p.add_argument("--data", default="tests/data/snap")
    args = p.parse_args()
    snaps = sorted({f[:-len(".grad.npy")] for f in
                    glob.glob(os.path.join(args.data, "*.grad.npy"))})
    if not snaps:
        sys.exit(f"no *.grad.npy under {args.data}")
    print(f"{'snapshot':28s} " + " ".join(f"β={b:<5g}" for b in GRID)
          + "  best (RelL2 / Euclidean, mean over workers)")
    picks = {}
    with tempfile.TemporaryDirectory() as tmp:
        for s in snaps:
            g = np.load(s + ".grad.npy")
            ratios = {b: [] for b in GRID}
            for w in range(g.shape[0]):
                path = os.path.join(tmp, "w.npy")
                np.save(path, np.ascontiguousarray(g[w], dtype="<f4"))
                m = fidelity(args.bin, path, s + ".A.npy")
                for b in GRID:
                    ratios[b].append(m[f"lowrankA_32:{b:.1f}"] / m["euclid"])
            mean = {b: float(np.mean(v)) for b, v in ratios.items()}
            best = min(mean, key=mean.get)
            picks[os.path.basename(s)] = best
            print(f"{os.path.basename(s):28s} "
                  + " ".join(f"{mean[b]:7.3f}" for b in GRID)
                  + f"  {best:g}")
    counts = {b: sum(1 for v in picks.values() if v == b) for b in GRID}
    print("best β: " + ", ".join(f"{b:g}: {n}" for b, n in counts.items()))


if __name__ == "__main__":
    main()
