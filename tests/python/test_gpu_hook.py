"""The comm hook on a GPU (backend="nccl", one rank: NCCL refuses two ranks
on one device), label gpu; skipped without a CUDA device or a CUDA build
of gift (ctest reads pytest's "N skipped" line).

* no host synchronisation on the training path: from the third step on
  (after DDP's bucket rebuild) forward, backward and the optimizer step run
  under torch.cuda.set_sync_debug_mode("error"), which raises on any
  synchronising CUDA call made through torch (the hook, the communication
  thread's casts and copies, the futures);
* fp32 mode equals plain DDP bit for bit; euclid and bf16 parameters train
  to finite values with FP8 bytes;
* the same with pieces smaller than DDP's buckets (piece_mb 0.5 in DDP's
  25 MB bucket): from the fourth step on they are reduced on the side stream
  while the backward pass runs (CUDA events recorded when autograd has
  accumulated a gradient), still without a synchronising call.
"""

import tempfile

import pytest
import torch

if not torch.cuda.is_available():
    pytest.skip("no CUDA device (or a CPU-only torch)", allow_module_level=True)

import torch.distributed as dist  # noqa: E402
from torch import nn  # noqa: E402
from torch.nn.parallel import DistributedDataParallel as DDP  # noqa: E402

import gift  # noqa: E402

NOSOCK = "/nonexistent/agent"
STEPS = 6


def _model(dtype=torch.float32):
    torch.manual_seed(0)
    return nn.Sequential(nn.Linear(256, 1024), nn.GELU(), nn.Linear(1024, 1024),
                         nn.GELU(), nn.Linear(1024, 256)).cuda().to(dtype)


def _batch(step, dtype):
    g = torch.Generator(device="cuda").manual_seed(step)
    x = torch.randn(64, 256, device="cuda", generator=g, dtype=dtype)
    return x, torch.randn(64, 256, device="cuda", generator=g, dtype=dtype)


def _train(mode, dtype=torch.float32, strict=True, bucket_cap_mb=1,
           piece_mb=4.0):
    ddp = DDP(_model(dtype), device_ids=[0], bucket_cap_mb=bucket_cap_mb)
    state = None
    if mode != "ddp":
        try:
            state = gift.init(ddp, mode=mode, backend="nccl",
                              agent_socket=NOSOCK, piece_mb=piece_mb)
        except gift.GiftError as e:
            if "without CUDA" in e.message:
                pytest.skip("gift built without CUDA")
            raise
        ddp.register_comm_hook(state, gift.comm_hook)
    opt = torch.optim.SGD(ddp.parameters(), lr=0.01)
    for step in range(STEPS):
        x, y = _batch(step, dtype)
        checked = strict and step >= 2
        if checked:
            torch.cuda.set_sync_debug_mode("error")
        try:
            opt.zero_grad(set_to_none=True)
            nn.functional.mse_loss(ddp(x), y).backward()
            opt.step()
        finally:
            torch.cuda.set_sync_debug_mode("default")
    torch.cuda.synchronize()
    params = torch.cat([p.detach().float().reshape(-1) for p in ddp.parameters()])
    if state is not None:
        state.close()
    return params, state


@pytest.fixture(scope="module", autouse=True)
def one_rank_group():
    with tempfile.TemporaryDirectory() as d:
        torch.cuda.set_device(0)
        dist.init_process_group("nccl", init_method=f"file://{d}/init",
                                rank=0, world_size=1)
        yield
        dist.destroy_process_group()


def test_fp32_equals_ddp_and_no_sync_on_the_training_path():
    want, _ = _train("ddp", strict=False)
    got, state = _train("fp32")
    assert torch.equal(got, want)
    assert state.stats()["steps"] == STEPS


def test_pieces_inside_one_bucket_on_the_side_stream():
    want, _ = _train("ddp", strict=False, bucket_cap_mb=25)
    got, state = _train("fp32", bucket_cap_mb=25, piece_mb=0.5)
    assert torch.equal(got, want)
    assert state.stats()["steps"] == STEPS
    fp8, _ = _train("euclid", bucket_cap_mb=25, piece_mb=0.5)
    assert torch.isfinite(fp8).all()
    assert 0 < (fp8 - want).norm() < 1e-2 * want.norm()


def test_fp8_and_bf16_on_the_device():
    want, _ = _train("ddp", strict=False)
    got, state = _train("euclid")
    assert torch.isfinite(got).all()
    assert 0 < (got - want).norm() < 1e-2 * want.norm()
    got16, state16 = _train("euclid", torch.bfloat16)
    assert torch.isfinite(got16).all()
    assert state16.stats()["steps"] == STEPS


if __name__ == "__main__":
    raise SystemExit(pytest.main([__file__, "-q"]))
