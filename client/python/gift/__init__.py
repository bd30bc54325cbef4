"""GIFT for PyTorch DDP: FP8 gradient allreduce with geometry (libgift).

    import gift
    ddp = DistributedDataParallel(model)
    state = gift.init(ddp, mode="gift")          # attaches to the local giftd
    ddp.register_comm_hook(state, gift.comm_hook)
    ...                                           # train as usual
    torch.save({"model": ddp.state_dict(), "gift": state.state_dict()}, path)
    state.load_state_dict(torch.load(path)["gift"])   # on resume

Modes: "fp32" and "bf16" (plain allreduce in that precision), "euclid" (FP8
two-phase allreduce, every layer Euclidean, no daemon) and "gift" (FP8 with
the local giftd's plans and whitening factors; without a daemon it runs
Euclidean, says so once, and keeps trying to attach).

How it overlaps with the backward pass: gift does not wait for DDP to hand
over a bucket. It cuts the gradient into pieces of about `piece_mb` MB
(whole layers, in the order of DDP's buckets of the previous step, so the
same on every rank) and a piece is reduced by this rank's communication
thread, with libgift's own communicator, as soon as autograd has
accumulated its layers' gradients, while the backward pass computes the
next ones. DDP's buckets are large (25 MB by default): most of a model's
gradient sits in one, handed over only near the end of the backward pass.
The comm hook returns a pending future at once; it completes when every
piece of its bucket is reduced (the results copied into the bucket), and
DDP's wait at the end of backward finds them done. One step is one libgift
step: the agreement on plan epoch and factor versions runs once, with the
first piece; the last bucket closes the step (telemetry, the daemon's
windows). A step whose pieces are not known yet (the first, or one after
DDP's buckets changed) reduces DDP's buckets as DDP hands them over, cut
into the same pieces. No-sync passes (ddp.no_sync()) start nothing. On GPUs
(backend="nccl") the thread makes libgift's side stream wait on CUDA events
recorded on autograd's stream when a gradient was accumulated and when a
bucket was handed over, and completes the future (created with
devices=[...]) with that stream current, so DDP's consumer stream waits on
it and no host thread of the training path ever synchronises the device.

Layers: every trainable parameter of float32, bfloat16 or float16 (a
bucket of another float type is reduced in an FP32 copy, the FP8 codes and
the FP32 accumulation are the same); nn.Linear weights are 2-D layers named
by the module's qualified name (candidates for GIFT), every other parameter
a 1-D layer under its own name. Thread safety: one GiftState per rank.

The package's modules, as torch.distributed lays out its own: _state
(GiftState, init, comm_hook), _options (init's keyword arguments),
_rendezvous, _layout (layers, buckets, pieces), _overlap (the grad-ready
hooks that arm a step's pieces), _comm (the communication thread) and
_messages (what it is sent), _sketch, _checkpoint (state_dict), _stats
and _compat (every torch feature test).
"""

from gift._gift import GiftError
from gift._options import MODES, Options
from gift._state import GiftState, comm_hook, init

__all__ = ["init", "comm_hook", "GiftState", "GiftError", "MODES", "Options"]
