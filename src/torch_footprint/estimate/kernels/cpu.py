"""Operators on a calibrated CPU: what a call costs beyond its arithmetic, by kind.

An eager model's operator runs in line on the CPU: the Python module call, the dispatcher,
the output's allocation, then the kernel. ``footprint calibrate`` measures the generic part
from a model of tiny linears and ReLUs. Kinds of operator that reach a library or the
thread pool pay more before any arithmetic: a convolution goes through oneDNN (a primitive
looked up, its weights' layout checked), a batch norm, a pooling or a softmax splits its
work over the threads. On a model at batch 1, where most operators are small, that fixed
cost is most of the time.

``calibrate`` times one tiny call of each kind of :func:`tiny_kinds` (functional calls on a
tensor of 1 x 16 x 8 x 8, no arithmetic to speak of) and keeps, per kind, what it costs
beyond the mean of a tiny linear's and a tiny ReLU's (the calls the generic figure was
measured on). A prediction adds that to every operator of the kind.

A grouped convolution (RegNet's and ResNeXt's 3 x 3 ones of 8 to 48 channels a group) pays
a call of its own: on a one-thread AVX-512 Xeon a tiny one (16 channels in 2 groups) took
90 us where the dense tiny convolution took 22 and a depthwise one 101, and over RegNet's
shapes (8 channels a group, 24 to 768 channels, 7 x 7 to 56 x 56) each call took 75-180 us
however little its arithmetic (benchmarks/cpu_op_profile.py found RegNetX-200MF's grouped
convolutions at 2-3x their price without it). A calibration made before this kind was timed
prices them at the dense convolution's call (:func:`kind_extra`).

On a GPU the same calls are timed too (``tiny_kinds(device)``) and kept in the calibration,
but not priced: added to the probe they made twelve models' latency worse on an H100 host
(roofline._calibrated_gpu).

Pooling is slower than its arithmetic on a CPU: each output element walks its window with
index arithmetic and (for max) a branch per element, far below the vector rate that an
elementwise pass reaches. ``calibrate`` times a 3 x 3 stride-2 max and average pool on a
1 x 32 x 112 x 112 tensor and keeps window elements per second for each (:func:`window_kind`
says which operators use which).

A 1x1 convolution of stride 2 (a ResNet's downsampling shortcut) runs far below the rate of
a stride-1 one of the same reduction length K on a CPU: in resnet18 at batch 1 they took
2.5-3.5x the stride-1 table's time, where its 3x3 stride-2 convolutions were within 15% of it
(each operator timed on its own thread: benchmarks/cpu_op_profile.py; oneDNN gathers the
strided input first). ``calibrate`` times ResNet's shortcut shapes into a table of their own,
which :func:`downsamples` sends them to. Found on an AVX-512 Xeon through oneDNN; other CPUs
calibrate the same shapes, but the split was only checked there.

Measured, not fitted: nothing here is a constant tuned to models; the kinds are the
operators' families, and every figure comes from the machine the prediction is for.
"""

from __future__ import annotations

import functools
from collections.abc import Callable, Sequence
from typing import Any

from .matrix import is_depthwise, is_grouped

# kind of operator -> words of the aten names it covers (first match wins; order matters)
_KIND_WORDS: tuple[tuple[str, tuple[str, ...]], ...] = (
    ("convolution", ("convolution", "conv2d", "conv1d", "conv3d")),
    ("batch_norm", ("batch_norm",)),
    ("norm", ("layer_norm", "group_norm", "rms_norm")),
    ("pool", ("pool",)),
    ("softmax", ("softmax",)),
    ("reduction", ("mean", "sum", "amax", "amin", "var", "std", "norm")),
    ("matmul", ("addmm", "bmm", ".mm", "matmul", "linear", "baddbmm")),
    ("activation", ("gelu", "silu", "sigmoid", "tanh", "hardswish", "hardsigmoid", "erf", "exp", "mish")),
    ("copy", ("clone", "cat", "copy", "contiguous", "_to_copy", "stack", "index", "gather", "pad")),
)
BASELINE = ("matmul", "elementwise")  # the generic figure's calls: a tiny linear and a tiny ReLU


@functools.lru_cache(maxsize=4096)
def _kind_of_name(op: str) -> str:
    name = op.lower()
    for kind, words in _KIND_WORDS:
        if any(w in name for w in words):
            return kind
    return "elementwise"


def op_kind(op: str, problem: Sequence[Any] = ()) -> str:
    """The kind of an aten operator for its fixed cost: a key of :func:`tiny_kinds`."""
    kind = _kind_of_name(op)
    if kind != "convolution":
        return kind
    if is_depthwise(problem):
        return "depthwise"
    return "grouped" if is_grouped(problem) else kind


# a kind an older calibration did not time, priced at the kind its call was counted in before
_TIMED_AS = {"grouped": "convolution"}


def kind_extra(extra: dict[str, float], kind: str) -> float:
    """Seconds a call of ``kind`` costs beyond the generic figure (``extra``: the calibration's,
    by kind); a kind the calibration did not time costs what the kind it belongs to does."""
    if kind in extra:
        return extra[kind]
    return extra.get(_TIMED_AS.get(kind, ""), 0.0)


@functools.lru_cache(maxsize=4096)
def window_kind(op: str) -> str | None:
    """``max`` or ``avg`` for a forward pooling operator over a window (its FLOPs count one
    compare or add per window element per output), None for every other operator."""
    name = op.lower()
    if "backward" in name or "adaptive" in name or "pool" not in name:
        return None
    return "max" if "max_pool" in name else "avg" if "avg_pool" in name else None


def pooling_calls() -> dict[str, tuple[Callable[[], object], int]]:
    """The calls ``calibrate`` times for the pooling rates, with the window elements each walks."""
    import torch
    import torch.nn.functional as F  # noqa: N812

    x = torch.randn(1, 32, 112, 112)
    window = 9 * 32 * 56 * 56  # a 3 x 3 window per output element, 56 x 56 outputs per channel
    return {"max": (lambda: F.max_pool2d(x, 3, 2, 1), window), "avg": (lambda: F.avg_pool2d(x, 3, 2, 1), window)}


def tiny_kinds(device: str = "cpu") -> dict[str, Callable[[], object]]:
    """One tiny functional call per kind (its tensors made on ``device``, run under inference
    mode). On a GPU the same calls measure each kind's host cost: a convolution's cuDNN plan
    lookup, a batch norm's descriptors, beyond a launch."""
    import torch
    import torch.nn.functional as F  # noqa: N812

    x = torch.randn(1, 16, 8, 8, device=device)
    w3 = torch.randn(16, 16, 3, 3, device=device)
    wd = torch.randn(16, 1, 3, 3, device=device)
    wg = torch.randn(16, 8, 3, 3, device=device)
    a = torch.randn(1, 16, device=device)
    lin = torch.randn(16, 16, device=device)
    b = torch.randn(16, device=device)
    ones = torch.ones(16, device=device)
    rows = torch.randn(1, 8, 16, device=device)
    return {
        "convolution": lambda: F.conv2d(x, w3, padding=1),
        "depthwise": lambda: F.conv2d(x, wd, padding=1, groups=16),
        "grouped": lambda: F.conv2d(x, wg, padding=1, groups=2),
        "batch_norm": lambda: F.batch_norm(x, b, ones, ones, b, False),
        "norm": lambda: F.layer_norm(rows, (16,)),
        "pool": lambda: F.max_pool2d(x, 3, 2, 1),
        "softmax": lambda: F.softmax(rows, -1),
        "reduction": lambda: x.mean((2, 3), keepdim=True),
        "matmul": lambda: F.linear(a, lin, b),
        "activation": lambda: F.gelu(x),
        "copy": lambda: torch.cat([x, x], 1),
        "elementwise": lambda: F.relu(x),
    }


def extra_costs(tiny_us: dict[str, float]) -> dict[str, float]:
    """Microseconds each kind's tiny call costs beyond the generic figure's calls (never below 0)."""
    base = [tiny_us[k] for k in BASELINE if k in tiny_us]
    if not base:
        return {}
    floor = sum(base) / len(base)
    return {k: round(max(v - floor, 0.0), 3) for k, v in tiny_us.items()}


def downsamples(problem: Sequence[Any], bytes_read: int, out_shape: Sequence[int], elem: int = 4) -> bool:
    """Whether a forward 1x1 convolution reads several input positions per output position (a
    stride above 1): its input's positions, from the bytes it reads less its weight's, over its
    output's. ``problem``: ("conv", batch, C_in, C_out, _, kernel area, groups, pass)."""
    if len(problem) < 8 or problem[0] != "conv" or problem[7] != "forward" or len(out_shape) < 3 \
            or int(problem[5]) != 1:
        return False
    batch, cin, cout, area, groups = (int(problem[i]) for i in (1, 2, 3, 5, 6))
    weight = cout * (cin // max(groups, 1)) * area + cout  # and a bias, if any (a few elements)
    positions_out = 1
    for d in out_shape[2:]:
        positions_out *= int(d)
    positions_in = (bytes_read // elem - weight) / max(batch * cin, 1)
    return positions_in >= 2.5 * positions_out
