"""Put first on a watched job's PYTHONPATH by ``footprint watch --torch-stats``.

Every Python process of the job that starts from it (not forked ones: threads do not cross
a fork) runs a daemon thread that, once the process has initialised CUDA, appends torch's
allocator figures of each device (allocated, reserved; bytes, by the device's UUID) as a
JSON line every FOOTPRINT_WATCH_INTERVAL seconds to FOOTPRINT_WATCH_TORCH_DIR/<pid>.jsonl.
It imports nothing of torch_footprint (the job may run another interpreter), never imports
torch itself, and then runs the sitecustomize it stands in front of, if there is one.
"""

import json
import os
import sys
import threading
import time


def _footprint_watch_torch() -> None:
    folder = os.environ.get("FOOTPRINT_WATCH_TORCH_DIR")
    if not folder or not os.path.isdir(folder):
        return
    try:
        interval = max(0.01, float(os.environ.get("FOOTPRINT_WATCH_INTERVAL", "1")))
    except ValueError:
        interval = 1.0
    path = os.path.join(folder, f"{os.getpid()}.jsonl")

    def run() -> None:
        uuids = None
        with open(path, "a", buffering=1) as f:
            while True:
                rows = []
                torch = sys.modules.get("torch")
                try:
                    if torch is not None and torch.cuda.is_initialized():
                        if uuids is None:
                            uuids = [str(torch.cuda.get_device_properties(i).uuid)
                                     for i in range(torch.cuda.device_count())]
                        rows = [{"uuid": u, "allocated": torch.cuda.memory_allocated(i),
                                 "reserved": torch.cuda.memory_reserved(i)} for i, u in enumerate(uuids)]
                except Exception:  # noqa: BLE001 - the job's torch half imported or shutting down
                    rows = []
                f.write(json.dumps({"t": time.monotonic(), "pid": os.getpid(), "cuda": rows}) + "\n")
                time.sleep(interval)

    threading.Thread(target=run, name="footprint-watch-torch", daemon=True).start()


def _run_the_next_sitecustomize() -> None:
    here = os.path.dirname(os.path.abspath(__file__))
    ours = sys.modules.pop("sitecustomize", None)
    saved = sys.path[:]
    sys.path[:] = [p for p in sys.path if os.path.abspath(p or os.curdir) != here]
    try:
        import importlib

        importlib.import_module("sitecustomize")
    except ModuleNotFoundError as e:
        if e.name != "sitecustomize":
            raise
        if ours is not None:
            sys.modules["sitecustomize"] = ours
    finally:
        sys.path[:] = saved


_footprint_watch_torch()
_run_the_next_sitecustomize()
