"""state_dict round trip: k steps with GIFT (a factor and plan given by
hand, error feedback on), save, one more step -> P1; a fresh process group,
model and state restored from the save run the same step -> P1 bit for bit;
without the gift state the step differs (the residuals matter). Both with
DDP's small buckets whole and with pieces smaller than the buckets, reduced
while the backward pass runs (from the third step on: K = 4)."""

import pytest

import os
import tempfile

import torch

import gift
import gift_testutil as u

K = 4
GIFT_LAYER = "2"  # the middle Linear (128 -> 64) of the Sequential


def _state(ddp, piece_mb, load=None):
    state = gift.init(ddp, mode="gift", agent_socket="/nonexistent/agent",
                      probe_interval=2, piece_mb=piece_mb)
    if load is not None:
        state.load_state_dict(load)
    else:
        state.session.add_plan(1, [GIFT_LAYER])
        state.session.put_factor(GIFT_LAYER, u.lowrank_factor(128, 8, 1, 7))
    ddp.register_comm_hook(state, gift.comm_hook)
    return state


def _first(rank, folder, piece_mb):
    ddp = u.wrap(u.make_model())
    opt = torch.optim.SGD(ddp.parameters(), lr=0.1)
    state = _state(ddp, piece_mb)
    for s in range(K):
        u.train_step(ddp, opt, rank, s)
    paths = [l["path"] for l in state.last_telemetry["layers"]
             if l["name"] == GIFT_LAYER]
    assert paths == ["gift"], paths
    torch.save({"model": ddp.module.state_dict(), "opt": opt.state_dict(),
                "gift": state.state_dict()},
               os.path.join(folder, f"ckpt{rank}.pt"))
    u.train_step(ddp, opt, rank, K)
    torch.save(u.flat_params(ddp), os.path.join(folder, f"p1_{rank}.pt"))


def _resume(rank, folder, piece_mb, with_gift_state):
    ckpt = torch.load(os.path.join(folder, f"ckpt{rank}.pt"))
    model = u.make_model(seed=123)
    model.load_state_dict(ckpt["model"])
    ddp = u.wrap(model)
    opt = torch.optim.SGD(ddp.parameters(), lr=0.1)
    opt.load_state_dict(ckpt["opt"])
    _state(ddp, piece_mb, ckpt["gift"] if with_gift_state else None)
    u.train_step(ddp, opt, rank, K)
    p1 = torch.load(os.path.join(folder, f"p1_{rank}.pt"))
    same = torch.equal(u.flat_params(ddp), p1)
    assert same == with_gift_state, (
        f"with_gift_state={with_gift_state}: equal={same}")


@pytest.mark.parametrize("piece_mb", [4.0, 0.005])
def test_round_trip(piece_mb):
    with tempfile.TemporaryDirectory() as folder:
        u.spawn(_first, folder, piece_mb)
        u.spawn(_resume, folder, piece_mb, True)
        u.spawn(_resume, folder, piece_mb, False)
