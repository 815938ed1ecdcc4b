"""A traced step's cost at a batch, in the weight schemes priced: the traced parameters with the
roles the schemes price them by, their bytes, the parameters one token uses, and a trace run at
batch 1 scaled to a batch (per-sequence work x batch, weights read once, a tensor-parallel rank's
share), its identical operators merged so that each distinct one is priced once.

Every FLOP of a prefill or a decode step belongs to one sequence, and so does every byte except
the weights an operator reads (the trace knows which parameters each operator reads).
Mixture-of-experts weights are read for the share of the experts a step's tokens reach.
"""

from __future__ import annotations

from dataclasses import dataclass, replace
from typing import Any

from ...trace.records import OpEvent, Trace
from .quantization import Param, Scheme
from .trace import ServingTrace


def _params(st: ServingTrace) -> list[Param]:
    """The traced parameters with the roles the weight schemes price them by."""
    tr = st.prefill
    types = {m.path: m.type for m in tr.modules}
    n_layers = len(st.layers)
    experts = st.experts.count if st.experts else 0
    out = []
    for i, p in enumerate(tr.params):
        role = st.roles.get(i)
        if role is None:
            if len(p.shape) < 2:
                role = "vector"
            elif types.get(p.module, "").endswith("Embedding"):
                role = "embedding"
            else:
                role = "linear"
        layer = next((int(x) for x in p.name.split(".") if x.isdigit()), None)
        out.append(Param(p.name, tuple(p.shape), role, layer, n_layers, experts))
    return out


def weight_bytes(st: ServingTrace, scheme: Scheme | None) -> list[int]:
    """Bytes of every traced parameter in ``scheme`` (None: as traced)."""
    if scheme is None:
        return [p.nbytes for p in st.prefill.params]
    return [scheme.bytes_of(p) for p in _params(st)]


def active_params(st: ServingTrace) -> tuple[int, int]:
    """(parameters one token uses, parameters of the routed experts)."""
    total = st.params
    if st.experts is None:
        return total, 0
    routed = sum(st.prefill.params[i].numel for i in st.experts.params)
    return total - routed + routed * st.experts.top_k // st.experts.count, routed


# ------------------------------------------------------------------------------ steps at a batch

def _weights_read(e: OpEvent, traced: list[int], priced: list[int], fraction: dict[int, float]) -> tuple[int, int]:
    """(bytes of weights ``e`` read as traced, bytes it reads priced and for the experts reached)."""
    was = now = 0
    for w in e.weights:
        was += traced[w]
        now += int(priced[w] * fraction.get(w, 1.0))
    return was, now


def scaled(trace: Trace, batch: int, traced: list[int], priced: list[int], fraction: dict[int, float],
           per_rank: int = 1) -> Trace:
    """``trace`` (run at batch 1) at ``batch``: per-sequence work x batch, weights read once
    in their scheme; with ``per_rank`` > 1, one tensor-parallel rank's share."""
    events = []
    for e in trace.events:
        if e.kind == "view":
            events.append(e)
            continue
        was, now = _weights_read(e, traced, priced, fraction)
        rest = e.bytes_read - was
        shapes = [[s[0] * batch, *s[1:]] if s else s for s in e.out_shapes]
        events.append(replace(e, flops=e.flops * batch // per_rank, macs=e.macs * batch // per_rank,
                              bytes_read=(now + rest * batch) // per_rank,
                              bytes_written=e.bytes_written * batch // per_rank, out_shapes=shapes))
    return replace(trace, events=events)


@dataclass
class Grouped:
    """A trace with identical operators merged (the layers of a model repeat): each unique
    operator once, and how many times it runs. A roofline time is linear in the count."""

    trace: Trace
    counts: list[int]

    @classmethod
    def at(cls, trace: Trace, batch: int, traced: list[int], priced: list[int], fraction: dict[int, float],
           per_rank: int = 1) -> Grouped:
        """``Grouped.of(scaled(trace, ...))`` merged at batch 1 first (operators alike there that
        read alike weights are alike at any batch; a sum over merged operators is the same sum),
        so each distinct operator is scaled once."""
        g = cls.of(trace, lambda e: _weights_read(e, traced, priced, fraction))
        return cls(scaled(g.trace, batch, traced, priced, fraction, per_rank), g.counts)

    @classmethod
    def of(cls, trace: Trace, extra: Any = None) -> Grouped:
        index: dict[tuple[Any, ...], int] = {}
        events: list[OpEvent] = []
        counts: list[int] = []
        for e in trace.events:
            key = (e.op, e.kind, e.flops, e.macs, e.bytes_read, e.bytes_written,
                   tuple(map(tuple, e.out_shapes)), tuple(e.out_dtypes), extra(e) if extra else None)
            i = index.get(key)
            if i is None:
                index[key] = len(events)
                events.append(e)
                counts.append(1)
            else:
                counts[i] += 1
        return cls(replace(trace, events=events), counts)

    @property
    def flops(self) -> int:
        return sum(e.flops * c for e, c in zip(self.trace.events, self.counts, strict=True))

    @property
    def bytes_read(self) -> int:
        return sum(e.bytes_read * c for e, c in zip(self.trace.events, self.counts, strict=True))

    def time_s(self, prediction: Any) -> float:
        """The whole trace's time from a prediction over the unique operators. Where host and
        device overlap (GPUs, roofline.Prediction.effective) the merged operators have lost
        their order: the run takes the longer of the host's dispatching and the device's
        kernels, the two clocks' limit when the queue never drains and never runs dry."""
        pairs = list(zip(prediction.ops, self.counts, strict=True))
        if not prediction.ceilings.overlap:
            return sum(o.time_s * c for o, c in pairs)
        host = sum(o.overhead_s * c for o, c in pairs)
        device = sum(o.device_s * c for o, c in pairs if o.kind != "view")
        return max(host, device)



# ------------------------------------------------------------------------------ an engine's fused kernels

def fused(trace: Trace) -> Trace:
    """``trace`` as a serving engine runs it: the element-wise operators between two matrix
    operators (RMSNorm with its residual add, rotary embedding, SiLU-and-multiply, the cache's
    store) run as fused kernels, the intermediate results kept on chip. Within a run of
    consecutive element-wise operators, where an operator reads at least the bytes the one before
    it wrote (besides weights), it takes them from the fused kernel: the one before does not write
    them and it does not read them. Weights (a norm's scale) are read; FLOPs and the number of
    operators (the host's dispatch, priced per traced operator) are as traced. The rule reads
    the trace's order only: a result read by an operator further on (the residual stream beside
    the norm) is taken as consumed (too few bytes). A matrix operator ends the run where it
    reads the run's last result; one that reads less reads something else and the run goes on
    past it (transformers computes the up projection between SiLU and its multiply; engines
    merge the gate and up matrices and fuse SiLU with the multiply).

    The engines' kernels: vLLM's fused_add_rms_norm, rotary_embedding and silu_and_mul
    (csrc/layernorm_kernels.cu, csrc/pos_encoding_kernels.cu, csrc/activation_kernels.cu),
    TensorRT-LLM's QKV preprocessing (rotary and the cache store in one kernel) and RMSNorm
    (TensorRT fuses the other element-wise layers), SGLang's (sgl-kernel) of vLLM's names;
    llama.cpp's profile (ggml's operators one kernel each) keeps the operators apart."""
    weights = [p.nbytes for p in trace.params]
    events = list(trace.events)
    reads = [e.bytes_read for e in events]
    writes = [e.bytes_written for e in events]
    prev: int | None = None  # the element-wise operator before, in the current run
    for i, e in enumerate(events):
        if e.kind == "view":
            continue
        takes = prev is not None and e.bytes_read - sum(weights[w] for w in e.weights) >= events[prev].bytes_written
        if e.kind not in ("vector", "data"):
            # a matrix operator that reads less than the run's last result reads something else (the up
            # projection beside SiLU's output): the run goes on past it
            prev = prev if prev is not None and not takes else None
            continue
        if takes and prev is not None:
            reads[i] -= events[prev].bytes_written
            writes[prev] = 0
        prev = i
    out = [e if (r, w) == (e.bytes_read, e.bytes_written) else replace(e, bytes_read=r, bytes_written=w)
           for e, r, w in zip(events, reads, writes, strict=True)]
    return replace(trace, events=out)


__all__ = ["Grouped", "active_params", "fused", "scaled", "weight_bytes"]
