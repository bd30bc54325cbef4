#!/usr/bin/env python3
"""Bad-input and smoke tests of the gift-fidelity command line.

Every bad input must give exit status 2 and exactly one stderr line that
starts with "gift-fidelity: error: " and names the problem; nothing may
crash. Files are written with the standard library only (struct), so the
test needs no numpy.

Usage: gift_fidelity_cli_test.py --bin path/to/gift-fidelity
"""
import argparse
import json
import os
import random
import struct
import subprocess
import sys
import tempfile


def npy_bytes(shape, values, descr="<f4", fortran=False, version=1):
    shape_text = "(" + ", ".join(str(s) for s in shape) + \
        ("," if len(shape) == 1 else "") + ")"
    header = "{'descr': '%s', 'fortran_order': %s, 'shape': %s, }" % (
        descr, "True" if fortran else "False", shape_text)
    len_bytes = 2 if version == 1 else 4
    total = 8 + len_bytes + len(header) + 1
    header += " " * ((64 - total % 64) % 64) + "\n"
    fmt = "<H" if version == 1 else "<I"
    out = b"\x93NUMPY" + bytes([version, 0]) + struct.pack(fmt, len(header))
    out += header.encode("latin1")
    code = {"<f4": "<%df", "<f8": "<%dd", ">f4": ">%df"}[descr]
    return out + struct.pack(code % len(values), *values)


class Case:
    def __init__(self, tmp):
        self.tmp = tmp
        self.rng = random.Random(7)

    def write(self, name, data):
        path = os.path.join(self.tmp, name)
        with open(path, "wb") as f:
            f.write(data)
        return path

    def matrix(self, name, rows, cols, **kw):
        vals = [self.rng.gauss(0, 1) for _ in range(rows * cols)]
        return self.write(name, npy_bytes((rows, cols), vals, **kw))

    def psd(self, name, d, rows=64):
        x = [[self.rng.gauss(0, 1) * (1 + 3 * (j % 3)) for j in range(d)]
             for _ in range(rows)]
        a = [sum(x[r][i] * x[r][j] for r in range(rows)) / rows
             for i in range(d) for j in range(d)]
        # Exactly symmetric in float32.
        for i in range(d):
            for j in range(i):
                a[i * d + j] = a[j * d + i]
        return self.write(name, npy_bytes((d, d), a))


def run(binary, args, timeout=120):
    """A run past `timeout` seconds reads as exit -1 with a note on stderr
    (a reader blocked on a FIFO or reading /dev/zero without end)."""
    try:
        p = subprocess.run([binary] + args, capture_output=True, text=True,
                           timeout=timeout)
    except subprocess.TimeoutExpired:
        return -1, "", "timed out after %d s\n" % timeout
    return p.returncode, p.stdout, p.stderr


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--bin", required=True)
    opts = ap.parse_args()
    failures = []

    with tempfile.TemporaryDirectory() as tmp:
        c = Case(tmp)
        d_out, d_in = 24, 48
        w = c.matrix("w.npy", d_out, d_in)
        a = c.psd("a.npy", d_in)
        g = c.psd("g.npy", d_out)
        x = c.matrix("x.npy", 100, d_in)
        gw = c.write("gw.npy", npy_bytes(
            (2, 3, d_out, d_in),
            [c.rng.gauss(0, 1) for _ in range(6 * d_out * d_in)]))
        good = open(w, "rb").read()
        fifo = os.path.join(tmp, "fifo.npy")
        os.mkfifo(fifo)
        huge = c.write("huge.npy", good[:128])
        os.truncate(huge, (8 << 30) + 1)  # sparse: no disk used
        nan_vals = [1.0] * (d_out * d_in)
        nan_vals[1 * d_in + 2] = float("nan")
        inf_a = [0.0] * (d_in * d_in)
        inf_a[5] = float("inf")
        not_psd = [0.0] * (d_in * d_in)
        for i in range(d_in):
            not_psd[i * d_in + i] = 1.0 if i else -1.0
        asym = [0.0] * (d_in * d_in)
        for i in range(d_in):
            asym[i * d_in + i] = 1.0
        asym[1] = 0.5

        bad = [
            ("bad magic", ["--grad", c.write("text.npy", b"hello world\n")],
             "bad magic"),
            ("truncated data", ["--grad", c.write("trunc.npy", good[:-7])],
             "truncated data"),
            ("truncated header", ["--grad", c.write("th.npy", good[:30])],
             "truncated .npy header"),
            ("wrong dtype", ["--grad", c.write("f8.npy", npy_bytes(
                (d_out, d_in), [0.0] * (d_out * d_in), descr="<f8"))],
             "dtype '<f8'"),
            ("big endian", ["--grad", c.write("be.npy", npy_bytes(
                (2, 2), [0.0] * 4, descr=">f4"))], "dtype '>f4'"),
            ("fortran order", ["--grad", c.write("fo.npy", npy_bytes(
                (2, 2), [0.0] * 4, fortran=True))], "Fortran"),
            ("wrong rank", ["--grad", c.write("r3.npy", npy_bytes(
                (2, 2, 2), [0.0] * 8))], "expected [d_out, d_in]"),
            ("worker rank", ["--grad-workers", w],
             "expected [R, d_out, d_in]"),
            ("A shape", ["--grad", w, "--a", g], "does not match d_in = 48"),
            ("G shape", ["--grad", w, "--g", a],
             "does not match d_out = 24"),
            ("X shape", ["--grad", w, "--acts", c.matrix("x2.npy", 10, 7)],
             "does not match d_in = 48"),
            ("NaN in W", ["--grad", c.write("nan.npy", npy_bytes(
                (d_out, d_in), nan_vals))], "nan.npy: non-finite value nan "
             "at index [1, 2]"),
            ("Inf in A", ["--grad", w, "--a", c.write("infa.npy", npy_bytes(
                (d_in, d_in), inf_a))], "infa.npy: non-finite value inf at "
             "index [0, 5]"),
            ("A not PSD", ["--grad", w, "--a", c.write("npsd.npy", npy_bytes(
                (d_in, d_in), not_psd))], "not symmetric positive"),
            ("A not symmetric", ["--grad", w, "--a", c.write(
                "asym.npy", npy_bytes((d_in, d_in), asym))],
             "not symmetric positive"),
            ("unknown flag", ["--grad", w, "--frobnicate"], "unknown flag"),
            ("positional", ["--grad", w, "extra"], "unexpected argument"),
            ("missing value", ["--grad"], "--grad needs a value"),
            ("repeated flag", ["--grad", w, "--grad", w], "given twice"),
            ("unknown method", ["--grad", w, "--methods", "euclid,magic"],
             "unknown method 'magic'"),
            ("bad beta", ["--grad", w, "--a", a, "--methods",
                          "lowrankA_32:-1"], "unknown method"),
            ("missing A", ["--grad", w, "--methods", "diagA"],
             "needs the activation moment"),
            ("missing X", ["--grad", w, "--a", a, "--methods",
                           "nystromA_8"], "needs the activations"),
            ("missing G", ["--grad", w, "--methods", "outG_chol"],
             "needs the output moment"),
            ("rank too big", ["--grad", w, "--a", a, "--methods",
                              "lowrankA_64"], "exceeds d_in"),
            ("missing file", ["--grad", os.path.join(tmp, "nope.npy")],
             "cannot open"),
            ("no gradient", ["--a", a], "exactly one of --grad"),
            ("both gradients", ["--grad", w, "--grad-workers", gw],
             "exactly one of --grad"),
            ("bad format", ["--grad", w, "--format", "e3m4"], "e3m4"),
            # Not regular files: refused before any read (issue 13: an
            # endless read, a read blocked forever, "out of memory").
            ("endless device", ["--grad", "/dev/zero"],
             "/dev/zero: not a regular file"),
            ("FIFO", ["--grad", fifo], "fifo.npy: not a regular file"),
            ("directory", ["--grad", tmp], tmp + ": not a regular file"),
            ("FIFO as A", ["--grad", w, "--a", fifo],
             "fifo.npy: not a regular file"),
            ("too large", ["--grad", huge],
             "huge.npy: 8589934593 bytes, more than the 8589934592 "
             "allowed"),
        ]
        for name, args, want in bad:
            code, out, err = run(opts.bin, args, timeout=30)
            lines = err.splitlines()
            if code != 2 or len(lines) != 1 or \
                    not lines[0].startswith("gift-fidelity: error: ") or \
                    want not in lines[0] or out:
                failures.append("%s: exit %d, stderr %r (want %r)" %
                                (name, code, err, want))

        # --help documents every method and flag.
        code, out, err = run(opts.bin, ["--help"])
        for word in ["--grad-workers", "--acts", "--format", "--json",
                     "euclid_block", "diagA", "fullA_chol", "fullA_sym",
                     "blockA_", "lowrankA_", "nystromA_", "outG_chol",
                     "kfac_chol", "20260101"]:
            if code != 0 or word not in out:
                failures.append("--help: exit %d, missing %r" % (code, word))

        # A good run: every default method, JSON in the order given,
        # plausible figures.
        code, out, err = run(opts.bin, ["--grad", w, "--a", a, "--g", g,
                                        "--acts", x, "--json"])
        want = ["euclid", "euclid_block512", "diagA", "fullA_chol",
                "fullA_sym", "fullA_sym:0.3", "blockA_64", "lowrankA_32",
                "lowrankA_32:1.0", "nystromA_32", "nystromA_32:1.0",
                "outG_chol", "kfac_chol"]
        if code != 0:
            failures.append("good run: exit %d, %r" % (code, err))
        else:
            doc = json.loads(out)
            if list(doc["methods"]) != want or doc["d_out"] != d_out or \
                    doc["d_in"] != d_in or doc["format"] != "e4m3":
                failures.append("good run: bad JSON %r" % out[:200])
            for k, v in doc["methods"].items():
                if not (0 < v["rel_l2"] < 0.2 and 0.98 < v["cos"] <= 1 and
                        v["max_err"] > 0 and v["mse"] > 0):
                    failures.append("good run: %s implausible %r" % (k, v))
        code, out, err = run(opts.bin, ["--grad", w, "--json", "--methods",
                                        "euclid_block8,euclid"])
        if code != 0 or list(json.loads(out)["methods"]) != [
                "euclid_block8", "euclid"]:
            failures.append("order: exit %d, %r %r" % (code, out, err))
        code, out, err = run(opts.bin, ["--grad-workers", gw, "--acts", x,
                                        "--json", "--format", "e5m2"])
        if code != 0:
            failures.append("worker run: exit %d, %r" % (code, err))
        else:
            doc = json.loads(out)
            if doc["mode"] != "workers" or doc["workers"] != 3 or \
                    doc["steps"] != 2 or \
                    list(doc["methods"]) != ["euclid", "lowrankA_32:1.0"] or \
                    len(doc["methods"]["euclid"]["ef"]) != 2:
                failures.append("worker run: bad JSON %r" % out[:300])
        code, out, err = run(opts.bin, ["--grad", w])
        if code != 0 or "euclid_block512" not in out or "rel_l2" not in out:
            failures.append("table run: exit %d, %r %r" % (code, out, err))

    for f in failures:
        print("FAIL", f)
    print("%d failure(s)" % len(failures))
    return 1 if failures else 0


if __name__ == "__main__":
    sys.exit(main())
