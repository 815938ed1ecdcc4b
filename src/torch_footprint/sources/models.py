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
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import torch
from torch import nn

from ..errors import FootprintError
from .building import Built, build_on_meta, require
from .inputs import InputSpec
from .yolo import build_ultralytics

CONFIG_DIR = Path(__file__).parent / "configs"

# --------------------------------------------------------------------------- torchvision

def _tv() -> Any:
    return require("torchvision", "vision", "torchvision models")


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
    timm = require("timm", "timm", "timm models")
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
    transformers = require("transformers", "hf", "Hugging Face models")
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
    transformers = require("transformers", "hf", "Hugging Face models")
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
    if "/" in name or os.sep in name:  # no torchvision name has one: a hub id or a folder that is not there
        raise FootprintError(f"unknown model '{name}': no folder of that name here. A Hugging Face model is "
                             f"written hf:{name}; other sources: timm:NAME, path/to/file.py:factory, "
                             "package.module:factory.")
    return build_torchvision(name, weights, image_size)
