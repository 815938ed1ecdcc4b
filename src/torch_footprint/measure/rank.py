"""One rank of ``footprint bench --nproc N``: the program torchrun starts N times.

    python -m torch.distributed.run --nproc-per-node N -m torch_footprint.measure.rank SPEC.json OUTDIR

Each rank builds the model (same seed everywhere, so no rank broadcasts its weights), wraps
it with torch's own machinery for the strategy, and runs the training step of
:func:`torch_footprint.trace.step.run_step`:

    ddp    torch.nn.parallel.DistributedDataParallel
    zero1  DistributedDataParallel + torch.distributed.optim.ZeroRedundancyOptimizer
    zero2  torch.distributed.fsdp.fully_shard(reshard_after_forward=False) on every unit, then on the root
    zero3  fully_shard (FSDP2) on every unit, then on the root (with its default: kept gathered into the backward)
    fsdp
    tp     torch.distributed.tensor.parallel.parallelize_module with ColwiseParallel and
           RowwiseParallel on the linears of :func:`torch_footprint.estimate.layouts.tensor_parallel.tp_plan`

The first step runs under the memory profiler (CPU: the allocator's records, as
:mod:`.measured` reads them; CUDA: max_memory_allocated), from the model's construction on,
so the peak counts everything the rank holds. Then warm-up steps, timed steps (each
between two barriers), and one step under torch.profiler whose collective calls give the
communication time. The rank writes ``rankR.json`` (whole or not at all), or ``rankR.error``
with one line; ``rankR.pid`` tells the launcher which process to stop if it must.
"""

from __future__ import annotations

import contextlib
import datetime
import gc
import os
import statistics
import sys
import time
import traceback
from pathlib import Path
from typing import Any

import torch
import torch.distributed as dist
from torch import nn

from ..errors import FootprintError
from ..files import read_json, write_json

COLLECTIVE_WORDS = ("all_reduce", "allreduce", "all_gather", "allgather", "reduce_scatter", "broadcast")


def _wrap(model: nn.Module, strategy: str, world: int, factory: Any, device: str) -> tuple[nn.Module, Any]:
    from torch.distributed.device_mesh import init_device_mesh

    from ..estimate.layouts.sharding import fsdp_units, modules_of
    from ..estimate.layouts.tensor_parallel import check_tp, per_rank_heads

    dev_type = torch.device(device).type
    if strategy in ("ddp", "zero1"):
        from torch.nn.parallel import DistributedDataParallel

        ids = [torch.device(device).index or 0] if dev_type == "cuda" else None
        # every rank built the same weights (same seed): no broadcast at construction, whose buffer a
        # gloo worker thread may free where the allocator's records do not see it
        wrapped = DistributedDataParallel(model, device_ids=ids, init_sync=False)
        if strategy == "ddp":
            return wrapped, factory(list(wrapped.parameters()))
        from torch.distributed.optim import ZeroRedundancyOptimizer

        return wrapped, ZeroRedundancyOptimizer(list(wrapped.parameters()), optimizer_class=factory.cls,
                                                **factory.kwargs)
    mesh = init_device_mesh(dev_type, (world,))
    if strategy in ("zero2", "zero3", "fsdp"):
        from torch.distributed.fsdp import fully_shard

        reshard = strategy != "zero2"
        mods = dict(model.named_modules())
        for path in fsdp_units(modules_of(model)):
            fully_shard(mods[path], mesh=mesh, reshard_after_forward=reshard)
        fully_shard(model, mesh=mesh)  # the root as fully_shard's default keeps it: gathered into the backward
        return model, factory(list(model.parameters()))
    if strategy == "tp":
        from torch.distributed.tensor.parallel import ColwiseParallel, RowwiseParallel, parallelize_module

        plan = check_tp(model, world)
        mods = dict(model.named_modules())
        for path in plan:
            if not isinstance(mods[path], nn.Linear):
                raise FootprintError(f"--strategy tp: torch's DTensor plans split nn.Linear only, and {path} is a "
                                     f"{type(mods[path]).__name__} (fit and predict price its split)")
        parallelize_module(model, mesh, {p: ColwiseParallel() if s == "colwise" else RowwiseParallel()
                                         for p, s in plan.items()}, src_data_rank=None)  # same weights everywhere
        per_rank_heads(model, plan, world)  # the attention reshapes one rank's columns by its heads
        return model, factory(list(model.parameters()))
    raise ValueError(f"unknown strategy {strategy!r}")


STAGING_RANGES = ("c10d::", "gloo:")  # a collective's own call: what it allocates inside is its staging


def _step_window_peak(prof: Any) -> tuple[int, int]:
    """(live bytes when the step began, peak during the step) from the allocator's records
    of a profile that began before the model was built: every allocation and free in time
    order, paired by address; the step is the ``footprint.step`` range. A block freed on a
    thread the profiler does not follow (a collective's worker) leaves no record: an
    address allocated again while still live was freed in between, and counts so; a block
    allocated there and freed here counts when it is freed; a block allocated inside a
    collective's own call (``c10d::`` and ``gloo:`` ranges: gloo's ``_reduce_scatter_base``
    clones its input, ``_allgather_base`` stages its output) whose free went unrecorded was
    freed when that call returned, the collective being done (gloo's worker thread drops
    the last reference to it, or the caller does: which one varies from run to run)."""
    from torch._C._profiler import _EventType

    records: list[tuple[int, int, int]] = []
    staged: list[tuple[int, int, int]] = []  # (allocation time, address, end of the collective's call)
    window = None
    stack: list[tuple[Any, int | None]] = [(n, None) for n in prof.profiler.kineto_results.experimental_event_tree()]
    while stack:
        node, call_end = stack.pop()
        if node.typed[0] == _EventType.Allocation:
            f = node.typed[1]
            records.append((node.start_time_ns, f.alloc_size, f.ptr))
            if call_end is not None and f.alloc_size > 0:
                staged.append((node.start_time_ns, f.ptr, call_end))
            continue
        if node.name == "footprint.step":
            window = (node.start_time_ns, node.end_time_ns)
        if call_end is None and node.name.startswith(STAGING_RANGES):
            call_end = node.end_time_ns
        stack.extend((c, call_end) for c in node.children)
    assert window is not None, "the step's range was not recorded"
    records.sort()
    by_ptr: dict[int, list[tuple[int, int]]] = {}
    for t, size, ptr in records:
        by_ptr.setdefault(ptr, []).append((t, size))
    for t, ptr, end in staged:
        later = [(u, size) for u, size in by_ptr[ptr] if u > t]
        if not later or later[0][1] > 0:  # no free recorded before the address is used again
            records.append((max(t, min(end, later[0][0] - 1) if later else end), 0, ptr))
    blocks: dict[int, int] = {}
    live = 0
    start: int | None = None
    peak = 0
    for t, size, ptr in sorted(records):
        if t >= window[0] and start is None:
            start = peak = live
        if size > 0:
            live += size - blocks.pop(ptr, 0)
            blocks[ptr] = size
        elif size == 0:  # the collective's staging, its free unrecorded
            live -= blocks.pop(ptr, 0)
        else:  # a free; of a block allocated where the profiler did not look, by its own size
            live -= blocks.pop(ptr, -size)
        if start is not None and t <= window[1]:
            peak = max(peak, live)
    if start is None:
        start = peak = live
    return start, max(start, peak)


def _comm_seconds(prof: Any, cuda: bool) -> tuple[float, dict[str, int]]:
    """Seconds in the backend's collective work and the calls by name: gloo's own ranges
    on CPU ("gloo:all_reduce", one per call, under the c10d and FSDP ranges that name
    them), NCCL's kernels on CUDA."""
    total = 0.0
    names: dict[str, int] = {}
    for ev in prof.events():
        if cuda:
            if "nccl" not in ev.name.lower() or ev.device_type != torch.autograd.DeviceType.CUDA:
                continue
            total += ev.device_time_total / 1e6
        elif ev.name.startswith("gloo:"):
            total += ev.cpu_time_total / 1e6
        else:
            continue
        names[ev.name] = names.get(ev.name, 0) + 1
    return total, names


def collectives(spec: dict[str, Any], world: int, device: str) -> dict[str, Any]:
    """All-reduces of two sizes, timed: the link's bus bandwidth and per-step latency
    (:mod:`torch_footprint.estimate.layouts.comm`'s ring model, fitted through the two points)."""
    points = []
    for nbytes in spec["sizes"]:
        x = torch.ones(nbytes // 4, device=device)
        for _ in range(2):
            dist.all_reduce(x)
        ts = []
        for _ in range(spec["reps"]):
            dist.barrier()
            if device.startswith("cuda"):
                torch.cuda.synchronize()
            t = time.perf_counter()
            dist.all_reduce(x)
            if device.startswith("cuda"):
                torch.cuda.synchronize()
            ts.append(time.perf_counter() - t)
        points.append((nbytes, statistics.median(ts)))
    (s0, t0), (s1, t1) = points[0], points[-1]
    factor = 2 * (world - 1) / world
    per_byte = max((t1 - t0) / (s1 - s0), 1e-15)
    return {"busbw_gbs": factor / per_byte / 1e9, "latency_us": max(0.0, t0 - s0 * per_byte) / (2 * (world - 1)) * 1e6,
            "points": points, "nproc": world}


def run_rank(spec: dict[str, Any], rank: int, world: int) -> dict[str, Any]:
    from ..sources import prepare
    from ..sources.building import real_weights
    from ..trace import setups as training
    from ..trace.step import run_step

    device = spec["device"]
    if device == "cuda":
        local = int(os.environ.get("LOCAL_RANK", rank))
        torch.cuda.set_device(local)
        device = f"cuda:{local}"
    torch.set_num_threads(spec["threads"])
    dist.init_process_group("nccl" if device.startswith("cuda") else "gloo",
                            timeout=datetime.timedelta(seconds=spec["timeout"]))
    if spec.get("mode") == "collectives":
        dist.barrier()
        Path(spec["out"], f"rank{rank}.ready").touch()
        res = collectives(spec, world, device)
        if spec.get("ceilings"):  # every rank at once, on the threads it has: what a rank of a bench reaches
            from .calibrate import calibrate

            # each measurement starts on every rank together (a barrier before each): a rank that
            # finished early must not leave the other to measure the rest alone
            res["ceilings"] = calibrate("cpu", quick=bool(spec.get("quick")), on_step=lambda _: dist.barrier())
            dist.barrier()
        dist.destroy_process_group()
        return dict(res, rank=rank, backend="nccl" if device.startswith("cuda") else "gloo")
    factory = training.optimizer(spec["optimizer"])
    _, autocast = training.precision(spec["precision"])
    cuda = device.startswith("cuda")
    os.environ.setdefault("KINETO_LOG_LEVEL", "5")

    pp = int(spec.get("pp") or 1)
    microbatches = int(spec.get("microbatches") or 1)

    def build() -> tuple[Any, Any, tuple[Any, ...], dict[str, Any]]:
        torch.manual_seed(0)
        with real_weights():  # with --pp, --batch is one micro-batch
            batch = spec["batch"] * microbatches if spec["batch"] is not None else None
            work = prepare(spec["model"], spec["inputs"]).at_batch(batch)
        model = work.model.to(device)
        model.train()
        args, kwargs = work.make_inputs()(device)
        if pp > 1:  # this rank's stages only; the rest of the model goes with ``work``
            from .stages import PipelineStep

            runner = PipelineStep(model, rank, pp, int(spec.get("vpp") or 1), spec["schedule"], microbatches,
                                  device)
            return runner, factory(runner.parameters()), args, kwargs
        wrapped, opt = _wrap(model, spec["strategy"], world, factory, device)
        return wrapped, opt, args, kwargs

    def step(m: Any, opt: Any, args: tuple[Any, ...], kwargs: dict[str, Any]) -> None:
        if pp > 1:
            if any(q.grad is not None for g in opt.param_groups for q in g["params"]):
                opt.zero_grad(set_to_none=True)
            with (torch.autocast(device_type=torch.device(device).type, dtype=autocast) if autocast is not None
                  else contextlib.nullcontext()):
                m(args, kwargs)
            opt.step()
        else:
            run_step(m, args, kwargs, backward=True, optimizer=opt, autocast=autocast,
                     device_type=torch.device(device).type)
        if cuda:
            torch.cuda.synchronize()

    dist.barrier()
    Path(spec["out"], f"rank{rank}.ready").touch()  # connected: the launcher's timeout counts from here
    if cuda:
        model, opt, args, kwargs = build()
        torch.cuda.synchronize()
        start = torch.cuda.memory_allocated()
        torch.cuda.reset_peak_memory_stats()
        step(model, opt, args, kwargs)
        peak = torch.cuda.max_memory_allocated()
    else:
        with torch.profiler.profile(activities=[torch.profiler.ProfilerActivity.CPU], profile_memory=True) as prof:
            model, opt, args, kwargs = build()
            gc.collect()  # what the construction's collectives left to the collector goes first
            dist.barrier()
            with torch.profiler.record_function("footprint.step"):
                # a pipeline's first step has no optimizer state in its forwards and backwards; its
                # second one has: the peak of the two, the need of a run (as fit prices it)
                for _ in range(2 if pp > 1 else 1):
                    step(model, opt, args, kwargs)
        start, peak = _step_window_peak(prof)
        del prof
    for _ in range(spec["warmup"]):
        step(model, opt, args, kwargs)
    times = []
    for _ in range(spec["steps"]):
        dist.barrier()
        t = time.perf_counter()
        step(model, opt, args, kwargs)
        times.append(time.perf_counter() - t)
    dist.barrier()
    with torch.profiler.profile(activities=[torch.profiler.ProfilerActivity.CPU]) as prof:
        step(model, opt, args, kwargs)
    comm, names = _comm_seconds(prof, cuda)
    dist.barrier()
    dist.destroy_process_group()
    return {"rank": rank, "world": world, "device": device, "start_bytes": start, "peak_bytes": peak,
            "step_s": statistics.median(times), "steps_s": times, "comm_s": comm, "collectives": names,
            "threads": torch.get_num_threads()}


def main(argv: list[str]) -> int:
    out = Path(argv[1])
    spec = dict(read_json(argv[0]), out=str(out))
    rank, world = int(os.environ["RANK"]), int(os.environ["WORLD_SIZE"])
    (out / f"rank{rank}.pid").write_text(str(os.getpid()))
    try:
        write_json(out / f"rank{rank}.json", run_rank(spec, rank, world))
    except BaseException as e:  # noqa: BLE001 - every failure is reported, then the rank exits
        line = f"{type(e).__name__}: {e}".splitlines()[0] if str(e) else type(e).__name__
        (out / f"rank{rank}.error").write_text(line + "\n" + traceback.format_exc())
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
