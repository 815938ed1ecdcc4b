"""Ultralytics models (YOLO v3 to 26, RT-DETR; detection, segmentation, pose, OBB,
classification) from the YAML files the package ships, without weights."""

from __future__ import annotations

import difflib
import importlib.util
import os
from collections.abc import Callable
from pathlib import Path
from typing import Any

import torch
from torch import nn

from ..errors import FootprintError
from .building import REAL, Built, build_on_meta, check_module, require, skip_init
from .inputs import InputSpec


def _ultralytics_note(model: nn.Module, name: str) -> str:
    """How the MACs compare with the GFLOPs Ultralytics prints and tabulates: 2 x the MACs of the
    model after ``fuse()`` (``get_flops``, thop at the model's image size). Fusing folds each
    batch norm into its convolution, which changes no MAC as counted here; it also merges
    re-parameterised branches (RepConv, RepVGGDW) and drops an end-to-end head's one-to-many
    branch, which changes them."""
    changes = sorted({type(m).__name__ for m in model.modules() if type(m).__name__ in ("RepConv", "RepVGGDW")})
    if any(n.startswith("one2one_") for m in model.modules() for n in m._modules):
        changes.append("the head's training-only one-to-many branch")
    if any(callable(getattr(getattr(m, "proto", None), "fuse", None)) for m in model.modules()):
        changes.append("the mask prototypes' training-only layers")
    base = name.removesuffix(":fused")
    if not changes:
        return ("Ultralytics' GFLOPs (its tables, the fused model's summary) are 2 x the MACs here: fuse() folds "
                "the batch norms into the convolutions, which changes no MAC (the unfused summary's figure "
                "also counts the batch norms)")
    return ("Ultralytics' GFLOPs (its tables, the fused model's summary) are 2 x the MACs of the model after "
            f"fuse(), which also merges or drops {', '.join(changes)}: lower than 2 x the MACs here; "
            f"ultralytics:{base}:fused profiles that model")


def _ultralytics() -> Any:
    # Ultralytics looks online for fonts, updates and hub events: it never needs to here
    os.environ.setdefault("YOLO_OFFLINE", "1")
    os.environ.setdefault("YOLO_VERBOSE", "False")
    return require("ultralytics", "yolo", "Ultralytics YOLO models")


def ultralytics_names() -> list[str]:
    """The model names the shipped YAML files stand for: a file with scales, ``yolo11.yaml``,
    is ``yolo11n.yaml`` to ``yolo11x.yaml`` (``yolo11n-seg.yaml`` for ``yolo11-seg.yaml``;
    ``yolov5nu.yaml`` too, Ultralytics' name for its anchor-free v5)."""
    _ultralytics()
    import re

    root = Path(importlib.util.find_spec("ultralytics").origin).parent / "cfg" / "models"  # type: ignore[arg-type]
    names = set()
    for path in root.rglob("*.yaml"):
        names.add(path.name)
        m = re.match(r"^(.*?\d+)(.*)$", path.stem)
        if not m or "scales:" not in path.read_text(errors="replace"):
            continue
        head, rest = m.groups()
        for scale in "nslmx":
            names.add(f"{head}{scale}{rest}.yaml")
            if head == "yolov5" and not rest:
                names.add(f"{head}{scale}u.yaml")
    return sorted(names)


def _meta_keeping_strides(ctor: Callable[[], nn.Module], what: str) -> nn.Module:
    """Build on the CPU (initialisation skipped: the constructor runs a forward to find its
    strides, which meta tensors cannot answer) and move to meta, keeping the heads' strides on
    the CPU: Ultralytics moves them with the model, and a head reads them as numbers."""
    try:
        with skip_init():
            model = check_module(ctor(), what)
    except FootprintError:
        raise
    except Exception as e:
        raise FootprintError(f"could not build {what}: {type(e).__name__}: {e}") from e
    strides = {id(m): m.stride.clone() for m in model.modules()
               if isinstance(getattr(m, "stride", None), torch.Tensor) and m.stride.is_floating_point()}
    model = model.to("meta")
    for m in model.modules():
        if id(m) in strides:
            m.stride = strides[id(m)]
    return model


def build_ultralytics(name: str) -> Built:
    """An Ultralytics model from the YAML file its package ships (``yolo11n-seg.yaml``), without
    weights; ``NAME.yaml:fused`` profiles it after ``model.fuse()``, as Ultralytics' GFLOPs do."""
    _ultralytics()
    from ultralytics.nn import tasks

    fused = name.endswith(":fused")
    yaml_name = name.removesuffix(":fused")
    if not yaml_name.endswith((".yaml", ".yml")):
        yaml_name += ".yaml"
    known = ultralytics_names()
    if Path(yaml_name).name not in known and not os.path.isfile(yaml_name):
        close = difflib.get_close_matches(Path(yaml_name).name, known, n=4, cutoff=0.6)
        hint = f" Did you mean: {', '.join(close)}?" if close else ""
        raise FootprintError(f"unknown Ultralytics model '{yaml_name}': no such YAML file ships with "
                             f"ultralytics.{hint}")
    try:
        cfg = tasks.yaml_model_load(yaml_name)
    except Exception as e:
        raise FootprintError(f"could not read the Ultralytics model file '{yaml_name}': {type(e).__name__}: {e}") from e
    head = str(cfg.get("head", [[None, None, ""]])[-1][-2]) if cfg.get("head") else ""
    lowered = Path(yaml_name).name.lower()
    if "world" in lowered or "yoloe" in lowered:
        raise FootprintError(f"'{yaml_name}' is an open-vocabulary model (YOLO-World, YOLOE): it needs a text "
                             "encoder's weights to run, which are never downloaded here")
    task = tasks.guess_model_task(cfg)
    classes = {"detect": tasks.DetectionModel, "segment": tasks.SegmentationModel, "pose": tasks.PoseModel,
               "obb": tasks.OBBModel, "classify": tasks.ClassificationModel}
    for extra in ("SemanticSegmentationModel", "DepthModel"):
        if hasattr(tasks, extra):
            classes[{"SemanticSegmentationModel": "semantic", "DepthModel": "depth"}[extra]] = getattr(tasks, extra)
    cls = tasks.RTDETRDetectionModel if "rtdetr" in head.lower() or "rtdetr" in lowered else classes.get(task)
    if cls is None:
        raise FootprintError(f"'{yaml_name}': Ultralytics task '{task}' is not supported")

    def ctor() -> nn.Module:
        model = cls(cfg, verbose=False)
        if fused:
            model.fuse(verbose=False)
        return model

    what = f"Ultralytics model '{yaml_name}'"
    if REAL["on"]:
        model, notes = build_on_meta(ctor, what)
    else:
        model, notes = _meta_keeping_strides(ctor, what), []
    model.eval()
    channels = int(cfg.get("channels", cfg.get("ch", 3)) or 3)
    size = 224 if task == "classify" else 640
    notes.insert(0, f"Ultralytics model from {Path(cfg['yaml_file']).name} (scale '{cfg.get('scale') or '-'}', "
                    f"task {task}), weights not loaded" + (", after fuse()" if fused else ""))
    if fused:
        notes.append("Ultralytics' GFLOPs (its tables, the fused model's summary) are 2 x the MACs here")
    else:
        notes.append(_ultralytics_note(model, name))
    return Built(model, f"ultralytics:{name}", "ultralytics", [InputSpec((1, channels, size, size))], notes)


def ultralytics_default_input(model: nn.Module) -> list[InputSpec]:
    """For an Ultralytics model given as a module: one image at the size Ultralytics uses by
    default (640, 224 for classification), with the YAML's input channels; none for others."""
    if not type(model).__module__.startswith("ultralytics."):
        return []
    cfg = getattr(model, "yaml", None)
    cfg = cfg if isinstance(cfg, dict) else {}
    channels = int(cfg.get("channels", cfg.get("ch", 3)) or 3)
    classify = type(model).__name__ == "ClassificationModel"
    return [InputSpec((1, channels, 224 if classify else 640, 224 if classify else 640))]
