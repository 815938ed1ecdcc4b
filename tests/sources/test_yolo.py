"""Ultralytics YOLO models: the model runs as before after every verb, and the source
``ultralytics:NAME.yaml`` builds them from the package's YAML files, offline. Expected values
come from Ultralytics itself (its model built from the same file, its get_flops) and from a
copy of the model that was never profiled."""

from __future__ import annotations

import os
import socket

import pytest
import torch

os.environ.setdefault("YOLO_OFFLINE", "1")
os.environ.setdefault("YOLO_VERBOSE", "False")
pytest.importorskip("ultralytics")

from model_state import never_profiled, outputs_differ, rng_state, state_differences  # noqa: E402
from ultralytics.nn import tasks  # noqa: E402
from ultralytics.utils.torch_utils import get_flops  # noqa: E402

import torch_footprint as tfp  # noqa: E402
from torch_footprint.errors import FootprintError  # noqa: E402

# detection, segmentation and pose across v5u, v8, v10, 11, 12 and 26 (whatever the package ships)
YOLO = ["yolov5nu", "yolov5su", "yolov8n", "yolov8s", "yolov8n-seg", "yolov8n-pose", "yolov10n", "yolov10s",
        "yolo11n", "yolo11s", "yolo11n-seg", "yolo11n-pose", "yolo12n", "yolo12s", "yolo12n-seg", "yolo12n-pose",
        "yolo26n", "yolo26s", "yolo26n-seg", "yolo26n-pose", "yolo11s-seg"]
CLASSES = {"detect": tasks.DetectionModel, "segment": tasks.SegmentationModel, "pose": tasks.PoseModel}


def ultralytics_model(name: str) -> torch.nn.Module:
    """The model as Ultralytics builds it from its YAML file (random weights), in eval mode."""
    cfg = tasks.yaml_model_load(name + ".yaml")
    torch.manual_seed(0)
    return CLASSES[tasks.guess_model_task(cfg)](cfg, verbose=False).eval()


@pytest.mark.parametrize("name", YOLO)
def test_the_model_runs_as_a_never_profiled_copy_after_every_verb(name: str) -> None:
    model = ultralytics_model(name)
    x = torch.rand(1, 3, 128, 128, generator=torch.Generator().manual_seed(1))
    if YOLO.index(name) % 2:  # half of them have run before: the head's cache exists (at 128, not 640)
        with torch.no_grad():
            model(x)
    ref = never_profiled(model)
    before = rng_state()
    p = tfp.profile(model)  # as a YOLO user calls it: Ultralytics' 640 input by default
    assert p.trace.inputs[0]["shape"] == [1, 3, 640, 640]
    tfp.memory(model)
    tfp.predict(model, "h100-sxm")
    after = rng_state()
    assert torch.equal(before[0], after[0]) and before[1] == after[1]
    assert state_differences(model, ref) == []
    assert outputs_differ(model, ref, lambda m: m(x)) is None


@pytest.mark.parametrize("name", ["yolo11n", "yolo11n-seg", "yolo11n-pose"])
def test_the_source_builds_the_shipped_yaml_at_640(name: str) -> None:
    p = tfp.profile(f"ultralytics:{name}.yaml")
    assert p.params == sum(q.numel() for q in ultralytics_model(name).parameters())
    assert p.trace.inputs[0]["shape"] == [1, 3, 640, 640]
    assert not p.unknown_ops
    assert any("Ultralytics' GFLOPs" in n and "2 x the MACs here" in n for n in p.notes)


@pytest.mark.parametrize("name", ["yolo11n", "yolov10n", "yolo26n-pose"])
def test_fused_macs_are_ultralytics_gflops(name: str) -> None:
    fused = ultralytics_model(name).fuse(verbose=False)
    p = tfp.profile(f"ultralytics:{name}.yaml:fused")
    assert round(2 * p.macs / 1e9, 4) == round(get_flops(fused, 640), 4)
    assert p.params == sum(q.numel() for q in fused.parameters())


def test_the_note_says_where_fusing_changes_the_macs() -> None:
    plain, fused = tfp.profile("ultralytics:yolo26n.yaml"), tfp.profile("ultralytics:yolo26n.yaml:fused")
    assert fused.macs < plain.macs
    note = next(n for n in plain.notes if "Ultralytics' GFLOPs" in n)
    assert "one-to-many branch" in note and "ultralytics:yolo26n.yaml:fused" in note
    same = next(n for n in tfp.profile("ultralytics:yolov8n.yaml").notes if "Ultralytics' GFLOPs" in n)
    assert "changes no MAC" in same


def test_an_unknown_yaml_gets_one_line_with_close_names() -> None:
    with pytest.raises(FootprintError, match=r"unknown Ultralytics model 'yolo11q.yaml'.*Did you mean: .*yolo11n"):
        tfp.profile("ultralytics:yolo11q.yaml")


def test_nothing_reaches_for_the_network(monkeypatch: pytest.MonkeyPatch) -> None:
    def refuse(*args: object, **kwargs: object) -> None:
        raise AssertionError("network access")

    monkeypatch.setattr(socket, "getaddrinfo", refuse)
    monkeypatch.setattr(socket.socket, "connect", refuse)
    p = tfp.profile("ultralytics:yolov8n-pose.yaml")
    assert p.params > 0
