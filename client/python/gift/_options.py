"""gift.init's keyword arguments, checked once (immutable).

    options = Options(mode="euclid", piece_mb=0)   # ValueError if wrong

Thread safety: immutable.
"""

import dataclasses
import math
from typing import Optional

MODES = ("fp32", "bf16", "euclid", "gift")
BACKENDS = ("gloo", "nccl")
# Wire formats of modes euclid and gift (kernels/wire_format.h): FP8 E4M3 /
# E5M2, and E2M1 codes with a scale per block of 16 (nvfp4: E4M3 block
# scales and an FP32 tensor scale) or 32 (mxfp4: E8M0 block scales).
FORMATS = ("e4m3", "e5m2", "nvfp4", "mxfp4")


@dataclasses.dataclass(frozen=True)
class Options:
    """How a rank's GiftState runs (see gift.init for each field).

    mode: "fp32", "bf16", "euclid" or "gift". agent_socket: giftd's Agent
    socket (default $GIFT_AGENT_SOCKET, else /tmp/gift/agent.sock); when
    every rank sees it, libgift's communicator rendezvouses through giftd;
    otherwise through the job's own torch.distributed store (the one
    torchrun runs; nothing to share), or a fresh folder under `store_dir`
    when given (must be shared across hosts). job_id: the daemon's name for
    the job (default $GIFT_JOB_ID, which deploy/slurm/gift-srun sets, else
    a fresh id; a multi-node job's daemons serve one job id, so its ranks
    must use it). sketch_rows: rows of each layer's input sampled for the
    sketches. probe_interval: steps between probe steps (the daemon judges
    factors on them) while no giftd is attached; an attached giftd's own
    interval (its `probe_interval`) overrides it.
    timeout_seconds: bound of the rendezvous and of every collective;
    default the process group's timeout (PyTorch's default is 30 min), so a
    rank waiting while rank 0 evaluates alone is not killed. backend:
    "gloo" (host buffers) or "nccl" (device buffers, reduced on libgift's
    side stream; needs a CUDA build). socket_ifname: the network interface
    libgift's Gloo listens on; default $GLOO_SOCKET_IFNAME, else
    $GIFT_SOCKET_IFNAME, else the interface that routes to $MASTER_ADDR,
    else the host name's address. audit_interval: every this many steps
    (modes euclid and gift) the step also runs an FP32 allreduce of the
    same gradients and reports, per layer, the error of what was applied
    against it (stats()["last"] layers' audit_rel_l2, audit_cosine,
    audit_drift; giftd's gift_layer_audit_* metrics); 0 = never. An
    attached giftd's audit_interval (giftctl set-audit-interval) overrides
    it. audit_drift: also the drift (audit_drift): the running sum of the
    applied gradients since the previous audit against the FP32 one. Costs
    8 bytes of memory per gradient element and two additions per element
    every step (on CPU ranks a large share of the step); default off.
    piece_mb: MB of FP32 gradient per piece (whole layers; default 4): each
    piece is reduced as soon as autograd has accumulated its gradients, so
    communication overlaps the backward pass even inside DDP's large
    buckets (needs the DDP model, not the module it wraps); 0 = reduce
    DDP's buckets whole, when DDP hands them over.
    format (modes euclid and gift): the wire format of every layer: "e4m3"
    (default in mode euclid) or "e5m2" (FP8, 1 byte per element), "nvfp4" (4-bit E2M1, a
    scale per 16 elements: about 14 % of FP32's bytes) or "mxfp4" (blocks
    of 32: about 13 %). The 4-bit blocks run along a row, so a 2-D layer
    whose d_in is not a multiple of the block (16 nvfp4, 32 mxfp4) keeps
    e4m3: stats()["format_fallbacks"] names those layers, and rank 0 warns
    once. In mode gift it is the job's default, which the rank tells giftd
    when it registers (None: giftd's configured `format`, e4m3 unless set);
    the daemon's plans then choose each layer's format.
    stats()["last"]["layers"] give each layer's format and wire_bytes.
    error_feedback (modes euclid and gift): error feedback on the layers
    sent Euclidean (each rank quantizes gradient + residual and keeps what
    the rounding lost for the next step; 4 bytes of memory per element):
    None (default) = on for the 4-bit formats, off for FP8; True / False
    force it. The GIFT path always has its own error feedback. Modes fp32
    and bf16 take neither (ValueError unless left at the defaults).
    owner_release_cap (modes euclid and gift, either path): a chunk owner
    adds at most this fraction of the norm of the step's sum of its error
    feedback residual and keeps the rest for later steps (nothing is
    dropped), so the step after an energetic batch does not release that
    batch's whole quantization error at once. Default 0.25 (the residual
    is about 0.1 of the sum at 4 bits: the cap acts only after such
    batches); 0 = no cap. The same on every rank.
    """

    mode: str = "gift"
    agent_socket: Optional[str] = None
    job_id: Optional[str] = None
    sketch_rows: int = 512
    probe_interval: int = 10
    store_dir: Optional[str] = None
    timeout_seconds: Optional[float] = None
    backend: str = "gloo"
    socket_ifname: Optional[str] = None
    audit_interval: int = 100
    audit_drift: bool = False
    piece_mb: float = 4.0
    format: Optional[str] = None
    error_feedback: Optional[bool] = None
    owner_release_cap: float = 0.25

    def __post_init__(self):
        if self.backend not in BACKENDS:
            raise ValueError(f"gift: backend {self.backend!r} (gloo, nccl)")
        if self.mode not in MODES:
            raise ValueError(
                f"gift: unknown mode {self.mode!r} ({', '.join(MODES)})")
        if self.format is not None:
            if not isinstance(self.format, str) or (
                    self.format.lower() not in FORMATS):
                raise ValueError(f"gift: unknown format {self.format!r} "
                                 f"({', '.join(FORMATS)})")
            object.__setattr__(self, "format", self.format.lower())
        if self.error_feedback not in (None, True, False):
            raise ValueError(f"gift: error_feedback {self.error_feedback!r} "
                             "(None = auto: on for 4-bit; True, False)")
        if self.mode in ("fp32", "bf16") and (
                self.format is not None or self.error_feedback is not None):
            raise ValueError(f"gift: format and error_feedback are for modes "
                             f"euclid and gift, not {self.mode}")
        cap = self.owner_release_cap
        if (isinstance(cap, bool) or not isinstance(cap, (int, float))
                or not math.isfinite(cap) or cap < 0):
            raise ValueError(f"gift: owner_release_cap {cap!r} (a finite "
                             "number >= 0; 0 = no cap)")
        piece_mb = float(self.piece_mb)
        if not 0 <= piece_mb < 2**30:
            raise ValueError(f"gift: piece_mb {piece_mb} (MB of FP32 gradient "
                             "per piece, >= 0; 0 = DDP's buckets whole)")

    @property
    def error_feedback_name(self) -> str:
        """libgift's name of error_feedback: "auto", "on" or "off"."""
        if self.error_feedback is None:
            return "auto"
        return "on" if self.error_feedback else "off"

    @property
    def wire_format(self) -> str:
        """The format asked for, e4m3 when none was (what checkpoints
        record)."""
        return self.format or "e4m3"

    @property
    def piece_elements(self) -> int:
        """FP32 elements per piece (0: DDP's buckets whole)."""
        return int(float(self.piece_mb) * 2**20) // 4
