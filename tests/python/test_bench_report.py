"""bench/python/multihost_bench.py's report code on made-up runs (the
bench itself needs network namespaces and minutes): the mode names, the
time to DDP FP32's loss and its table cells."""

import os
import sys

import pytest

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)),
                                "..", "..", "bench", "python"))
import multihost_bench as mb  # noqa: E402


def _run(losses, seconds, ranks=2, slow_rank_extra=0.0):
    """A rank-0 JSON: the ranks' mean loss per step, and per rank its
    steps (rank 1 slower by slow_rank_extra)."""
    return {"loss": list(losses), "ranks": [
        {"steps": [{"step": i, "seconds": s + r * slow_rank_extra,
                    "loss": x} for i, (s, x) in
                   enumerate(zip(seconds, losses))]} for r in range(ranks)]}


def test_powersgd_takes_a_rank_and_gift_modes_a_piece():
    a = mb.parse_args(["--build", "/tmp", "--modes",
                       "ddp,powersgd@1,powersgd,gift@0:nvfp4"])
    assert mb.label("powersgd@1") == "torch PowerSGD rank 1"
    assert mb.label("powersgd") == "torch PowerSGD rank 4"
    argv = mb.rank_argv(a, "powersgd@1", 0, 29500, "/tmp/x.json")
    assert argv[argv.index("--powersgd-rank") + 1] == "1"
    assert "--gift-piece-mb" not in argv
    argv = mb.rank_argv(a, "gift@0:nvfp4", 1, 29500, "/tmp/x.json")
    assert argv[argv.index("--gift-piece-mb") + 1] == "0"
    for bad in ("powersgd@0", "powersgd@x", "fp16@2", "ddp:nvfp4"):
        with pytest.raises(SystemExit):
            mb.parse_args(["--build", "/tmp", "--modes", bad])
    with pytest.raises(SystemExit):
        mb.parse_args(["--build", "/tmp", "--ttl-window", "0"])


def test_time_to_loss_interpolates_in_wall_time():
    # Trailing 1-step mean: the loss itself. Steps take 1 s on rank 0 and
    # 1.5 s on rank 1 (a step lasts as long as its slowest rank).
    run = _run([4.0, 3.0, 2.0, 1.0], [1.0] * 4, slow_rank_extra=0.5)
    assert mb.step_seconds(run) == [1.5] * 4
    # 2.5 is half-way through step 3 (index 2): 1.5 + 1.5 + 0.75 s.
    assert mb.time_to_loss(run, 2.5, 1) == pytest.approx((3.75, 2.5))
    assert mb.time_to_loss(run, 4.0, 1) == pytest.approx((1.5, 1.0))
    assert mb.time_to_loss(run, 0.5, 1) is None
    # A 2-step trailing mean: 4, 3.5, 2.5, 1.5.
    assert mb.trailing_mean(run["loss"], 2) == [4.0, 3.5, 2.5, 1.5]
    assert mb.time_to_loss(run, 2.5, 2) == pytest.approx((4.5, 3.0))


def test_the_target_is_ddps_loss_at_its_last_step():
    runs = {"ddp": [_run([4, 3, 2, 1], [2.0] * 4)] * 2,
            "fast": [_run([4, 1, 0.5, 0.5], [1.0] * 4),
                     _run([4, 3, 1, 0.5], [1.0] * 4)],
            "never": [_run([4, 3.5, 3, 2.5], [1.0] * 4)],
            "failed": [{"error": "rank 1 died"}]}
    summary = {m: {} for m in runs}
    mb.add_time_to_loss(summary, runs, 1)
    d, f = summary["ddp"]["time_to_ddp_loss"], summary["fast"][
        "time_to_ddp_loss"]
    assert d["target"] == 1 and d["seconds"] == pytest.approx(8.0)
    assert f["reached"] == 2 and f["seconds"] == pytest.approx(2.5)
    n = summary["never"]["time_to_ddp_loss"]
    assert n["seconds"] is None and n["final_loss_minus_ddp"] == 1.5
    assert summary["failed"]["time_to_ddp_loss"]["rounds"] == 0
    assert mb.ttl_cell(f) == "2.5 s (step 2.5)"
    assert mb.ttl_cell(n) == "not reached (+1.5000)"
    assert mb.ttl_ratio(f, d["seconds"]) == "0.31×"
    assert mb.ttl_cell(None) == "n/a"
    # No DDP run: no target, nothing added.
    summary = {"fast": {}}
    mb.add_time_to_loss(summary, {"fast": runs["fast"]}, 1)
    assert summary == {"fast": {}}
