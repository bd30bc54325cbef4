#!/usr/bin/env python3
"""The format study of issue 27: does plain low-precision gradient
communication lose against FP32, and does GIFT close the gap?

The demo's model (examples/tiny_llama.py through train_tiny_llama.py) on
--nproc CPU ranks, every configuration with the same seeds (a seed fixes
the initialisation and the batches, so runs of one seed are paired):

  fp32                  PyTorch DDP, FP32 (the reference)
  euclid-FMT-ef-off     libgift, every layer Euclidean in FMT, no error
  euclid-FMT-ef-on      feedback / with Euclidean error feedback
  gift-FMT              GIFT beside a giftd (one per run), job format FMT,
                        error feedback auto (on at 4 bits)
  for FMT in e4m3, nvfp4, mxfp4.

Per configuration: the held-out loss on a fixed held-out set (--eval-rows
rows, the same for every run), mean ± sd over seeds; the paired
differences against fp32 by seed, mean ± sd; bytes per step (gradient and
control, without the audit's) and their ratio to an FP32 ring allreduce;
the audited per-step RelL2 (every --audit-interval steps) and the drift
(train_tiny_llama.py --drift-window) of the whole model and of the
protected layers (those the GIFT run of the same format and seed put on
the GIFT path; compared on the audit steps it had them there).
A difference is called one only outside the seed noise: |mean paired
difference| > 2 · sd / sqrt(n) (the rule is printed with the table).

Writes format_study.json, format_study.md and format_study.png (matplotlib)
under --out; every finished run is cached there (keyed, as demo.py keys
its runs, by its settings and code), so an interrupted study resumes.
Not part of `make test` (hours on a small machine).

    nice -n 10 python3 bench/python/format_study.py --build build \\
        --configs fp32,euclid-nvfp4-ef-off,euclid-nvfp4-ef-on --seeds 0,1,2

GIFT configurations need giftd to take the job's format at registration.
"""

import argparse
import hashlib
import json
import math
import os
import shutil
import sys
import tempfile
import time

HERE = os.path.dirname(os.path.abspath(__file__))
EXAMPLES = os.path.join(HERE, "..", "..", "examples")
sys.path.insert(0, os.path.abspath(EXAMPLES))
import demo  # noqa: E402  -- its launcher, giftd, cache keys and figures

FORMATS = ("e4m3", "nvfp4", "mxfp4")
CONFIGS = ("fp32",) + tuple(
    c for f in FORMATS
    for c in (f"euclid-{f}-ef-off", f"euclid-{f}-ef-on", f"gift-{f}"))
# Model presets: the demo's, and larger ones; ffn a multiple of 32 so that
# every layer takes every 4-bit format.
SIZES = {"demo": (128, 4, 4, 352), "medium": (192, 6, 6, 512),
         "large": (256, 8, 8, 704)}
RULE = ("a difference is called one only when |mean paired difference| > "
        "2 sd / sqrt(n) over the n seeds (with 3 seeds a loose screen: "
        "two-sided p ~ 0.18 under a t distribution with 2 degrees of "
        "freedom)")


def parse_args(argv=None):
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--build", default="build")
    p.add_argument("--out", default=None, help="default BUILD/format_study")
    p.add_argument("--configs", default=",".join(CONFIGS),
                   help=f"comma-separated subset of {', '.join(CONFIGS)}")
    p.add_argument("--seeds", default="0,1,2")
    p.add_argument("--steps", type=int, default=250)
    p.add_argument("--nproc", type=int, default=4)
    p.add_argument("--model-size", choices=sorted(SIZES), default="demo",
                   help="dim/layers/heads/ffn preset: demo = 128/4/4/352")
    p.add_argument("--dim", type=int, default=0)
    p.add_argument("--layers", type=int, default=0)
    p.add_argument("--heads", type=int, default=0)
    p.add_argument("--ffn", type=int, default=0)
    p.add_argument("--batch", type=int, default=8, help="sequences per rank")
    p.add_argument("--seq-len", type=int, default=64)
    p.add_argument("--lr", type=float, default=3e-3)
    p.add_argument("--schedule", choices=("constant", "cosine"),
                   default="constant", help="train_tiny_llama.py --schedule")
    p.add_argument("--corpus", default="",
                   help="training text directory (train_tiny_llama.py "
                   "--corpus); default the example's license texts")
    p.add_argument("--eval-rows", type=int, default=512)
    p.add_argument("--audit-interval", type=int, default=10)
    p.add_argument("--window", type=int, default=50, help="drift window")
    p.add_argument("--report-only", action="store_true",
                   help="the report of the cached runs; trains nothing")
    p.add_argument("--giftd-flag", action="append", default=[],
                   help="a flag for the GIFT runs' giftd (repeatable; "
                   "keyed into the runs' cache), e.g. --giftd-flag="
                   "--sketch-stride=1")
    p.add_argument("--pool", default="",
                   help="comma-separated format_study.json files of earlier "
                   "studies of the same setting: their held-out losses of "
                   "the seeds this study did not run join the paired "
                   "comparisons (this study's own runs win on a seed both "
                   "have; the report lists such overlaps)")
    args = p.parse_args(argv)
    args.configs = [c.strip() for c in args.configs.split(",") if c.strip()]
    bad = [c for c in args.configs if c not in CONFIGS]
    if bad or not args.configs:
        p.error(f"unknown configuration(s) {', '.join(bad) or '(none)'}; "
                f"choose from {', '.join(CONFIGS)}")
    try:
        args.seeds = sorted({int(s) for s in args.seeds.split(",")})
    except ValueError:
        p.error(f"--seeds {args.seeds!r}: comma-separated integers")
    if args.steps < 1 or args.nproc < 1 or args.eval_rows < 1:
        p.error("--steps, --nproc and --eval-rows must be >= 1")
    args.pool = [f.strip() for f in args.pool.split(",") if f.strip()]
    for f in args.pool:
        if not os.path.isfile(f):
            p.error(f"--pool {f}: no such file")
    size = SIZES[args.model_size]
    for i, k in enumerate(("dim", "layers", "heads", "ffn")):
        if not getattr(args, k):
            setattr(args, k, size[i])
    return args


def train_args(args, config, seed):
    """train_tiny_llama.py's arguments of one run (also its cache key)."""
    a = ["--seed", str(seed), "--dim", str(args.dim), "--layers",
         str(args.layers), "--heads", str(args.heads), "--ffn", str(args.ffn),
         "--batch", str(args.batch), "--seq-len", str(args.seq_len), "--lr",
         str(args.lr), "--eval-rows", str(args.eval_rows), "--eval-every",
         "0", "--progress", "none"]
    if args.corpus:
        a += ["--corpus", os.path.realpath(args.corpus)]
    if args.schedule != "constant":
        a += ["--schedule", args.schedule]
    if config == "fp32":
        return "ddp", a
    kind, fmt = config.split("-")[:2]
    a += ["--format", fmt, "--audit-interval", str(args.audit_interval),
          "--drift-window", str(args.window)]
    if kind == "euclid":
        a += ["--error-feedback", config.rsplit("-", 1)[1]]
    return kind, a


def file_hash(path):
    h = hashlib.sha256()
    with open(path, "rb") as f:
        for block in iter(lambda: f.read(1 << 20), b""):
            h.update(block)
    return h.hexdigest()[:16]


def cache_key(args, config, seed):
    """The run's cache key: demo.py's (the example's code, nproc, steps and,
    but for its DDP reference, the arguments and the built package) with
    every argument, the DDP reference's too, and giftd's binary."""
    mode, extra = train_args(args, config, seed)
    package = None if mode == "ddp" else os.path.join(args.pkg, "gift")
    keyed = list(extra)
    if mode == "gift":
        keyed.append(file_hash(args.giftd_path))
        keyed += args.giftd_flag
    return demo.run_key(args, mode, keyed, package)


def run_one(args, config, seed, env, n, total):
    """Trains (config, seed) unless cached; its (log, summary, seconds)."""
    mode, extra = train_args(args, config, seed)
    key = cache_key(args, config, seed)
    base = os.path.join(args.out, "runs", f"{config}-s{seed}-{key}")
    log, summary, timing = base + ".jsonl", base + ".json", base + ".time"
    label = f"[{n}/{total}] {config} seed {seed}"
    if os.path.exists(summary):
        seconds = float(open(timing).read()) if os.path.exists(timing) else 0
        print(f"study: {label}: cached ({summary})", flush=True)
        return log, summary, seconds
    if args.report_only:
        print(f"study: {label}: not run yet (--report-only)", flush=True)
        return None
    print(f"study: {label}: training {args.steps} steps on {args.nproc} "
          "ranks", flush=True)
    start = time.monotonic()
    run_dir = tempfile.mkdtemp(prefix="gift-study-")
    daemon = None
    try:
        flags = ["--label", f"{config}/s{seed}"]
        if mode == "gift":
            daemon = demo.Giftd(args.giftd_path, args.ctl, run_dir,
                                [f"--audit-interval={args.audit_interval}",
                                 "--beta=auto", *args.giftd_flag],
                                private=True)
            flags += ["--agent-socket", daemon.socket, "--job-id",
                      f"study-{config}-{seed}"]
        elif mode == "euclid":  # no giftd: a socket nobody serves
            flags += ["--agent-socket", os.path.join(run_dir, "none.sock")]
        demo.run_training(args, mode, log + ".tmp", summary + ".tmp", env,
                          [*extra, *flags])
    finally:
        if daemon is not None:
            daemon.stop()
            shutil.copy(daemon.log_path, base + ".giftd.log")
        shutil.rmtree(run_dir, ignore_errors=True)
    seconds = time.monotonic() - start
    os.replace(log + ".tmp", log)
    with open(timing, "w") as f:
        f.write(f"{seconds:.1f}\n")
    os.replace(summary + ".tmp", summary)
    print(f"study: {label}: done in {seconds:.0f} s, held-out loss "
          f"{json.load(open(summary))['val_loss']:.4f}", flush=True)
    return log, summary, seconds


# ---- the figures of one run -------------------------------------------------

def run_figures(log, summary, seconds):
    """What the report needs of one run."""
    g = summary.get("gift")
    steps = summary["steps"]
    if g:
        sent = g["bytes_euclid"] + g["bytes_gift"] + g["bytes_control"]
        fp32 = g["bytes_fp32_equivalent"]
    else:  # PyTorch's FP32 ring allreduce: 2 (W - 1) / W of the payload
        w = summary["world_size"]
        sent = fp32 = steps * 2 * (w - 1) * summary["parameters"] * 4 // w
    aud = demo.audits(log)
    spans = demo.spans_of(summary)
    windows = demo.windows_of(spans)
    whole = (windows[0][0], windows[-1][1]) if windows else None
    return {
        "val_loss": summary["val_loss"],
        "train_loss_last25": demo.mean([r["loss"] for r in log[-25:]]),
        "bytes_per_step": sent / steps, "bytes_vs_fp32": sent / fp32,
        "seconds": seconds, "seconds_per_step": seconds / steps,
        "format_fallbacks": list(g["format_fallbacks"]) if g and
        "format_fallbacks" in g else [],
        # Layers per wire format in the last step (a GIFT run: giftd's).
        "formats": wire_formats(g),
        "audit": {s: {n: {k: l[k] for k in ("path", "rel_l2", "norm",
                                            "numel")}
                      for n, l in layers.items()} for s, layers in
                  aud.items()},
        "rel_model": demo.mean([demo.model_rel(layers)[0]
                                for layers in aud.values()]),
        "drift_model": spans.get(whole, {}).get("model") if whole else None,
        "drift_layers": spans.get(whole, {}).get("layers", {})
        if whole else {},
        "window_drift_model": demo.mean([spans[w]["model"]
                                         for w in windows]),
    }


def wire_formats(g):
    """"nvfp4 x33, e4m3 x4": the layers per format of the last step's plan
    (stats()["layer_wire"]); "fp32" for PyTorch DDP."""
    if not g:
        return "fp32"
    count = {}
    for w in (g.get("layer_wire") or {}).values():
        count[w["format"]] = count.get(w["format"], 0) + 1
    return ", ".join(f"{f} x{n}" for f, n in sorted(
        count.items(), key=lambda kv: -kv[1])) or "?"


def protected_steps(gift_run):
    """layer -> audit steps on which the GIFT run had it on the GIFT path."""
    out = {}
    for s, layers in (gift_run or {}).get("audit", {}).items():
        for n, l in layers.items():
            if l["path"] == "gift":
                out.setdefault(n, []).append(s)
    return out


def protected_figures(run, steps_of):
    """The run's mean audited RelL2 of the protected layers on their GIFT
    steps, and their mean whole-run drift; None when nothing was protected
    or the run has no audits."""
    rel = [run["audit"][s][n]["rel_l2"] for n, ss in steps_of.items()
           for s in ss if n in run["audit"].get(s, {})]
    drift = [run["drift_layers"].get(n) for n in steps_of]
    drift = [d for d in drift if d is not None]
    return (sum(rel) / len(rel) if rel else None,
            sum(drift) / len(drift) if drift else None)


# ---- aggregation and the report ---------------------------------------------

def mean_sd(xs):
    xs = [x for x in xs if x is not None and math.isfinite(x)]
    if not xs:
        return None, None, 0
    m = sum(xs) / len(xs)
    sd = (math.sqrt(sum((x - m) ** 2 for x in xs) / (len(xs) - 1))
          if len(xs) > 1 else None)
    return m, sd, len(xs)


def significant(m, sd, n):
    """The study's rule: |mean| > 2 sd / sqrt(n) (needs n >= 2)."""
    if m is None or sd is None or n < 2:
        return None
    return abs(m) > 2 * sd / math.sqrt(n)


def aggregate(runs, seeds):
    """runs: {(config, seed): figures}; per configuration the statistics."""
    configs = sorted({c for c, _ in runs}, key=CONFIGS.index)
    out = {}
    for c in configs:
        rs = {s: runs[(c, s)] for s in seeds if (c, s) in runs}
        gift_of = {s: runs.get((f"gift-{c.split('-')[1]}", s))
                   for s in rs} if c != "fp32" else {}
        prot = {s: protected_figures(r, protected_steps(gift_of.get(s)))
                for s, r in rs.items() if r.get("audit")}
        row = {"seeds": sorted(rs)}
        for k in ("val_loss", "train_loss_last25", "bytes_per_step",
                  "bytes_vs_fp32", "seconds", "seconds_per_step",
                  "rel_model", "drift_model", "window_drift_model"):
            row[k] = mean_sd([r[k] for r in rs.values()])[:2]
        row["val_loss_by_seed"] = {s: r["val_loss"] for s, r in rs.items()}
        row["rel_protected"] = mean_sd([p[0] for p in prot.values()])[:2]
        row["drift_protected"] = mean_sd([p[1] for p in prot.values()])[:2]
        fp32 = {s: runs[("fp32", s)]["val_loss"] for s in rs
                if c != "fp32" and ("fp32", s) in runs}
        row["diff_vs_fp32"] = paired(row["val_loss_by_seed"], fp32)
        row["format_fallbacks"] = sorted({x for r in rs.values()
                                          for x in r["format_fallbacks"]})
        row["formats"] = sorted({r.get("formats", "?") for r in rs.values()})
        out[c] = row
    return out


# The settings two studies must share for their seeds to be pooled.
POOL_SETTINGS = ("steps", "nproc", "dim", "layers", "heads", "ffn", "batch",
                 "seq_len", "lr", "schedule", "corpus", "eval_rows")


def load_pool(args):
    """{config: {seed: held-out loss}} of the --pool studies; exits with a
    clear error when a file is not a study of this setting."""
    out = {}
    for path in args.pool:
        try:
            with open(path) as f:
                study = json.load(f)
            settings, configs = study["settings"], study["configs"]
            theirs = {k: settings.get(k) for k in POOL_SETTINGS}
        except (OSError, ValueError, KeyError, TypeError, AttributeError) as e:
            sys.exit(f"study: --pool {path}: not a format_study.json ({e})")
        ours = {k: getattr(args, k) for k in POOL_SETTINGS}
        for d in (ours, theirs):  # a corpus path as train_args gives it
            d["corpus"] = os.path.realpath(d["corpus"]) if d["corpus"] else ""
        differ = [f"{k} {theirs[k]!r} (here {ours[k]!r})"
                  for k in POOL_SETTINGS if theirs[k] != ours[k]]
        if differ:
            sys.exit(f"study: --pool {path}: another setting: "
                     + ", ".join(differ))
        for c, row in configs.items():
            for seed, v in (row.get("val_loss_by_seed") or {}).items():
                out.setdefault(c, {}).setdefault(int(seed), v)
    return out


def pooled_losses(table, pool):
    """This study's held-out losses by configuration and seed, with the
    pooled studies' seeds it did not run; and the overlaps, (config, seed,
    here, pooled), which show how well a rerun reproduces a seed."""
    val = {c: dict(r["val_loss_by_seed"]) for c, r in table.items()}
    overlaps = []
    for c, seeds in pool.items():
        if c not in CONFIGS:
            continue
        for seed, v in sorted(seeds.items()):
            if seed in val.get(c, {}):
                overlaps.append((c, seed, val[c][seed], v))
            else:
                val.setdefault(c, {})[seed] = v
    return val, overlaps


def paired(a, b):
    """a - b over the seeds both have: mean, sd, n, the rule's verdict."""
    seeds = sorted(set(a) & set(b))
    diffs = [a[s] - b[s] for s in seeds]
    m, sd, n = mean_sd(diffs)
    return {"mean": m, "sd": sd, "n": n, "significant": significant(m, sd, n),
            "band": 2 * sd / math.sqrt(n) if sd is not None else None,
            "seeds": seeds, "by_seed": diffs}


def comparisons(val):
    """The paired comparisons the issue asks about, by held-out loss: every
    configuration against FP32; per format, error feedback's effect
    (Euclidean with against without) and GIFT's against its fair baseline
    (Euclidean with error feedback)."""
    pairs = [(c, "fp32") for c in CONFIGS if c != "fp32"]
    for f in FORMATS:
        pairs += [(f"euclid-{f}-ef-on", f"euclid-{f}-ef-off"),
                  (f"gift-{f}", f"euclid-{f}-ef-on")]
    return [{"a": a, "b": b, **paired(val[a], val[b])} for a, b in pairs
            if a in val and b in val and set(val[a]) & set(val[b])]


def comparisons_markdown(rows, pooled, val):
    lines = []
    if pooled:
        lines += ["", "Held-out loss over the pooled seeds (mean ± sd, "
                  "seeds): " + "; ".join(
                      f"{c} {pm(mean_sd(list(v.values()))[:2])} "
                      f"({len(v)})" for c, v in val.items())]
    lines += ["", "Paired comparisons of the held-out loss (a − b by seed"
              + (", pooled with " + ", ".join(pooled) if pooled else "")
              + "):", "",
             "| a − b | seeds | mean ± sd | band 2 sd/√n | outside noise | "
             "by seed |", "|---|---|---|---|---|---|"]
    for r in rows:
        sig = {None: "–", True: "**yes**", False: "no"}[r["significant"]]
        band = f"{r['band']:.4f}" if r["band"] is not None else "–"
        lines.append(
            f"| {r['a']} − {r['b']} | {r['n']} | "
            f"{pm((r['mean'], r['sd']), '+.4f')} | {band} | {sig} | "
            + ", ".join(f"{d:+.3f}" for d in r["by_seed"]) + " |")
    return lines


def pm(v, spec=".4f"):
    m, sd = v
    if m is None:
        return "–"
    return f"{m:{spec}}" + (f" ± {sd:{spec.lstrip('+')}}"
                            if sd is not None else "")


def markdown(args, table):
    lines = [
        f"Format study: tiny Llama dim {args.dim}, {args.layers} layers, "
        f"ffn {args.ffn}, {args.nproc} CPU ranks × {args.batch} sequences "
        f"of {args.seq_len}, {args.steps} steps, seeds "
        f"{','.join(map(str, args.seeds))}; held-out loss on "
        f"{args.eval_rows} fixed rows; audits every {args.audit_interval} "
        f"steps, drift over the whole run ({args.window}-step windows); "
        f"corpus {args.corpus or 'the license texts (default)'}; lr "
        f"{args.lr} ({args.schedule})"
        + (f"; giftd flags {' '.join(args.giftd_flag)}"
           if args.giftd_flag else "") + ".",
        "", f"Rule: {RULE}.", "",
        "| configuration | held-out loss | Δ vs FP32 (paired) | outside "
        "noise | bytes/step | vs FP32 | RelL2 model | RelL2 protected | "
        "drift model | drift protected | s/run | layers per format |",
        "|---|---|---|---|---|---|---|---|---|---|---|---|"]
    for c, r in table.items():
        d = r["diff_vs_fp32"]
        sig = {None: "–", True: "**yes**", False: "no"}[d["significant"]]
        lines.append(
            f"| {c} | {pm(r['val_loss'])} | "
            f"{pm((d['mean'], d['sd']), '+.4f') if c != 'fp32' else '–'} | "
            f"{sig} | {pm(r['bytes_per_step'], '.0f')} | "
            f"{pm(r['bytes_vs_fp32'], '.3f')} | {pm(r['rel_model'])} | "
            f"{pm(r['rel_protected'])} | {pm(r['drift_model'])} | "
            f"{pm(r['drift_protected'])} | {pm(r['seconds'], '.0f')} | "
            f"{'; '.join(r['formats'])} |")
    falls = {c: r["format_fallbacks"] for c, r in table.items()
             if r["format_fallbacks"]}
    if falls:
        lines += ["", "Layers that kept e4m3 (shape): " + "; ".join(
            f"{c}: {', '.join(v)}" for c, v in falls.items())]
    return "\n".join(lines) + "\n"


def write_figure(path, table, val, compared):
    """Held-out loss per seed (pooled seeds too), the paired Δ vs FP32
    (pooled, with the rule's band) and the bytes, per configuration."""
    try:
        import matplotlib  # noqa: PLC0415
    except ImportError:
        print("study: no matplotlib: no figure", flush=True)
        return None
    matplotlib.use("Agg")
    import matplotlib.pyplot as plt  # noqa: PLC0415
    names = [c for c in CONFIGS if c in val]
    vs_fp32 = {r["a"]: r for r in compared if r["b"] == "fp32"}
    within = [r for r in compared if r["b"] != "fp32"]
    fig, ax = plt.subplots(1, 4, figsize=(20, 5),
                           gridspec_kw={"width_ratios": [3, 3, 3, 2]})
    for i, c in enumerate(names):
        ys = list(val[c].values())
        ax[0].plot([i] * len(ys), ys, "o", color="grey", ms=4)
        m, sd, _ = mean_sd(ys)
        if m is not None:
            ax[0].errorbar(i, m, yerr=sd or 0, fmt="s", color="tab:red",
                           capsize=4)
        d = vs_fp32.get(c)
        if d and d["mean"] is not None:
            ax[1].plot([i] * len(d["by_seed"]), d["by_seed"], "o",
                       color="grey", ms=4)
            ax[1].errorbar(i, d["mean"], yerr=d["band"] or 0, fmt="s",
                           capsize=4, color="tab:red" if d["significant"]
                           else "tab:blue")
        m = table[c]["bytes_vs_fp32"][0] if c in table else None
        ax[2].bar(i, m or 0, color="tab:blue")
    for i, d in enumerate(within):
        ax[3].plot([i] * len(d["by_seed"]), d["by_seed"], "o", color="grey",
                   ms=4)
        ax[3].errorbar(i, d["mean"], yerr=d["band"] or 0, fmt="s", capsize=4,
                       color="tab:red" if d["significant"] else "tab:blue")
    for a in (ax[1], ax[3]):
        a.axhline(0, color="black", lw=0.6)
    for a, title, ticks in zip(
            ax, ("held-out loss (dots: seeds; mean ± sd)",
                 "paired Δ vs FP32 (bar: 2 sd/√n; red: outside)",
                 "bytes per step / FP32 ring",
                 "paired: EF − no EF, GIFT − EF"),
            (names, names, names,
             [r["a"].split("-")[1] + (": GIFT − EF" if r["a"].startswith(
                 "gift") else ": EF − no EF") for r in within])):
        a.set_xticks(range(len(ticks)))
        a.set_xticklabels(ticks, rotation=60, ha="right", fontsize=8)
        a.set_title(title, fontsize=10)
    fig.tight_layout()
    fig.savefig(path, dpi=100)
    plt.close(fig)
    return path


def report(args, runs):
    table = aggregate(runs, args.seeds)
    val, overlaps = pooled_losses(table, load_pool(args))
    compared = comparisons(val)
    md = markdown(args, table) + "\n".join(
        comparisons_markdown(compared, args.pool, val)) + "\n"
    if overlaps:
        md += ("\nSeeds run here and in a pooled study (here, pooled): "
               + "; ".join(f"{c} seed {s}: {a:.6f}, {b:.6f}"
                           for c, s, a, b in overlaps) + "\n")
    base = os.path.join(args.out, "format_study")
    with open(base + ".md", "w") as f:
        f.write(md)
    with open(base + ".json", "w") as f:
        json.dump(demo.jsonable({
            "settings": {k: v for k, v in vars(args).items()
                         if k not in ("pkg",)},
            "setting": md.split("\n", 1)[0], "rule": RULE,
            "configs": table, "comparisons": compared,
            "pooled_val_loss_by_seed": val if args.pool else None,
            "pool_overlaps": overlaps}), f, indent=1)
    png = write_figure(base + ".png", table, val, compared)
    print(md)
    print(f"study: wrote {base}.md, {base}.json" +
          (f", {png}" if png else ""), flush=True)
    return table


def main(argv=None):
    args = parse_args(argv)
    build = os.path.abspath(args.build)
    args.out = os.path.abspath(args.out or os.path.join(build,
                                                        "format_study"))
    os.makedirs(os.path.join(args.out, "runs"), exist_ok=True)
    args.pkg = os.path.join(build, "python")
    args.giftd_path = os.path.join(build, "daemon", "giftd")
    args.ctl = os.path.join(build, "tools", "giftctl", "giftctl")
    need = [os.path.join(args.pkg, "gift")]
    if any(c.startswith("gift-") for c in args.configs):
        need += [args.giftd_path, args.ctl]
    for f in need:
        if not os.path.exists(f):
            sys.exit(f"study: {f} is missing: build first")
    env = dict(os.environ, OMP_NUM_THREADS="1",
               PYTHONPATH=os.pathsep.join(
                   [args.pkg, os.environ.get("PYTHONPATH", "")]).rstrip(
                       os.pathsep))
    # fp32 first (the reference of every paired difference), then by seed.
    order = [(c, s) for s in args.seeds for c in args.configs]
    runs = {}
    for i, (c, s) in enumerate(order, 1):
        got = run_one(args, c, s, env, i, len(order))
        if got:
            log, summary, seconds = got
            runs[(c, s)] = run_figures(demo.read_log(log),
                                       json.load(open(summary)), seconds)
    report(args, runs)


if __name__ == "__main__":
    main()
