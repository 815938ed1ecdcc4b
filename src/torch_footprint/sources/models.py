"""Model sources: a name or path -> an ``nn.Module`` on the meta device, plus default inputs.

Accepted forms:

* ``resnet50`` (or ``torchvision:resnet50``): a torchvision model; the default input comes
  from its weights' metadata (crop size), without downloading the weights;
* ``timm:convnext_tiny``: a timm model; the default input from its pretrained config;
* ``hf:gpt2`` or a local folder holding ``config.json``: a transformers model built from its
  config only (never weights); ``trust_remote_code`` stays off unless asked for;
* ``ultralytics:yolo11n.yaml`` (``-seg``, ``-pose``, ``-obb``, ``-cls``; v3 to 26, RT-DETR): an
  Ultralytics model built from the YAML file the package ships, without weights; the
  default input is Ultralytics' own image size (640, 224 for classification);
* ``path/to/file.py:factory`` or ``package.module:factory``: any callable returning a module.
"""

from __future__ import annotations

import contextlib
import difflib
import importlib
import importlib.util
import inspect
import json
import logging
import os
import socket
import sys
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import torch
from torch import nn

from ..errors import FootprintError, MissingExtraError
from .inputs import InputSpec

CONFIG_DIR = Path(__file__).parent / "configs"


@dataclass
class Built:
    """A model built without weights, and what is known about its inputs."""

    model: nn.Module
    name: str
    source: str
    default_inputs: list[InputSpec] = field(default_factory=list)
    notes: list[str] = field(default_factory=list)
    # keyword arguments that must accompany every call (e.g. use_cache=False for HF models)
    call_kwargs: dict[str, Any] = field(default_factory=dict)
    # rebuild with other constructor arguments (vit's image_size follows the input size)
    rebuild: Callable[[dict[str, Any]], nn.Module] | None = None
    # entered around the trace: adjustments a model family needs to run on meta tensors
    trace_context: Callable[[], contextlib.AbstractContextManager[Any]] = contextlib.nullcontext
    # the model takes a list of images (torchvision detection): an N,C,H,W input becomes N images
    images_as_list: bool = False


def _require(package: str, extra: str, purpose: str) -> Any:
    try:
        return importlib.import_module(package)
    except ImportError:
        raise MissingExtraError(package, extra, purpose) from None


_INIT_FUNCS = ("uniform_", "normal_", "trunc_normal_", "constant_", "ones_", "zeros_", "eye_", "dirac_",
               "xavier_uniform_", "xavier_normal_", "kaiming_uniform_", "kaiming_normal_", "orthogonal_",
               "sparse_")


_RANDOM_METHODS = ("uniform_", "normal_", "random_", "exponential_", "log_normal_", "cauchy_", "geometric_")


@contextlib.contextmanager
def _skip_init() -> Iterator[None]:
    """Make weight initialisation a no-op while a model is built: torch.nn.init's functions
    and the in-place random fills they use (modules that imported init functions by name
    still end in those fills). Nothing reads the values: the model is traced on meta."""
    saved = {n: getattr(nn.init, n) for n in _INIT_FUNCS if hasattr(nn.init, n)}
    saved_methods = {n: getattr(torch.Tensor, n) for n in _RANDOM_METHODS}
    def keep(*args: Any, **kwargs: Any) -> Any:  # the tensor, unchanged, however it was passed
        return args[0] if args else kwargs.get("tensor", kwargs.get("self"))

    try:
        for n in saved:
            setattr(nn.init, n, keep)
        for n in saved_methods:
            setattr(torch.Tensor, n, keep)
        yield
    finally:
        for n, f in saved.items():
            setattr(nn.init, n, f)
        for n, f in saved_methods.items():
            setattr(torch.Tensor, n, f)


_REAL = {"on": False}


@contextlib.contextmanager
def real_weights() -> Iterator[None]:
    """Inside this context the sources build models for real, initialised as their
    constructors do (for measuring them), instead of on the meta device."""
    old = _REAL["on"]
    _REAL["on"] = True
    try:
        yield
    finally:
        _REAL["on"] = old


def build_on_meta(ctor: Callable[[], nn.Module], what: str) -> tuple[nn.Module, list[str]]:
    """Build on the meta device; where the constructor cannot run there, build for real
    (initialisation skipped) and move to meta. Returns the model and a note saying which.
    Under :func:`real_weights`, build for real with the constructor's own initialisation."""
    if _REAL["on"]:
        try:
            return _check_module(ctor(), what), ["built with random weights (the constructor's initialisation)"]
        except FootprintError:
            raise
        except Exception as e:
            raise FootprintError(f"could not build {what}: {type(e).__name__}: {e}") from e
    try:
        with torch.device("meta"), _skip_init():  # initialising meta tensors would only cost time
            model = ctor()
        return _check_module(model, what), []
    except FootprintError:
        raise
    except Exception as meta_err:  # the constructor needs real values (e.g. torchvision's regnet)
        try:
            with _skip_init():
                model = ctor()
        except Exception as real_err:
            raise FootprintError(
                f"could not build {what}: {type(real_err).__name__}: {real_err}"
            ) from real_err
        model = _check_module(model, what).to("meta")
        return model, [
            f"the constructor cannot run on the meta device ({type(meta_err).__name__}); built on CPU "
            "with initialisation skipped, then moved to meta"
        ]


def _check_module(obj: Any, what: str) -> nn.Module:
    if not isinstance(obj, nn.Module):
        raise FootprintError(f"{what} returned {type(obj).__name__}, not a torch.nn.Module")
    return obj


# --------------------------------------------------------------------------- torchvision

def _tv() -> Any:
    return _require("torchvision", "vision", "torchvision models")


def torchvision_names() -> list[str]:
    return sorted(_tv().models.list_models())


def torchvision_weights(name: str, weights: str | None = None) -> Any | None:
    tv = _tv()
    try:
        enum = tv.models.get_model_weights(name)
    except (ValueError, KeyError):
        return None
    if weights is None:
        return getattr(enum, "DEFAULT", None) or next(iter(enum), None)
    try:
        return enum[weights]
    except KeyError:
        raise FootprintError(
            f"'{name}' has no weights '{weights}'; its weights are: {', '.join(w.name for w in enum)}"
        ) from None


def _tv_kwargs(name: str, w: Any, image_size: int | None) -> dict[str, Any]:
    """The constructor arguments torchvision's builder would set for these weights."""
    kw: dict[str, Any] = {}
    if w is None:
        return kw
    meta = w.meta
    if "categories" in meta and meta["categories"] is not None:
        kw["num_classes"] = len(meta["categories"])
    if name.startswith("vit_"):
        kw["image_size"] = image_size or meta["min_size"][0]
    if name.startswith("maxvit"):
        kw["input_size"] = (image_size, image_size) if image_size else meta["min_size"]
    if name in ("googlenet", "inception_v3"):
        kw.update(transform_input=True, aux_logits=True, init_weights=False)
    return kw


def _tv_default_input(w: Any) -> list[InputSpec]:
    if w is None:
        return []
    crop = getattr(w.transforms, "keywords", {}).get("crop_size")
    if crop is None:
        return []
    size = crop if isinstance(crop, int) else crop[0]
    return [InputSpec((1, 3, size, size))]


def build_torchvision(name: str, weights: str | None = None, image_size: int | None = None) -> Built:
    tv = _tv()
    names = torchvision_names()
    if name not in names:
        close = difflib.get_close_matches(name, names, n=4, cutoff=0.6)
        hint = f" Did you mean: {', '.join(close)}?" if close else ""
        raise FootprintError(
            f"unknown model '{name}': not a torchvision model name.{hint} Other sources: timm:NAME, "
            "hf:ID or a folder with config.json, path/to/file.py:factory, package.module:factory."
        )
    w = torchvision_weights(name, weights)
    builder = tv.models.get_model_builder(name)
    # detection and segmentation builders fetch backbone weights unless told not to
    fixed = {"weights_backbone": None} if "weights_backbone" in inspect.signature(builder).parameters else {}

    def ctor(extra: dict[str, Any] | None = None) -> nn.Module:
        size = (extra or {}).get("image_size", image_size)
        model = builder(weights=None, **fixed, **_tv_kwargs(name, w, size))
        if w is not None and name in ("googlenet", "inception_v3"):
            # Once weights are loaded the builder turns the auxiliary heads off (they never run
            # in eval mode). googlenet's published num_params leaves its heads out and
            # inception_v3's counts its head, so the heads are dropped to match for googlenet.
            model.aux_logits = False
            if name == "googlenet":
                model.aux1 = model.aux2 = None
        return model

    model, notes = build_on_meta(ctor, f"torchvision model '{name}'")
    if w is not None:
        notes.insert(0, f"torchvision weights metadata: {name} {w.name} (weights not loaded)")

    def rebuild(extra: dict[str, Any]) -> nn.Module:
        return build_on_meta(lambda: ctor(extra), f"torchvision model '{name}'")[0]

    needs_size = name.startswith("vit_") or name.startswith("maxvit")
    detection = builder.__module__.startswith("torchvision.models.detection")
    return Built(model, name, "torchvision", _tv_default_input(w), notes,
                 rebuild=rebuild if needs_size else None, images_as_list=detection)


# --------------------------------------------------------------------------- timm

def build_timm(name: str) -> Built:
    timm = _require("timm", "timm", "timm models")
    if not timm.is_model(name):
        close = difflib.get_close_matches(name, timm.list_models(), n=4, cutoff=0.6)
        hint = f" Did you mean: {', '.join(close)}?" if close else ""
        raise FootprintError(f"unknown timm model '{name}'.{hint}")
    model, notes = build_on_meta(lambda: timm.create_model(name, pretrained=False), f"timm model '{name}'")
    cfg = getattr(model, "pretrained_cfg", None) or {}
    size = cfg.get("input_size")
    inputs = [InputSpec((1, *size))] if size else []
    return Built(model, f"timm:{name}", "timm", inputs, notes)


# --------------------------------------------------------------------------- transformers

def _bundled_config(model_id: str) -> Path | None:
    path = CONFIG_DIR / (model_id.replace("/", "--") + ".json")
    return path if path.is_file() else None


def bundled_hf_ids() -> list[str]:
    return sorted(p.stem.replace("--", "/") for p in CONFIG_DIR.glob("*.json"))


def _load_hf_config(ident: str, trust_remote_code: bool) -> tuple[Any, str]:
    transformers = _require("transformers", "hf", "Hugging Face models")
    if os.path.isdir(ident):
        if not os.path.isfile(os.path.join(ident, "config.json")):
            raise FootprintError(f"folder '{ident}' has no config.json")
        try:
            with _quiet_hf():
                config = transformers.AutoConfig.from_pretrained(ident, trust_remote_code=trust_remote_code)
            return config, f"config from {ident}/config.json"
        except (ValueError, OSError) as e:  # OSError: a config.json that is not JSON
            raise FootprintError(f"could not read '{ident}/config.json': {' '.join(str(e).split())}") from e
    bundled = _bundled_config(ident)
    if bundled is not None:
        data = json.loads(bundled.read_text())
        model_type = data.pop("model_type")
        with _quiet_hf():
            config = transformers.AutoConfig.for_model(model_type, **data)
        return config, f"config for '{ident}' shipped with torch-footprint (a copy of the hub's config.json)"
    online = _hub_reachable()
    try:
        with _quiet_hf():
            config = transformers.AutoConfig.from_pretrained(
                ident, trust_remote_code=trust_remote_code, local_files_only=not online)
        return config, f"config for '{ident}' from the Hugging Face hub" + ("" if online else " cache")
    except Exception as e:  # offline, gated, unknown id, or remote code refused
        text = str(e).strip().splitlines()[0] if str(e).strip() else type(e).__name__
        if not online:
            text = "the Hugging Face hub cannot be reached and the config is not in the local cache"
        shipped = ", ".join(bundled_hf_ids())
        raise FootprintError(
            f"could not load the config of '{ident}': {text}. Give a local folder that holds its "
            f"config.json, or one of the configs shipped with torch-footprint: {shipped}"
        ) from e


def _hub_reachable() -> bool:
    """False when offline is asked for or the hub's host name does not resolve (no network):
    then only the local cache is read, instead of minutes of retries."""
    if os.environ.get("HF_HUB_OFFLINE", "").lower() in ("1", "true", "yes", "on"):
        return False
    try:
        from urllib.parse import urlparse

        from huggingface_hub import constants

        host = urlparse(constants.ENDPOINT).hostname or "huggingface.co"
        socket.getaddrinfo(host, 443)
        return True
    except (OSError, ImportError):
        return False


@contextlib.contextmanager
def _quiet_hf() -> Iterator[None]:
    """transformers and huggingface_hub warn through logging; errors reach the user anyway."""
    loggers = [logging.getLogger(n) for n in ("transformers", "huggingface_hub")]
    levels = [lg.level for lg in loggers]
    for lg in loggers:
        lg.setLevel(logging.ERROR)
    try:
        yield
    finally:
        for lg, lv in zip(loggers, levels):
            lg.setLevel(lv)


@contextlib.contextmanager
def hf_meta_context() -> Iterator[None]:
    """transformers looks at position-id values to detect packed sequences, which meta
    tensors cannot answer. For token ids traced without explicit positions the positions
    are 0..T-1, never packed: answer that, as a real run would, so the causal-mask path
    (``is_causal=True``, no mask tensor) is the one a real run takes."""
    try:
        import transformers.masking_utils as mu
    except ImportError:
        yield
        return
    saved = getattr(mu, "find_packed_sequence_indices", None)
    if saved is None:
        yield
        return
    mu.find_packed_sequence_indices = lambda position_ids: None
    try:
        yield
    finally:
        mu.find_packed_sequence_indices = saved


def build_hf(ident: str, trust_remote_code: bool = False) -> Built:
    transformers = _require("transformers", "hf", "Hugging Face models")
    config, how = _load_hf_config(ident, trust_remote_code)
    archs = getattr(config, "architectures", None) or []
    classes = [getattr(transformers, a) for a in archs if hasattr(transformers, a)]

    def ctor() -> nn.Module:
        if classes:
            return classes[0]._from_config(config)
        try:
            return transformers.AutoModelForCausalLM.from_config(config, trust_remote_code=trust_remote_code)
        except ValueError:
            return transformers.AutoModel.from_config(config, trust_remote_code=trust_remote_code)

    dtype = getattr(config, "dtype", None)
    with _quiet_hf():
        model, notes = build_on_meta(ctor, f"Hugging Face model '{ident}'")
    if isinstance(dtype, str):
        dtype = getattr(torch, dtype, None)
    if isinstance(dtype, torch.dtype) and dtype.is_floating_point:
        model = model.to(dtype)
        notes.append(f"parameters in {str(dtype).removeprefix('torch.')}, the checkpoint's dtype")
    notes.insert(0, how)
    max_pos = getattr(config, "max_position_embeddings", None) or getattr(config, "n_positions", None) or 512
    inputs = [InputSpec((1, min(512, int(max_pos))), torch.int64, "input_ids")]
    call_kwargs = {}
    if getattr(config, "use_cache", None) is not None:
        call_kwargs["use_cache"] = False
    return Built(model, f"hf:{ident}", "hf", inputs, notes, call_kwargs, trace_context=hf_meta_context)


# --------------------------------------------------------------------------- ultralytics

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
    return _require("ultralytics", "yolo", "Ultralytics YOLO models")


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
        with _skip_init():
            model = _check_module(ctor(), what)
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
    if _REAL["on"]:
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


# --------------------------------------------------------------------------- factories

def _load_file(path: str) -> Any:
    if not os.path.isfile(path):
        raise FootprintError(f"file '{path}' does not exist")
    mod_name = "_footprint_user_" + Path(path).stem
    spec = importlib.util.spec_from_file_location(mod_name, path)
    if spec is None or spec.loader is None:
        raise FootprintError(f"cannot import '{path}' as a Python file")
    module = importlib.util.module_from_spec(spec)
    sys.modules[mod_name] = module
    try:
        spec.loader.exec_module(module)
    except Exception as e:
        raise FootprintError(f"importing '{path}' raised {type(e).__name__}: {e}") from e
    return module


def _current_directory_importable() -> None:
    """``package.module:factory`` resolves from the current directory, as under ``python -m``
    (the ``footprint`` script, unlike ``python -m``, does not put it on sys.path)."""
    cwd = os.getcwd()
    if not any(os.path.abspath(p or ".") == cwd for p in sys.path):
        sys.path.insert(0, cwd)


def build_factory(ref: str) -> Built:
    target, _, attr = ref.rpartition(":")
    if not attr:
        raise FootprintError(f"'{ref}': expected FILE.py:FACTORY or package.module:FACTORY")
    if target.endswith(".py") or os.sep in target or "/" in target:
        module = _load_file(target)
    else:
        _current_directory_importable()
        try:
            module = importlib.import_module(target)
        except ImportError as e:
            raise FootprintError(f"cannot import module '{target}' (from {os.getcwd()} or the installed "
                                 f"packages): {e}") from e
        except Exception as e:
            raise FootprintError(f"importing '{target}' raised {type(e).__name__}: {e}") from e
    factory = getattr(module, attr, None)
    if factory is None:
        public = [n for n in dir(module) if not n.startswith("_") and callable(getattr(module, n))]
        close = difflib.get_close_matches(attr, public, n=4, cutoff=0.5)
        hint = f" Did you mean: {', '.join(close)}?" if close else ""
        raise FootprintError(f"'{target}' has no attribute '{attr}'.{hint}")
    if not callable(factory):
        raise FootprintError(f"'{ref}' is not callable")
    model, notes = build_on_meta(factory, f"'{ref}'")
    return Built(model, ref, "factory", [], notes)


# --------------------------------------------------------------------------- dispatch

def resolve(name: str, *, weights: str | None = None, trust_remote_code: bool = False,
            image_size: int | None = None) -> Built:
    """Build the model that ``name`` refers to, on the meta device."""
    name = name.strip()
    if not name:
        raise FootprintError("no model name given")
    if name.startswith("timm:"):
        return build_timm(name[5:])
    if name.startswith("hf:"):
        return build_hf(name[3:], trust_remote_code)
    if name.startswith(("ultralytics:", "yolo:")):
        return build_ultralytics(name.split(":", 1)[1])
    if name.startswith(("torchvision:", "tv:")):
        return build_torchvision(name.split(":", 1)[1], weights, image_size)
    if os.path.isdir(name):
        return build_hf(name, trust_remote_code)
    if ":" in name:
        return build_factory(name)
    if name.endswith(".py"):
        raise FootprintError(f"'{name}': name the factory to call, as {name}:FUNCTION")
    return build_torchvision(name, weights, image_size)
