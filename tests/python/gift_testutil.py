"""Shared pieces of the gift package tests: a tiny MLP, deterministic data
per (rank, step), a two-process gloo job, and parameter checks."""

import contextlib
import os
import signal
import subprocess
import sys
import tempfile
import time

import torch
import torch.distributed as dist
import torch.multiprocessing as mp
from torch import nn
from torch.nn.parallel import DistributedDataParallel as DDP

sys.path.insert(0, os.path.dirname(os.path.dirname(
    os.path.abspath(__file__))))
from free_port import free_port  # noqa: E402  (tests/free_port.py)

WORLD = 2
BATCH, D_IN, D_OUT = 48, 32, 16


def make_model(seed=0):
    torch.manual_seed(seed)
    return nn.Sequential(nn.Linear(D_IN, 128), nn.ReLU(), nn.Linear(128, 64),
                         nn.ReLU(), nn.Linear(64, D_OUT))


def batch(rank, step):
    g = torch.Generator().manual_seed(1000 * step + rank)
    x = torch.randn(BATCH, D_IN, generator=g)
    # Correlated inputs (a decaying spectrum), so whitening has structure.
    x = x * torch.pow(torch.tensor(0.85), torch.arange(D_IN).float())
    return x, torch.randn(BATCH, D_OUT, generator=g)


def train_step(ddp, opt, rank, step):
    x, y = batch(rank, step)
    opt.zero_grad()
    nn.functional.mse_loss(ddp(x), y).backward()
    opt.step()


def wrap(model):
    # Small buckets (the first one too, which DDP caps at 1 MiB by default):
    # after DDP's rebuild (iteration 1) the gradients come in several
    # buckets; iteration 0 has one.
    dist._DEFAULT_FIRST_BUCKET_BYTES = 8192
    return DDP(model, bucket_cap_mb=0.01)


def flat_params(model):
    return torch.cat([p.detach().reshape(-1) for p in model.parameters()])


def assert_same_on_all_ranks(model):
    mine = flat_params(model)
    all_ = [torch.empty_like(mine) for _ in range(dist.get_world_size())]
    dist.all_gather(all_, mine)
    for other in all_:
        assert torch.equal(other, mine), "parameters differ across ranks"


def all_true(flag):
    """True on every rank iff `flag` is true on every rank."""
    t = torch.tensor([1 if flag else 0])
    dist.all_reduce(t, op=dist.ReduceOp.MIN)
    return bool(t.item())


def _entry(rank, fn, init_file, args):
    dist.init_process_group("gloo", init_method=f"file://{init_file}",
                            rank=rank, world_size=WORLD)
    try:
        fn(rank, *args)
    finally:
        if dist.is_initialized():  # fn may have destroyed it itself
            dist.destroy_process_group()


def spawn(fn, *args):
    """Runs fn(rank, *args) in WORLD processes of a fresh gloo group."""
    with tempfile.TemporaryDirectory() as d:
        # fork: the children inherit the imported torch (a fresh interpreter
        # takes seconds to import it); the parent never starts CUDA or gloo.
        mp.start_processes(_entry, args=(fn, os.path.join(d, "init"), args),
                           nprocs=WORLD, join=True, start_method="fork")


def lowrank_factor(d_in, r, version, seed):
    """T = I + U diag(c) Uᵀ with orthonormal U, and its exact inverse."""
    g = torch.Generator().manual_seed(seed)
    u, _ = torch.linalg.qr(torch.randn(d_in, r, generator=g,
                                       dtype=torch.float64))
    c = torch.linspace(2.0, 0.5, r, dtype=torch.float64)
    return {"version": version, "kind": "low-rank", "d_in": d_in, "r": r,
            "u": u.float().numpy().reshape(-1), "c": c.float().numpy(),
            "c_inv": (-c / (1 + c)).float().numpy()}


def free_address():
    return f"127.0.0.1:{free_port()}"


@contextlib.contextmanager
def giftd(*flags):
    """A real giftd ($GIFTD) on a temporary socket and a free control port,
    fast polling; yields (process, agent socket, control address); the
    process's `log_path` names its log, which is printed when the body
    fails; SIGTERM (then SIGKILL) at the end."""
    with tempfile.TemporaryDirectory() as d:
        sock = os.path.join(d, "agent.sock")
        control = free_address()
        log_path = os.path.join(d, "giftd.log")
        log = open(log_path, "w")
        p = subprocess.Popen(
            [os.environ["GIFTD"], f"--agent-socket={sock}",
             f"--control-address={control}", "--metrics-address=",
             f"--shm-prefix=/giftpy-{os.getpid()}x", "--poll-interval-ms=10",
             "--heartbeat-interval-ms=50", "--refresh-threads=1", *flags],
            stdout=log, stderr=subprocess.STDOUT)
        p.log_path = log_path
        try:
            deadline = time.monotonic() + 20
            while not os.path.exists(sock):
                assert p.poll() is None and time.monotonic() < deadline, \
                    open(log_path).read()
                time.sleep(0.02)
            yield p, sock, control
        except BaseException:
            print(open(log_path).read())
            raise
        finally:
            if p.poll() is None:
                p.send_signal(signal.SIGCONT)  # a test may have stopped it
                p.send_signal(signal.SIGTERM)
            try:
                p.wait(10)
            except subprocess.TimeoutExpired:
                p.kill()
            log.close()


def giftctl(control, *args):
    """giftctl --json ARGS against `control`; the parsed reply."""
    import json  # noqa: PLC0415
    r = subprocess.run([os.environ["GIFTCTL"], "--address", control,
                        "--json", *args], capture_output=True, text=True,
                       timeout=10)
    assert r.returncode == 0, r.stderr
    return json.loads(r.stdout) if r.stdout.strip() else {}
