"""gift mode against a real giftd (started here on a temporary socket): the
ranks rendezvous through the daemon, attach, feed activation sketches from
the forward hooks; a layer pinned with giftctl gets factors and takes the
GIFT path on both ranks in the same steps, and parameters stay identical
across ranks; gift.init(format=...) is the job format giftd registers.
Skipped when giftd/giftctl were not given ($GIFTD, $GIFTCTL).
"""

import os
import subprocess
import time

import pytest
import torch
import torch.distributed as dist

import gift
import gift_testutil as u

PINNED = "2"  # the middle Linear (128 -> 64)
MAX_STEPS = 60


def _attached(sock, **init):
    """The test model in DDP with gift's hook (mode gift, `init` for
    gift.init), once its rank has attached to giftd: (ddp, state, opt)."""
    ddp = u.wrap(u.make_model())
    state = gift.init(ddp, mode="gift", agent_socket=sock, **init)
    ddp.register_comm_hook(state, gift.comm_hook)
    opt = torch.optim.SGD(ddp.parameters(), lr=0.05)
    deadline = time.monotonic() + 20
    while not state.stats()["attachment"]["attached"]:
        assert time.monotonic() < deadline, state.stats()["attachment"]
        time.sleep(0.02)
    return ddp, state, opt


def _worker(rank, sock, control):
    ddp, state, opt = _attached(sock, job_id="pytest", sketch_rows=64,
                                probe_interval=2)
    dist.barrier()
    if rank == 0:
        r = subprocess.run([os.environ["GIFTCTL"], "--address", control, "pin",
                            PINNED], capture_output=True, text=True, timeout=10)
        assert r.returncode == 0, r.stderr
    dist.barrier()
    gift_steps = 0
    for s in range(MAX_STEPS):
        u.train_step(ddp, opt, rank, s)
        u.assert_same_on_all_ranks(ddp)
        path = [l["path"] for l in state.last_telemetry["layers"]
                if l["name"] == PINNED][0]
        flag = torch.tensor([1 if path == "gift" else 0])
        both = [torch.zeros_like(flag) for _ in range(u.WORLD)]
        dist.all_gather(both, flag)
        assert both[0].item() == both[1].item(), "ranks took different paths"
        gift_steps += int(flag.item())
        if gift_steps >= 3:
            break
        time.sleep(0.02)  # let the daemon's refresher keep up
    att = state.stats()["attachment"]
    assert gift_steps >= 3, f"pinned layer never went GIFT: {att}"
    assert att["attached"] and att["factors_received"] > 0 \
        and att["windows_closed"] > 0, att
    state.remove_hooks()


@pytest.mark.skipif(not os.environ.get("GIFTD") or not os.environ.get("GIFTCTL"),
                    reason="GIFTD / GIFTCTL not set")
def test_pinned_layer_goes_gift():
    with u.giftd("--refresh-interval=4", "--rank=8",
                 "--probe-interval=2") as (_, sock, control):
        u.spawn(_worker, sock, control)


def _format_worker(rank, sock, control):
    ddp, state, opt = _attached(sock, job_id="pyfmt", format="mxfp4")
    for s in range(3):
        u.train_step(ddp, opt, rank, s)
        u.assert_same_on_all_ranks(ddp)
    dist.barrier()
    if rank == 0:
        # The rank told giftd the job's format when it registered: the
        # daemon's effective settings of every layer are mxfp4.
        layers = u.giftctl(control, "layers")["layers"]
        assert layers, "giftd lists no layer"
        for l in layers:
            assert "MXFP4" in str(l["settings"].get("format", "")).upper(), l
    assert {w["format"] for w in state.stats()["layer_wire"].values()} == {
        "mxfp4"}
    dist.barrier()
    state.remove_hooks()


@pytest.mark.skipif(not os.environ.get("GIFTD") or not os.environ.get("GIFTCTL"),
                    reason="GIFTD / GIFTCTL not set")
def test_job_format_reaches_giftd():
    with u.giftd() as (_, sock, control):
        u.spawn(_format_worker, sock, control)
