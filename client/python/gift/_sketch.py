"""Activation sketches (DESIGN §2): forward hooks on the nn.Linear layers
hand a fixed-stride sample of each layer's inputs to libgift, which
sketches it for giftd's whitening factors (mode "gift" only).

    handles = register_sketch_hooks(module, lambda: session, rows=512)

Thread safety: the hooks run on the training thread; `session` is called
each time (the state may swap it in tests, and drops it when closed, after
removing the hooks).
"""

from typing import Any, Callable, List

import torch
from torch import nn


def register_sketch_hooks(module: nn.Module, session: Callable[[], Any],
                          rows: int) -> List[Any]:
    """A forward hook per trainable nn.Linear of `module`; their handles."""
    handles = []
    for name, m in module.named_modules():
        if isinstance(m, nn.Linear) and m.weight.requires_grad:
            hook = _sketch_hook(session, name or "weight", m.in_features, rows)
            handles.append(m.register_forward_hook(hook))
    return handles


def _sketch_hook(session, layer, d_in, max_rows):
    def hook(module, inputs, output):
        if not (module.training and torch.is_grad_enabled()):
            return
        s = session()
        if not s.wants_sketch(layer):
            return
        x = inputs[0].detach().reshape(-1, d_in)
        rows = x.shape[0]
        if rows == 0:
            return
        n = min(rows, max_rows)
        x = x[::rows // n][:n].float().contiguous()  # fixed stride
        if x.is_cuda:
            _sketch_device(s, layer, x, n)
        else:
            s.sketch(layer, x.numpy())
    return hook


def _sketch_device(session, layer, x, n):
    stream = torch.cuda.current_stream(x.device)
    session.sketch_ptr(layer, x.data_ptr(), n, stream.cuda_stream)
    side = session.sketch_stream()
    if side:
        # The caching allocator must not hand x out again before the
        # sketch stream has read it.
        x.record_stream(torch.cuda.ExternalStream(side, device=x.device))
