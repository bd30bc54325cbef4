"""The main job (examples/train_tiny_llama.py), short: a tiny Llama on 2 gloo
ranks with a real giftd beside them.

* every step, the parameters are bitwise identical on both ranks;
* giftd selects layers by itself (measured gain, no pins) and refreshes
  their factors; both ranks take the GIFT path in the same steps;
* a checkpoint round trip (model, optimizer, GIFT state through torch.save)
  reproduces the next step bit for bit. giftd is stopped (SIGSTOP) around
  the round trip so that it cannot publish anything between the original
  step and its replay; after SIGCONT the restored ranks re-attach as
  resumed ranks (giftd resumes the restored GIFT layers) and go on above
  the restored epoch with factors giftd refreshes after the resume;
* the FP8 modes send <= 25.5% of the bytes the FP32 mode sends (measured).
Skipped without $GIFTD / $GIFTCTL.
"""

import faulthandler
import itertools
import json
import os
import re
import signal
import subprocess
import sys
import tempfile
import time

import pytest
import torch.distributed as dist

import gift_testutil as u
import train_tiny_llama as job

TINY = ["--dim", "64", "--layers", "2", "--heads", "2", "--seq-len", "32",
        "--batch", "4", "--sketch-rows", "64", "--probe-interval", "2",
        "--progress", "none"]
MAX_STEPS = 150
# Every rank dumps its threads' stacks and exits after this many seconds:
# a hung job fails with where it hung, before ctest's TIMEOUT kills it
# silently (tests/python/CMakeLists.txt gives this file 180 s).
HANG_DUMP_S = 150
T0 = time.monotonic()

needs_giftd = pytest.mark.skipif(
    not os.environ.get("GIFTD") or not os.environ.get("GIFTCTL"),
    reason="GIFTD / GIFTCTL not set")


def _log(tr, msg):
    """Progress on rank 0 (the test runs with -s: ctest keeps it and shows
    it when the test fails)."""
    if tr.rank == 0:
        print(f"[main_job +{time.monotonic() - T0:.1f}s step {tr.step}] {msg}",
              flush=True)


def _agreed_gift_layers(tr):
    """Layers on the GIFT path this step (the same on both ranks), with
    their factor versions."""
    mine = {l["name"]: l["factor_version"]
            for l in tr.gift.last_telemetry["layers"] if l["path"] == "gift"}
    both = [None] * dist.get_world_size()
    dist.all_gather_object(both, mine)
    assert all(b == mine for b in both), f"ranks took different paths: {both}"
    return mine


def _train_until_selected_and_refreshed(tr, control):
    """Trains until a layer took the GIFT path with two factor versions in
    turn (selected, then refreshed); returns those layers."""
    seen = {}  # layer -> factor versions it used on the GIFT path
    refreshed = []
    for i in range(MAX_STEPS):
        tr.train_step()
        job.assert_identical(tr.model, tr.step - 1)
        for name, v in _agreed_gift_layers(tr).items():
            seen.setdefault(name, set()).add(v)
        if i % 25 == 0:
            _log(tr, f"GIFT layers and factor versions so far: {seen}")
        refreshed = [n for n, vs in seen.items() if len(vs) >= 2]
        if refreshed:
            break
        time.sleep(0.01)  # let the daemon's refresher keep up
    assert refreshed, f"no layer was selected and refreshed in {MAX_STEPS} " \
        f"steps: {seen} {tr.gift.stats()['attachment']}"
    if tr.rank == 0:
        by_name = {l["name"]: l
                   for l in u.giftctl(control, "layers")["layers"]}
        for name in refreshed:
            # Nobody pinned it: the selector chose it (by measured gain; the
            # reason may have moved on since, the gain being live).
            l = by_name[name]
            assert l["settings"].get("pin", "PIN_AUTO") == "PIN_AUTO", l
            assert int(l.get("refreshes", 0)) >= 2, l
    return refreshed


def _until(tr, what, condition):
    """Trains (checking the ranks stay identical) until `condition()` holds
    on every rank, deciding together; fails with the attachment's state
    after a hang guard (not a timing assertion: 90 s, where this takes a
    few steps). Every rank calls `condition` every step, so it may run
    collectives (but none behind a short-circuit)."""
    deadline = time.monotonic() + 90
    for i in itertools.count():
        tr.train_step()
        job.assert_identical(tr.model, tr.step - 1)
        if u.all_true(condition()):
            _log(tr, what)
            return
        if i % 25 == 0:
            _log(tr, f"waiting for {what}: {tr.gift.stats()['attachment']}")
        # Decided together: one rank failing alone would leave the other in
        # the next collective.
        assert u.all_true(time.monotonic() < deadline), \
            f"no {what} in 90 s: {tr.gift.stats()['attachment']}"
        time.sleep(0.02)


def _resumed_layers(log_path, rank):
    """The layers giftd's log says `rank` resumed with (the newest such
    line), as a set."""
    pattern = re.compile(rf"rank {rank} resumed with \d+ GIFT layers \((.*)\)")
    found = None
    with open(log_path) as f:
        for line in f:
            m = pattern.search(line)
            if m:
                found = set(m.group(1).split(", "))
    assert found is not None, f"giftd logged no resume of rank {rank}"
    return found


def _worker(rank, giftd_pid, log_path, sock, control, ckpt):
    faulthandler.dump_traceback_later(HANG_DUMP_S - (time.monotonic() - T0),
                                      exit=True)
    args = job.parse_args(TINY + ["--mode", "gift", "--agent-socket", sock,
                                  "--job-id", "main-job-test"])
    tr = job.Trainer(args, rank, dist.get_world_size())
    refreshed = _train_until_selected_and_refreshed(tr, control)
    _log(tr, f"selected and refreshed: {refreshed}")

    # Freeze giftd: from here on nothing new reaches the ranks' shared memory.
    dist.barrier()
    if rank == 0:
        os.kill(giftd_pid, signal.SIGSTOP)
    dist.barrier()
    tr.train_step()  # takes whatever giftd published before the freeze
    tr.save(ckpt)
    gift_before = _agreed_gift_layers(tr)
    assert gift_before, "the checkpoint has no layer on the GIFT path"
    tr.train_step()
    original = job.assert_identical(tr.model, tr.step - 1)
    tr.load(ckpt)  # the GIFT state re-registers (giftd frozen: it retries)
    tr.train_step()
    replay = job.assert_identical(tr.model, tr.step - 1)
    assert replay == original, "the restored step differs from the original"
    _log(tr, f"the restored step replays the original; GIFT layers before "
         f"the save: {gift_before}")

    # giftd back: the restored ranks attach as resumed ranks. The count is
    # read while giftd is still frozen: read after SIGCONT it could already
    # include the re-attachment on one rank, which then waited for another
    # in vain.
    frozen = tr.gift.stats()["attachment"]
    attaches, restored_epoch = frozen["attaches"], frozen["current_epoch"]
    dist.barrier()
    if rank == 0:
        os.kill(giftd_pid, signal.SIGCONT)
    _until(tr, "both ranks re-attached",
           lambda: tr.gift.stats()["attachment"]["attaches"] > attaches)
    # Each rank told giftd which layers its checkpoint had on the GIFT path,
    # and giftd resumed them (they stay selected until a gain is measured:
    # selector_test's ResumedLayersStaySelectedUntilAGainIsMeasured; here the
    # gain is live, and the selector may move them within a few steps, so
    # the test reads giftd's account of the resume, not the path later).
    if rank == 0:
        for r in range(dist.get_world_size()):
            resumed = _resumed_layers(log_path, r)
            assert set(gift_before) <= resumed, (r, gift_before, resumed)
    # The job goes on above the restored epoch with factors giftd refreshes
    # after the resume: a layer takes the GIFT path with a factor newer than
    # any it held before the freeze.
    newest_before = max(gift_before.values())

    def refreshed_after_resume():
        versions = _agreed_gift_layers(tr).values()  # a collective: first
        epoch = tr.gift.stats()["attachment"]["current_epoch"]
        return epoch > restored_epoch and max(versions, default=-1) > \
            newest_before

    _until(tr, "the GIFT path with a factor refreshed after the resume",
           refreshed_after_resume)
    s = tr.gift.stats()
    sent = s["bytes_euclid"] + s["bytes_gift"] + s["bytes_control"]
    assert sent <= 0.255 * s["bytes_fp32_equivalent"], s
    tr.gift.remove_hooks()


@needs_giftd
def test_main_job_with_giftd():
    with tempfile.TemporaryDirectory() as d, \
            u.giftd("--refresh-interval=4", "--rank=8", "--probe-interval=2",
                    "--selection.window-steps=20",
                    # The plan pace from the start (no warm-up): one paced
                    # plan change per 20 steps at most. Urgent moves (audit
                    # removals, a negative gain) are not paced, so the
                    # restored GIFT layers need not stay on the path after
                    # the resume; _worker checks giftd's resume instead.
                    "--selection.warmup-steps=0",
                    "--selection.plan-interval-steps=20") as (p, sock,
                                                              control):
        u.spawn(_worker, p.pid, p.log_path, sock, control,
                os.path.join(d, "ckpt"))


def _run_example(mode, d, steps=6):
    summary = os.path.join(d, f"{mode}.json")
    r = subprocess.run(
        [sys.executable, job.__file__, "--nproc", "2", "--mode", mode,
         "--steps", str(steps), "--check-identical", "--summary", summary,
         "--agent-socket", os.path.join(d, "no-giftd.sock"), *TINY],
        capture_output=True, text=True, timeout=120)
    assert r.returncode == 0, r.stderr
    with open(summary) as f:
        s = json.load(f)
    assert s["identical_steps"] == steps
    g = s["gift"]
    return g["bytes_euclid"] + g["bytes_gift"] + g["bytes_control"]


def test_fp8_modes_send_a_quarter_of_fp32():
    with tempfile.TemporaryDirectory() as d:
        fp32 = _run_example("fp32", d)
        for mode in ("euclid", "gift"):  # gift without a daemon: Euclidean
            assert _run_example(mode, d) <= 0.255 * fp32, mode
