"""Sweep the model zoos: does footprint profile every architecture whose real forward runs?

For every architecture of the installed transformers (``AutoModel`` of each model type in
``MODEL_MAPPING_NAMES``, built from a small config derived automatically from the config
class's defaults), a stratified sample of timm (or all of it) at its default size, and
every torchvision model (classification, detection, segmentation, video, optical flow):

* build it on the CPU with random weights (never downloaded);
* run the real forward (eval mode, no_grad) on an input chosen from the model's main input;
* count it with ``torch.utils.flop_counter.FlopCounterMode`` on a real forward;
* profile it with ``torch_footprint.profile(model, inputs)``: success, unknown operators,
  parameters against ``sum(p.numel() for p in model.parameters())``, MACs against
  FlopCounterMode's FLOPs / 2;
* the state check: after profile, ``memory`` and ``predict``, the model against a copy made
  before profiling (tests/fixtures/model_state.py: every module's attributes, parameters, buffers and
  hooks, the output on the same input and seed) and the random generators against their
  state before profiling;
* time each step.

Each model runs in its own process (forked from a server that has imported torch and the
zoos once), two at a time at most, with a timeout. The table goes to
``benchmarks/results/model_zoo_sweep.{md,json}`` (written whole, or not at all); records of
models not run this time are kept from the previous file unless ``--fresh`` is given.

    python benchmarks/model_zoo_sweep.py [--only transformers|timm|torchvision]... [--limit N]
        [--timm-sample N] [--models a,b,c] [--timeout S] [--workers N] [--max-gb G] [--out DIR] [--fresh]
    python benchmarks/model_zoo_sweep.py --report-only   # rewrite the report from the JSON file

Target: footprint profiles 100% of the architectures whose real forward runs on CPU (at
least FlopCounterMode's rate), with no unknown operator and exact parameter counts.
"""

from __future__ import annotations

import argparse
import contextlib
import inspect
import json
import multiprocessing as mp
import os
import pkgutil
import re
import sys
import tempfile
import time
import traceback
import warnings
from collections import Counter, defaultdict
from collections.abc import Callable, Iterator
from multiprocessing.connection import Connection, wait
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parent.parent
LIBS = ("transformers", "timm", "torchvision")
TV_KINDS = ("classification", "detection", "segmentation", "video", "optical_flow")
DEFAULT_TIMM_SAMPLE = 120
SEQ = 16  # tokens of a text input

Record = dict[str, Any]
Inputs = tuple[str, Any]  # ("kw", {name: tensor}) or ("pos", [args])


# =========================================================================== errors

def error_text(e: BaseException) -> str:
    """The error's class and its message on one line (at most 400 characters)."""
    msg = " ".join(str(e).split())
    return f"{type(e).__name__}: {msg}"[:400]


def error_where(e: BaseException) -> str:
    """The innermost frame of the traceback, and the innermost one inside torch_footprint."""
    frames = traceback.extract_tb(e.__traceback__)
    if not frames:
        return ""
    last = frames[-1]
    out = f"{_short_path(last.filename)}:{last.lineno} {last.name}"
    ours = [f for f in frames if "torch_footprint" in f.filename]
    if ours and ours[-1] is not last:
        out += f" (footprint: {_short_path(ours[-1].filename)}:{ours[-1].lineno} {ours[-1].name})"
    return out


def _short_path(path: str) -> str:
    for marker in ("site-packages/", "src/"):
        if marker in path:
            return path.split(marker, 1)[1]
    return path


_CLASSY = re.compile(r"\b[A-Z][A-Za-z0-9]*(?:Model|Config|For[A-Z]\w*|Layer|Attention|Block|Encoder|Decoder|Module|"
                     r"Embeddings?|Transformer|Net|Head|Backbone|Stage|Mixer|MLP|Mlp)\b")


def normalise(text: str) -> str:
    """An error message with its numbers, quoted names and class names replaced, so that
    the same failure in different models groups together."""
    s = text
    s = re.sub(r"0x[0-9a-fA-F]+", "0x#", s)
    s = re.sub(r"'[^']*'", "'…'", s)
    s = re.sub(r'"[^"]*"', '"…"', s)
    s = re.sub(r"`[^`]*`", "`…`", s)
    s = re.sub(r"\(([A-Za-z_][\w.]*)\):", "(<Module>):", s)
    s = _CLASSY.sub("<Class>", s)
    s = re.sub(r"\b(?!NoneType\b)[A-Z][a-z0-9]+(?:[A-Z_][A-Za-z0-9_]*[a-z][A-Za-z0-9_]*)\b(?<!Error)(?<!Exception)",
               "<Class>", s)
    s = re.sub(r"-?\d+(?:\.\d+)?(?:e[-+]?\d+)?", "#", s)
    s = re.sub(r"#(?:\s*[,x×*]\s*#)+", "#…", s)
    return s[:240]


# =========================================================================== transformers: small configs

LAYER_KEYS = {
    "num_hidden_layers", "num_layers", "n_layer", "n_layers", "encoder_layers", "decoder_layers",
    "num_encoder_layers", "num_decoder_layers", "encoder_num_layers", "decoder_num_layers", "num_text_layers",
    "num_vision_layers", "text_layers", "vision_layers", "depth", "encoder_depth", "decoder_depth",
    "num_self_attends_per_block", "decoder_num_hidden_layers", "num_decoder_hidden_layers",
    "num_single_layers", "n_text_layer", "n_audio_layer", "num_transformer_layers", "num_mamba_layers",
    "num_x_layers", "num_cross_attention_layers", "depth_num_hidden_layers", "audio_num_hidden_layers",
}
HIDDEN_KEYS = {"hidden_size", "d_model", "n_embd", "n_embed", "model_dim", "embed_dim", "embedding_size",
               "word_embed_proj_dim", "decoder_hidden_size", "n_text_state", "n_audio_state"}
HEAD_KEYS = {"num_attention_heads", "n_head", "num_heads", "encoder_attention_heads", "decoder_attention_heads",
             "n_heads", "decoder_num_attention_heads", "n_text_head", "n_audio_head"}
KV_HEAD_KEYS = {"num_key_value_heads", "num_kv_heads", "n_kv_heads", "multi_query_group_num"}
FFN_KEYS = {"intermediate_size", "ffn_dim", "encoder_ffn_dim", "decoder_ffn_dim", "d_ff", "n_inner",
            "ffn_hidden_size", "moe_intermediate_size", "shared_expert_intermediate_size", "decoder_intermediate_size",
            "expert_intermediate_size", "dense_intermediate_size"}
EXPERT_KEYS = {"num_experts", "num_local_experts", "n_routed_experts", "moe_num_experts", "num_routed_experts"}
TOPK_KEYS = {"num_experts_per_tok", "moe_topk", "num_experts_per_token", "moe_top_k"}
GROUP_KEYS = {"n_group", "topk_group"}
HIDDEN, HEADS, KV_HEADS, FFN, LAYERS, VOCAB, EXPERTS, TOPK = 64, 4, 2, 128, 2, 512, 4, 2


def _is_int(v: Any) -> bool:
    return isinstance(v, int) and not isinstance(v, bool)


def _sub_configs(cfg: Any) -> Iterator[tuple[str, Any]]:
    from transformers import PretrainedConfig

    for k, v in vars(cfg).items():
        if isinstance(v, PretrainedConfig):
            yield k, v


def _token_ids(cfg: Any) -> list[int]:
    """Every special token id or index in the config tree (the vocabulary must hold them)."""
    out: list[int] = []
    for k, v in vars(cfg).items():
        if re.search(r"token_(id|index)$|_token_ids?$|token_id$", k):
            vals = v if isinstance(v, (list, tuple)) else [v]
            out += [x for x in vals if _is_int(x) and x >= 0]
    for _, sub in _sub_configs(cfg):
        out += _token_ids(sub)
    return out


def _hidden_sizes(cfg: Any) -> set[int]:
    """The hidden sizes of every config in the tree (before shrinking)."""
    out = {v for k, v in vars(cfg).items() if k in HIDDEN_KEYS and _is_int(v) and v > HIDDEN}
    for _, sub in _sub_configs(cfg):
        out |= _hidden_sizes(sub)
    return out


MROPE_DEFAULT = [16, 24, 24]  # the section sizes multimodal-rotary models assume when the config has none


def shrink_config(cfg: Any, level: str, vocab: int | None = None, hiddens: set[int] | None = None,
                  mrope: bool = False, layers: int = LAYERS) -> list[str]:
    """Shrink ``cfg`` in place. ``level`` "small": layers (to ``layers``), widths, heads,
    vocabulary, experts; "layers": layers, vocabulary and experts only (the widths stay
    consistent). Returns what was changed."""
    if vocab is None:
        vocab = max([VOCAB - 1, *_token_ids(cfg)]) + 1
    if hiddens is None:
        hiddens = _hidden_sizes(cfg)
    changed: list[str] = []
    attrs = dict(vars(cfg))
    old_layers = next((attrs[k] for k in ("num_hidden_layers", "num_layers", "n_layer", "n_layers")
                       if _is_int(attrs.get(k))), None)

    def put(k: str, v: Any) -> None:
        if attrs.get(k) != v:
            try:
                setattr(cfg, k, v)
                changed.append(f"{k}={v}")
            except Exception:  # a read-only property
                pass

    for k, v in attrs.items():
        if _is_int(v):
            if k in LAYER_KEYS and v > layers:
                put(k, layers)
            elif k == "vocab_size" and v > vocab:
                put(k, vocab)
            elif k in EXPERT_KEYS and v > EXPERTS:
                put(k, EXPERTS)
            elif k in TOPK_KEYS and v > TOPK:
                put(k, TOPK)
            elif k in GROUP_KEYS and v > 1:
                put(k, 1)
        elif k in ("prediction_length", "context_length") and v is None:  # time-series configs have no default
            put(k, 8)
        elif k in ("depths", "encoder_depths", "decoder_depths", "layers_per_stage") and isinstance(v, (list, tuple)):
            put(k, type(v)(min(x, 1) if _is_int(x) else x for x in v))
    if old_layers and old_layers > layers:
        for k, v in attrs.items():  # per-layer lists (layer_types, ...) follow the layer count
            if isinstance(v, (list, tuple)) and len(v) == old_layers and k not in ("depths",):
                new = list(v[:layers])
                if all(isinstance(x, str) for x in v):  # keep one layer of each kind (hybrid models)
                    missing = [x for x in dict.fromkeys(v) if x not in new][: layers - 1]
                    new = new[: layers - len(missing)] + missing
                put(k, type(v)(new))
    if level == "small":
        heads = next((attrs[k] for k in HEAD_KEYS if _is_int(attrs.get(k))), None)
        hidden = next((attrs[k] for k in HIDDEN_KEYS if _is_int(attrs.get(k))), None)
        if hidden and hidden > HIDDEN:
            for k in HIDDEN_KEYS:
                if _is_int(attrs.get(k)) and attrs[k] > HIDDEN:
                    put(k, HIDDEN)
            for k in HEAD_KEYS:
                if _is_int(attrs.get(k)) and attrs[k] > HEADS:
                    put(k, HEADS)
            for k in KV_HEAD_KEYS:
                v = attrs.get(k)
                if _is_int(v) and v > 1:
                    put(k, HEADS if heads and v >= heads else KV_HEADS)
            if _is_int(attrs.get("head_dim")):
                put("head_dim", HIDDEN // HEADS)
            for k in ("rope_parameters", "rope_scaling"):  # multimodal rotary sections sum to head_dim / 2
                rope = attrs.get(k)
                sec = rope.get("mrope_section", MROPE_DEFAULT if mrope else None) if isinstance(rope, dict) else None
                if isinstance(sec, list) and sec and all(_is_int(x) for x in sec) and sum(sec) > HIDDEN // HEADS // 2:
                    half = HIDDEN // HEADS // 2
                    new_sec = [max(1, x * half // sum(sec)) for x in sec]
                    new_sec[0] += half - sum(new_sec)
                    put(k, {**rope, "mrope_section": new_sec})
            for k in FFN_KEYS:
                if _is_int(attrs.get(k)) and attrs[k] > FFN:
                    put(k, FFN)
        for k, v in attrs.items():  # the width of another config it attends to or projects from
            if k not in HIDDEN_KEYS and _is_int(v) and v in hiddens and k.endswith(("hidden_size", "_dim", "_size")) \
                    and not k.startswith(("max_", "vocab", "image", "patch", "intermediate")):
                put(k, HIDDEN)
    for name, sub in _sub_configs(cfg):
        changed += [f"{name}.{c}" for c in shrink_config(sub, level, vocab, hiddens, mrope, layers)]
    return changed


def _hf_config_value(cfg: Any, *keys: str) -> Any:
    """The first of ``keys`` found in the config or its vision/audio/text sub-configs."""
    for c in [cfg, *(s for _, s in _sub_configs(cfg))]:
        for k in keys:
            v = getattr(c, k, None)
            if v is not None:
                return v
    return None


def _image_hw(cfg: Any) -> tuple[int, int]:
    size = _hf_config_value(cfg, "image_size", "img_size", "input_size")
    if isinstance(size, dict):
        size = size.get("height", size.get("shortest_edge", 224))
    if isinstance(size, (list, tuple)) and size and all(_is_int(x) for x in size):
        return (size[-2], size[-1]) if len(size) >= 2 else (size[0], size[0])
    return (size, size) if _is_int(size) and 16 <= size <= 1024 else (224, 224)


def hf_input_candidates(model: Any, cfg: Any) -> list[Inputs]:
    """Inputs to try in order, from the model's main input name; the first that runs wins."""
    import torch

    sig = inspect.signature(model.forward).parameters
    main = getattr(model, "main_input_name", "input_ids")
    vocab = _hf_config_value(cfg, "vocab_size") or VOCAB
    special = set(_token_ids(cfg))
    allowed = [i for i in range(3, min(int(vocab), 512)) if i not in special] or [0]
    g = torch.Generator().manual_seed(0)

    def ids(n: int = SEQ) -> torch.Tensor:
        idx = torch.randint(0, len(allowed), (1, n), generator=g)
        return torch.tensor(allowed, dtype=torch.int64)[idx]

    channels = _hf_config_value(cfg, "num_channels", "in_channels", "in_chans")
    channels = channels if _is_int(channels) and 0 < channels <= 16 else 3
    h, w = _image_hw(cfg)

    def pixels() -> torch.Tensor:
        return torch.randn(1, channels, h, w)

    enc_dec = bool(getattr(cfg, "is_encoder_decoder", False)) and "decoder_input_ids" in sig
    extra_dec = {"decoder_input_ids": ids(8)} if enc_dec else {}
    cands: list[dict[str, Any]] = []
    if main == "input_ids":
        cands.append({"input_ids": ids(), **extra_dec})
        if "decoder_input_ids" in sig and not enc_dec:
            cands.append({"input_ids": ids(), "decoder_input_ids": ids(8)})
        if "pixel_values" in sig:
            cands.append({"input_ids": ids(), "pixel_values": pixels(), **extra_dec})
            cands.append({"input_ids": ids(), "pixel_values": pixels(), "attention_mask": torch.ones(1, SEQ,
                                                                                                   dtype=torch.int64)})
        if "bbox" in sig:
            box = torch.tensor([[0, 0, 10, 10]] * SEQ, dtype=torch.int64)[None]
            cands.append({"input_ids": ids(), "bbox": box})
    elif main in ("pixel_values", "pixel_values_videos"):
        frames = _hf_config_value(cfg, "num_frames")
        if _is_int(frames) and frames > 1:
            cands.append({main: torch.randn(1, frames, channels, h, w)})
            cands.append({main: torch.randn(1, channels, frames, h, w)})
        cands.append({main: pixels(), **extra_dec})
        if "input_ids" in sig:
            cands.append({main: pixels(), "input_ids": ids(), **extra_dec})
    elif main == "input_values":
        mels, max_len = _hf_config_value(cfg, "num_mel_bins"), _hf_config_value(cfg, "max_length")
        if _is_int(mels) and _is_int(max_len):  # spectrogram transformers: (batch, frames, mel bins)
            cands.append({main: torch.randn(1, max_len, mels)})
        cands += [{main: torch.randn(1, 16000), **extra_dec}, {main: torch.randn(1, 1, 16000), **extra_dec}]
        n_ch = _hf_config_value(cfg, "audio_channels", "channels")
        if _is_int(n_ch) and n_ch > 1:
            cands.append({main: torch.randn(1, n_ch, 16000)})
    elif main == "input_features":
        feats = _hf_config_value(cfg, "num_mel_bins", "feature_size", "n_mels", "input_feat_per_channel")
        feats = feats if _is_int(feats) else 80
        per_channel = _hf_config_value(cfg, "input_feat_per_channel")
        in_ch = _hf_config_value(cfg, "input_channels")
        if _is_int(per_channel) and _is_int(in_ch):
            feats = per_channel * in_ch
        src = _hf_config_value(cfg, "max_source_positions")
        frames = 2 * src if _is_int(src) and src <= 4000 else 3000
        for shape in ((1, feats, frames), (1, 200, feats), (1, feats, 200), (1, feats, 3000)):
            cands.append({main: torch.randn(*shape), **extra_dec})
            masks = [k for k in sig if k in ("attention_mask", "input_features_mask", "feature_attention_mask")]
            t = shape[1] if shape[2] == feats and shape[1] != feats else shape[2]
            if masks:
                cands.append({main: torch.randn(*shape), **{m: torch.ones(1, t, dtype=torch.int64) for m in masks},
                              **extra_dec})
    elif main == "past_values":
        ctx = _hf_config_value(cfg, "context_length") or _hf_config_value(cfg, "prediction_length") or 32
        pred = _hf_config_value(cfg, "prediction_length") or 8
        n_in = _hf_config_value(cfg, "num_input_channels")
        if _is_int(n_in):
            cands.append({main: torch.randn(1, ctx, n_in)})
        lags = _hf_config_value(cfg, "lags_sequence") or [0]
        n = ctx + max(lags)
        n_tf = (_hf_config_value(cfg, "num_time_features") or 0)
        size = _hf_config_value(cfg, "input_size") or 1
        shape = (1, n) if size == 1 else (1, n, size)
        fshape = (1, pred) if size == 1 else (1, pred, size)
        cands.append({main: torch.randn(*shape), "past_time_features": torch.randn(1, n, n_tf),
                      "past_observed_mask": torch.ones(*shape), "future_values": torch.randn(*fshape),
                      "future_time_features": torch.randn(1, pred, n_tf)})
    elif main == "flattened_patches":
        dim = _hf_config_value(cfg, "patch_embed_hidden_size") or 768
        cands.append({main: torch.randn(1, 64, dim + 2), **extra_dec})
    else:
        cands.append({main: ids()})
        cands.append({main: torch.randn(1, SEQ)})
        cands.append({main: pixels()})
    return [("kw", c) for c in cands]


def _uses_mrope(cfg: Any) -> bool:
    """Whether the model's code reads rotary sections (multimodal rotary position embeddings)."""
    import importlib.util

    spec = importlib.util.find_spec(type(cfg).__module__.replace(".configuration_", ".modeling_"))
    try:
        return bool(spec and spec.origin and "mrope_section" in Path(spec.origin).read_text())
    except OSError:
        return False


def build_transformers(model_type: str, level: str) -> tuple[Any, list[Inputs], dict[str, Any]]:
    from transformers import AutoConfig, AutoModel
    from transformers.utils import logging as hf_logging

    hf_logging.set_verbosity_error()
    cfg = AutoConfig.for_model(model_type)
    changed = shrink_config(cfg, level, mrope=_uses_mrope(cfg))
    if hasattr(cfg, "use_cache"):
        cfg.use_cache = False
    model = AutoModel.from_config(cfg)
    return model, hf_input_candidates(model, cfg), {"config": level, "class": type(model).__name__,
                                                    "changed": changed[:40]}


# =========================================================================== timm and torchvision

def family(name: str) -> str:
    """timm's architecture family: the name up to the first '_' or digit."""
    return re.split(r"[_\d]", name, maxsplit=1)[0] or name


_BIG = re.compile(r"huge|giant|gigantic|large|xlarge|xxlarge|enormous|so400m|so150m|_g_|_e_|[0-9]+b_|_h_|_l_|"
                  r"448|512|384|_gf|y_128|y_320|xl|big")


def timm_sample(names: list[str], n: int) -> list[str]:
    """``n`` names spread over the families (round robin, smaller-sounding variants first);
    n <= 0: all of them."""
    if n <= 0 or n >= len(names):
        return list(names)
    fams: dict[str, list[str]] = defaultdict(list)
    for name in names:
        fams[family(name)].append(name)
    for v in fams.values():
        v.sort(key=lambda s: (bool(_BIG.search(s)), len(s), s))
    order = sorted(fams)
    picked: list[str] = []
    rnd = 0
    while len(picked) < n:
        row = [fams[f][rnd] for f in order if rnd < len(fams[f])]
        if not row:
            break
        if len(picked) + len(row) > n:  # spread the last round evenly over the families
            step = len(row) / (n - len(picked))
            row = [row[int(i * step)] for i in range(n - len(picked))]
        picked += row
        rnd += 1
    return sorted(picked)


def build_timm(name: str) -> tuple[Any, list[Inputs], dict[str, Any]]:
    import timm
    import torch

    model = timm.create_model(name, pretrained=False)
    size = (getattr(model, "pretrained_cfg", None) or {}).get("input_size") or (3, 224, 224)
    return model, [("pos", [torch.randn(1, *size)])], {"input_size": list(size)}


def tv_kind(name: str) -> str:
    import torchvision

    module = torchvision.models.get_model_builder(name).__module__
    for kind in TV_KINDS[1:]:
        if f".{kind}." in module + ".":
            return kind
    return "classification"


def _tv_weights(name: str) -> list[Any]:
    import torchvision

    try:
        return list(torchvision.models.get_model_weights(name))
    except Exception:
        return []


def _crop(w: Any) -> tuple[int, int] | None:
    crop = getattr(getattr(w, "transforms", None), "keywords", {}).get("crop_size")
    if crop is None:
        return None
    return (crop, crop) if isinstance(crop, int) else (crop[0], crop[-1])


def build_torchvision(name: str) -> tuple[Any, list[Inputs], dict[str, Any]]:
    import torch
    import torchvision

    builder = torchvision.models.get_model_builder(name)
    kwargs = {"weights_backbone": None} if "weights_backbone" in inspect.signature(builder).parameters else {}
    model = builder(weights=None, **kwargs)
    kind = tv_kind(name)
    weights = _tv_weights(name)
    crops = [c for c in (_crop(w) for w in weights) if c]
    if kind == "classification":
        h, w = min(crops) if crops and not name.startswith(("vit_", "maxvit")) else (224, 224)
        inputs: Inputs = ("pos", [torch.randn(1, 3, h, w)])
    elif kind == "detection":
        inputs = ("pos", [[torch.rand(3, 320, 320)]])
    elif kind == "segmentation":
        inputs = ("pos", [torch.randn(1, 3, 224, 224)])
    elif kind == "video":
        meta = weights[0].meta if weights else {}
        h, w = crops[0] if crops else (112, 112)
        frames = max(8, int(meta.get("min_temporal_size", 8)))
        inputs = ("pos", [torch.randn(1, 3, frames, h, w)])
    else:  # optical flow: two images
        inputs = ("pos", [torch.randn(1, 3, 128, 128), torch.randn(1, 3, 128, 128)])
    return model, [inputs], {"kind": kind}


# =========================================================================== one model, in its own process

def _call(model: Any, inputs: Inputs) -> Any:
    kind, value = inputs
    return model(**value) if kind == "kw" else model(*value)


def _describe(inputs: Inputs) -> str:
    import torch

    def one(x: Any) -> str:
        if isinstance(x, torch.Tensor):
            return f"{tuple(x.shape)}:{str(x.dtype).removeprefix('torch.')}"
        if isinstance(x, (list, tuple)):
            return "[" + ", ".join(one(v) for v in x) + "]"
        return type(x).__name__

    kind, value = inputs
    if kind == "kw":
        return ", ".join(f"{k}={one(v)}" for k, v in value.items())
    return ", ".join(one(v) for v in value)


def _attempt(lib: str, name: str, level: str, rec: Record, send: Callable[[Record], None]) -> tuple[Any, Inputs]:
    """Build the model and run its real forward on the first input candidate that works."""
    import torch

    rec.update(stage="build", config=level)
    send(rec)
    t = time.perf_counter()
    try:
        if lib == "transformers":
            model, cands, info = build_transformers(name, level)
        elif lib == "timm":
            model, cands, info = build_timm(name)
        else:
            model, cands, info = build_torchvision(name)
    except Exception as e:
        rec.update(built=False, build_error=error_text(e), build_where=error_where(e),
                   build_s=round(time.perf_counter() - t, 3))
        return None, ("kw", {})
    model.eval()
    rec.update(built=True, build_error=None, build_s=round(time.perf_counter() - t, 3), info=info,
               params_model=sum(p.numel() for p in model.parameters()), stage="forward")
    send(rec)
    first_err: BaseException | None = None
    errors: list[str] = []
    t = time.perf_counter()
    for cand in cands:
        try:
            with torch.no_grad():
                _call(model, cand)
        except Exception as e:
            first_err = first_err or e
            errors.append(f"{_describe(cand)} -> {error_text(e)[:200]}")
            rec["forward_attempts"] = errors
            continue
        rec.update(forward_ok=True, forward_error=None, inputs=_describe(cand),
                   forward_s=round(time.perf_counter() - t, 3))
        return model, cand
    assert first_err is not None
    rec.update(forward_ok=False, forward_error=error_text(first_err), forward_where=error_where(first_err),
               inputs=_describe(cands[0]), forward_s=round(time.perf_counter() - t, 3))
    return model, cands[0]


def run_model(lib: str, name: str, send: Callable[[Record], None]) -> Record:
    import torch
    from torch.utils.flop_counter import FlopCounterMode

    torch.set_num_threads(1)
    torch.manual_seed(0)
    rec: Record = {"lib": lib, "name": name, "built": False, "forward_ok": False}
    model, inputs = _attempt(lib, name, "small" if lib == "transformers" else "default", rec, send)
    if lib == "transformers" and not rec["forward_ok"]:
        first = dict(rec)
        model, inputs = None, ("kw", {})
        retry: Record = {"lib": lib, "name": name, "built": False, "forward_ok": False}
        model, inputs = _attempt(lib, name, "layers", retry, send)
        if retry["forward_ok"] or (retry["built"] and not first["built"]):
            retry["small_config_error"] = first.get("build_error") or first.get("forward_error")
            rec = retry
        else:
            rec = first
            model, inputs = (None, ("kw", {})) if not first["built"] else _attempt(lib, name, "small", rec, send)
    if not rec["built"]:
        rec["stage"] = "done"
        return rec

    rec["stage"] = "flopcounter"
    send(rec)
    t = time.perf_counter()
    try:
        with torch.no_grad(), FlopCounterMode(display=False) as fc:
            _call(model, inputs)
        rec.update(fc_ok=True, fc_flops=int(fc.get_total_flops()))
    except Exception as e:
        rec.update(fc_ok=False, fc_error=error_text(e))
    rec["fc_s"] = round(time.perf_counter() - t, 3)

    rec["stage"] = "footprint"
    send(rec)
    try:
        import copy

        reference = copy.deepcopy(model)  # never profiled: the state check compares with it
    except Exception as e:
        reference = None
        rec["state_error"] = f"the model cannot be copied: {error_text(e)}"
    rng_before = (torch.random.default_generator.get_state(), __import__("random").getstate())
    t = time.perf_counter()
    try:
        import torch_footprint as tfp

        p = tfp.profile(model, inputs[1])
        rec.update(fp_ok=True, fp_params=int(p.params), fp_macs=int(p.macs), fp_flops=int(p.flops),
                   fp_unknown={str(k): int(v) for k, v in p.unknown_ops.items()},
                   fp_notes=[" ".join(str(n).split())[:200] for n in p.notes][:5])
    except Exception as e:
        from torch_footprint.errors import FootprintError

        rec.update(fp_ok=False, fp_error=error_text(e), fp_where=error_where(e),
                   fp_internal=not isinstance(e, FootprintError))
    rec["fp_s"] = round(time.perf_counter() - t, 3)
    if rec.get("fp_ok") and reference is not None:
        rec["stage"] = "state"
        send(rec)
        t = time.perf_counter()
        rec.update(state_check(model, reference, inputs, rng_before))
        rec["state_s"] = round(time.perf_counter() - t, 3)
    rec["stage"] = "done"
    return rec


def state_check(model: Any, reference: Any, inputs: Inputs, rng_before: Any) -> Record:
    """After profile, memory and predict: is the model as a copy that was never profiled
    (every module's attributes, parameters, buffers and hooks; its output on the sweep's input
    with the same seed) and are the random generators where they were before profile?
    (tests/fixtures/model_state.py compares.)"""
    import torch

    import torch_footprint as tfp

    sys.path.insert(0, str(ROOT / "tests" / "fixtures"))
    from model_state import outputs_differ, rng_state, state_differences

    out: Record = {}
    for verb in ("memory", "predict"):
        try:
            if verb == "memory":
                tfp.memory(model, inputs[1])
            else:
                tfp.predict(model, "h100-sxm", inputs[1])
        except Exception as e:  # a verb that fails must leave the model as it found it all the same
            out.setdefault("state_verb_errors", []).append(f"{verb}: {error_text(e)[:200]}")
    after = rng_state()
    rng_same = bool(torch.equal(rng_before[0], after[0]) and rng_before[1] == after[1])
    try:
        diffs = state_differences(model, reference)
    except Exception as e:
        diffs = [f"the comparison failed: {error_text(e)}"]
    try:
        output = outputs_differ(model, reference, lambda m: _call(m, inputs))
    except Exception as e:  # the never-profiled copy fails too: nothing to compare
        output = None
        out["state_output_skipped"] = error_text(e)[:200]
    out.update(state_ok=not diffs and output is None and rng_same, state_diffs=diffs[:5],
               state_output=output, state_rng=rng_same)
    return out


def _child(lib: str, name: str, conn: Connection, max_gb: float,
           runner: Callable[[str, str, Callable[[Record], None]], Record] | None = None) -> None:
    if max_gb > 0:  # a model too big for the machine fails to allocate instead of swapping others out
        import resource

        limit = int(max_gb * 2**30)
        with contextlib.suppress(ValueError, OSError):
            resource.setrlimit(resource.RLIMIT_DATA, (limit, limit))
    devnull = os.open(os.devnull, os.O_WRONLY)
    os.dup2(devnull, 1)
    os.dup2(devnull, 2)
    warnings.filterwarnings("ignore")

    def send(rec: Record) -> None:
        conn.send(dict(rec))

    try:
        rec = (runner or run_model)(lib, name, send)
    except BaseException as e:  # noqa: BLE001 - report anything, the parent decides
        rec = {"lib": lib, "name": name, "built": False, "forward_ok": False, "stage": "done",
               "crash": error_text(e), "crash_where": error_where(e)}
    conn.send(rec)
    conn.close()


# =========================================================================== the sweep

def list_tasks(libs: list[str], timm_n: int, only_models: list[str] | None) -> list[tuple[str, str]]:
    tasks: list[tuple[str, str]] = []
    for lib in libs:
        if lib == "transformers":
            from transformers.models.auto.modeling_auto import MODEL_MAPPING_NAMES

            names = sorted(MODEL_MAPPING_NAMES)
        elif lib == "timm":
            import timm

            all_names = timm.list_models()
            names = [n for n in all_names if n in only_models] if only_models else timm_sample(all_names, timm_n)
        else:
            import torchvision

            names = []
            for mod in (torchvision.models, torchvision.models.detection, torchvision.models.segmentation,
                        torchvision.models.video, torchvision.models.optical_flow):
                names += sorted(torchvision.models.list_models(module=mod))
        if only_models:
            names = [n for n in names if n in only_models]
        tasks += [(lib, n) for n in names]
    return tasks


def preload_modules() -> list[str]:
    """What the fork server imports once: torch, the zoos and every module of torch_footprint
    (so a refactoring under way in src/ does not change the code halfway through a sweep)."""
    mods = ["torch", "torch.utils.flop_counter", "transformers", "transformers.modeling_utils",
            "transformers.models.auto.modeling_auto", "timm", "torchvision", "torch_footprint"]
    try:
        import torch_footprint

        mods += [m.name for m in pkgutil.walk_packages(torch_footprint.__path__, "torch_footprint.")
                 if not m.name.endswith("__main__")]
    except Exception:
        pass
    return mods


def footprint_ready(tries: int = 10, pause: float = 60.0) -> str:
    """Wait until torch_footprint imports and profiles a Linear (its source may be mid-edit):
    returns where it was imported from."""
    import subprocess

    code = ("import torch, torch_footprint as tfp; tfp.profile(torch.nn.Linear(4, 4), [torch.randn(2, 4)]); "
            "print(tfp.__file__)")
    for i in range(tries):
        proc = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True)
        if proc.returncode == 0:
            return proc.stdout.strip()
        last = (proc.stderr.strip().splitlines() or ["?"])[-1]
        print(f"torch_footprint does not work yet ({last}); retrying in {pause:.0f} s ({i + 1}/{tries})", flush=True)
        time.sleep(pause)
    raise SystemExit("torch_footprint does not import: giving up")


def footprint_source(path: str) -> str:
    import subprocess

    if not Path(path).resolve().is_relative_to(ROOT.resolve()):
        return f"{path} (outside this repository: its commit is not known here)"

    head = subprocess.run(["git", "-C", str(ROOT), "rev-parse", "--short", "HEAD"], capture_output=True, text=True)
    dirty = subprocess.run(["git", "-C", str(ROOT), "status", "--porcelain", "src"], capture_output=True, text=True)
    state = "with uncommitted changes in src/" if dirty.stdout.strip() else "clean"
    return f"{path} (repository HEAD {head.stdout.strip()}, working tree {state})"


def sweep(tasks: list[tuple[str, str]], workers: int, timeout: float, max_gb: float = 0,
          runner: Callable[[str, str, Callable[[Record], None]], Record] | None = None,
          describe: Callable[[Record], str] | None = None) -> list[Record]:
    """Run ``runner(lib, name, send)`` (default :func:`run_model`) for every task, each in a
    process of its own, ``workers`` at once; ``describe`` prints a finished record's line."""
    ctx = mp.get_context("forkserver")
    ctx.set_forkserver_preload(preload_modules())
    pending = list(tasks)
    running: dict[Connection, dict[str, Any]] = {}
    results: list[Record] = []
    retried: set[tuple[str, str]] = set()
    total = len(tasks)
    t_start = time.perf_counter()

    def finish(conn: Connection, rec: Record) -> None:
        job = running.pop(conn)
        job["proc"].join(5)
        if job["proc"].is_alive():
            job["proc"].kill()
            job["proc"].join()
        conn.close()
        rec["seconds"] = round(time.perf_counter() - job["t0"], 2)
        results.append(rec)
        print(f"[{len(results)}/{total} {time.perf_counter() - t_start:6.0f}s] {(describe or line)(rec)}", flush=True)

    while pending or running:
        while pending and len(running) < workers:
            lib, name = pending.pop(0)
            parent, child = ctx.Pipe(duplex=False)
            proc = ctx.Process(target=_child, args=(lib, name, child, max_gb, runner), daemon=True)
            proc.start()
            child.close()
            running[parent] = {"proc": proc, "t0": time.perf_counter(), "last": {"lib": lib, "name": name,
                                                                               "built": False, "forward_ok": False,
                                                                               "stage": "start"}}
        for conn in wait(list(running), timeout=1.0):
            job = running[conn]
            try:
                rec = conn.recv()
            except (EOFError, OSError):
                last = dict(job["last"])
                job["proc"].join(5)
                key = (last["lib"], last["name"])
                if last.get("stage") == "start" and key not in retried:  # the process never started: again, once
                    retried.add(key)
                    running.pop(conn)
                    conn.close()
                    pending.insert(0, key)
                    time.sleep(5)
                    continue
                last["crash"] = f"process died (exit code {job['proc'].exitcode}) during {last.get('stage')}"
                finish(conn, _mark_stage_failed(last, last["crash"]))
                continue
            job["last"] = rec
            if rec.get("stage") == "done":
                finish(conn, rec)
        now = time.perf_counter()
        for conn, job in list(running.items()):
            if now - job["t0"] > timeout:
                job["proc"].kill()
                last = dict(job["last"])
                last["timeout"] = True
                finish(conn, _mark_stage_failed(last, f"timeout after {timeout:.0f} s during {last.get('stage')}"))
    return results


def _mark_stage_failed(rec: Record, why: str) -> Record:
    stage = rec.get("stage")
    if stage in ("start", "build"):
        rec.update(built=False, build_error=why)
    elif stage == "forward":
        rec.update(forward_ok=False, forward_error=why)
    elif stage == "flopcounter":
        rec.update(fc_ok=False, fc_error=why)
    elif stage == "footprint":
        rec.update(fp_ok=False, fp_error=why, fp_internal=False)
    elif stage == "state":
        rec.update(state_ok=False, state_diffs=[why])
    rec["stage"] = "done"
    return rec


def line(rec: Record) -> str:
    def mark(ok: Any) -> str:
        return "ok " if ok else ("-- " if ok is None else "ERR")

    s = (f"{rec['lib']:12s} {rec['name'][:40]:40s} build {mark(rec.get('built'))} fwd {mark(rec.get('forward_ok'))} "
         f"fc {mark(rec.get('fc_ok'))} fp {mark(rec.get('fp_ok'))}")
    if rec.get("fp_ok"):
        s += f" params {'=' if rec['fp_params'] == rec.get('params_model') else '!='}"
        if "state_ok" in rec:
            s += f" state {'ok' if rec['state_ok'] else 'ERR'}"
        if rec.get("fp_unknown"):
            s += f" unknown {','.join(rec['fp_unknown'])}"
    err = rec.get("fp_error") or rec.get("forward_error") or rec.get("build_error") or rec.get("crash")
    if err:
        s += f" | {err[:110]}"
    return s


# =========================================================================== report

def summarise(records: list[Record]) -> dict[str, Any]:
    out: dict[str, Any] = {}
    for lib in LIBS:
        rs = [r for r in records if r["lib"] == lib]
        if not rs:
            continue
        fwd = [r for r in rs if r.get("forward_ok")]
        fp = [r for r in rs if r.get("fp_ok")]

        def exact(r: Record) -> bool:
            return bool(r.get("fp_ok")) and r.get("fp_params") == r.get("params_model")

        def macs_agree(r: Record) -> bool:
            if not (r.get("fp_ok") and r.get("fc_ok")):
                return False
            a, b = 2 * r["fp_macs"], r["fc_flops"]
            return abs(a - b) <= 0.01 * max(a, b, 1)

        row = {
            "models": len(rs),
            "built": sum(bool(r.get("built")) for r in rs),
            "forward_runs": len(fwd),
            "flopcounter": sum(bool(r.get("fc_ok")) for r in rs),
            "footprint": len(fp),
            "footprint_no_unknown": sum(bool(r.get("fp_ok")) and not r.get("fp_unknown") for r in rs),
            "footprint_params_exact": sum(exact(r) for r in rs),
            "flopcounter_of_forward": sum(bool(r.get("fc_ok")) for r in fwd),
            "footprint_of_forward": sum(bool(r.get("fp_ok")) for r in fwd),
            "no_unknown_of_forward": sum(bool(r.get("fp_ok")) and not r.get("fp_unknown") for r in fwd),
            "params_exact_of_forward": sum(exact(r) for r in fwd),
            "macs_agree_flopcounter": sum(macs_agree(r) for r in fwd),
            "footprint_where_forward_fails": sum(bool(r.get("fp_ok")) for r in rs if not r.get("forward_ok")),
            "state_checked": sum("state_ok" in r for r in fp),
            "state_ok": sum(bool(r.get("state_ok")) for r in fp),
            "state_not_checked": [r["name"] for r in fp if "state_ok" not in r],
            "timeouts": sum(bool(r.get("timeout")) for r in rs),
            "configs_of_forward": dict(Counter(str(r.get("config")) for r in fwd)),
            "seconds": {k: round(sum(r.get(k) or 0 for r in rs), 1)
                        for k in ("build_s", "forward_s", "fc_s", "fp_s", "seconds")},
        }
        causes: dict[str, dict[str, Any]] = {}
        row["footprint_not_reached"] = [r["name"] for r in rs if r.get("built") and "fp_ok" not in r]
        for r in rs:
            if r.get("built") and r.get("fp_ok") is False:
                err = r.get("fp_error") or "?"
                c = causes.setdefault(normalise(err), {"models": [], "forward_ok": 0, "example": err,
                                                       "where": r.get("fp_where", "")})
                c["models"].append(r["name"])
                c["forward_ok"] += bool(r.get("forward_ok"))
        row["footprint_failures"] = dict(sorted(causes.items(), key=lambda kv: (-kv[1]["forward_ok"],
                                                                                -len(kv[1]["models"]))))
        unknown: dict[str, list[str]] = defaultdict(list)
        for r in rs:
            for op in r.get("fp_unknown") or {}:
                unknown[op].append(r["name"])
        row["unknown_ops"] = dict(sorted(unknown.items(), key=lambda kv: -len(kv[1])))
        row["state_failures"] = {r["name"]: {"diffs": r.get("state_diffs"), "output": r.get("state_output"),
                                             "rng_same": r.get("state_rng"), "verb_errors": r.get("state_verb_errors")}
                                 for r in fp if "state_ok" in r and not r["state_ok"]}
        row["params_mismatch"] = {r["name"]: {"model": r.get("params_model"), "footprint": r.get("fp_params")}
                                  for r in rs if r.get("fp_ok") and not exact(r)}
        build_fail: Counter[str] = Counter(normalise(r.get("build_error") or r.get("crash") or "?")
                                           for r in rs if not r.get("built"))
        fwd_fail: Counter[str] = Counter(normalise(r.get("forward_error") or "?")
                                         for r in rs if r.get("built") and not r.get("forward_ok"))
        fc_fail: dict[str, list[str]] = defaultdict(list)
        for r in fwd:
            if not r.get("fc_ok"):
                fc_fail[normalise(r.get("fc_error") or "?")].append(r["name"])
        row["build_failures"] = dict(build_fail.most_common())
        row["forward_failures"] = dict(fwd_fail.most_common())
        row["flopcounter_failures_of_forward"] = dict(fc_fail)
        out[lib] = row
    return out


def _pct(a: int, b: int) -> str:
    return f"{a}/{b} ({100 * a / b:.1f}%)" if b else f"{a}/0"


def headline(summary: dict[str, Any]) -> list[str]:
    lines = []
    for lib, s in summary.items():
        n = s["forward_runs"]
        lines.append(f"{lib}: footprint profiles {_pct(s['footprint_of_forward'], n)} of the models whose real forward "
                     f"runs; FlopCounterMode {_pct(s['flopcounter_of_forward'], n)}; no unknown op "
                     f"{_pct(s['no_unknown_of_forward'], n)}; params exact {_pct(s['params_exact_of_forward'], n)}"
                     + (f"; model left as found after profile, memory and predict {_pct(s['state_ok'], s['footprint'])}"
                        if "state_ok" in s else ""))
    return lines


def markdown(summary: dict[str, Any], meta: dict[str, Any]) -> str:
    cols = [("models", "models"), ("built", "built"), ("forward_runs", "real forward runs"),
            ("flopcounter", "FlopCounterMode"), ("footprint", "footprint"),
            ("footprint_no_unknown", "footprint, no unknown op"), ("footprint_params_exact", "footprint, params exact"),
            ("macs_agree_flopcounter", "2×MACs = FlopCounterMode (1%)"), ("state_ok", "left as found"),
            ("timeouts", "timeouts")]
    out = ["# Model zoo sweep: footprint against the real forward and FlopCounterMode", ""]
    out += [f"- {k}: {v}" for k, v in meta.items()]
    out += ["", "## Headline", ""] + [f"- {h}" for h in headline(summary)]
    out += ["", "## Counts", "", "| library | " + " | ".join(c[1] for c in cols) + " |",
            "|---|" + "---:|" * len(cols)]
    for lib, s in summary.items():
        out.append(f"| {lib} | " + " | ".join(str(s.get(c[0], "-")) for c in cols) + " |")
    out += ["", "Among the models whose real forward runs:", "", "| library | forward runs | FlopCounterMode | "
            "footprint | no unknown op | params exact |", "|---|---:|---:|---:|---:|---:|"]
    for lib, s in summary.items():
        n = s["forward_runs"]
        out.append(f"| {lib} | {n} | {_pct(s['flopcounter_of_forward'], n)} | {_pct(s['footprint_of_forward'], n)} | "
                   f"{_pct(s['no_unknown_of_forward'], n)} | {_pct(s['params_exact_of_forward'], n)} |")
    out += ["", "Configs of the models whose real forward runs: "
            + "; ".join(f"{lib} {s['configs_of_forward']}" for lib, s in summary.items())]
    out += ["", "Seconds summed over models (build, real forward, FlopCounterMode, footprint, whole process):", ""]
    out += [f"- {lib}: {s['seconds']}" for lib, s in summary.items()]
    for lib, s in summary.items():
        out += ["", f"## {lib}", "", "### footprint failures by cause (built models)", ""]
        if not s["footprint_failures"]:
            out.append("none")
        for cause, c in s["footprint_failures"].items():
            out += [f"- **{len(c['models'])}** ({c['forward_ok']} with a working real forward): `{cause}`",
                    f"  - e.g. `{c['example'][:300]}`" + (f" at `{c['where']}`" if c["where"] else ""),
                    f"  - models: {', '.join(c['models'])}"]
        if s["footprint_not_reached"]:
            out.append(f"- not reached (timeout or crash in an earlier step): {', '.join(s['footprint_not_reached'])}")
        out += ["", "### unknown operators (models hitting each)", ""]
        out += [f"- `{op}`: {len(ms)} ({', '.join(ms[:8])}{', …' if len(ms) > 8 else ''})"
                for op, ms in s["unknown_ops"].items()] or ["none"]
        out += ["", "### state check: the model after profile, memory and predict against a never-profiled copy", ""]
        if "state_ok" in s:
            out.append(f"{s['state_ok']} of the {s['state_checked']} models checked are left as found (attributes "
                       "of every module, parameters, buffers, hooks, the output on the sweep's input, the random "
                       "generators)" + (f"; not checked: {', '.join(s['state_not_checked'])}"
                                         if s["state_not_checked"] else ""))
            out += [f"- {m}: {v}" for m, v in s["state_failures"].items()]
        else:
            out.append("not run")
        out += ["", "### parameter mismatches (model vs footprint)", ""]
        out += [f"- {m}: {v['model']} vs {v['footprint']}" for m, v in s["params_mismatch"].items()] or ["none"]
        out += ["", "### FlopCounterMode failures where the real forward runs", ""]
        out += [f"- {len(ms)}: `{c}` ({', '.join(ms[:6])})" for c, ms in
                s["flopcounter_failures_of_forward"].items()] or ["none"]
        out += ["", "### build failures (not counted as forward runs)", ""]
        out += [f"- {n}: `{c}`" for c, n in s["build_failures"].items()] or ["none"]
        out += ["", "### real forward failures", ""]
        out += [f"- {n}: `{c}`" for c, n in s["forward_failures"].items()] or ["none"]
    return "\n".join(out) + "\n"


def static_meta() -> dict[str, str]:
    """How the sweep builds and counts (the same for every run of this script)."""
    return {
        "transformers configs": f"AutoModel of every model type in MODEL_MAPPING_NAMES; defaults of each config "
                                f"class, shrunk to {LAYERS} layers, hidden {HIDDEN}, {HEADS} heads, FFN {FFN}, vocab "
                                f"{VOCAB} (or the largest special token id + 1), {EXPERTS} experts (config 'small'); "
                                "where that fails to build or run, layers/vocab/experts only (config 'layers')",
        "timm": "a stratified sample over the architecture families (--timm-sample N in the runs; 0: all), at the "
                "default input size from pretrained_cfg",
        "torchvision": "every model of list_models() for classification (smallest crop of its weights; vit_ and "
                       "maxvit at 224), detection (a list of one 3x320x320 image), segmentation (224), video "
                       "(weights' crop, max(8, min_temporal_size) frames), optical flow (two 1x3x128x128 images)",
        "counted": "footprint rows count models it profiled (with or without a working real forward); the 'of the "
                   "forward runs' figures count only models whose real forward runs; a later run of a model replaces "
                   "its earlier record; '2×MACs = FlopCounterMode' is informational: FlopCounterMode counts no FLOPs "
                   "for some ops (grouped_mm of MoE experts, _native_multi_head_attention), and footprint's MACs "
                   "are matrix ops only",
    }


def write_whole(path: Path, text: str) -> None:
    fd, tmp = tempfile.mkstemp(dir=path.parent, prefix=f".{path.name}.", suffix=".tmp")
    try:
        with os.fdopen(fd, "w") as f:
            f.write(text)
        os.chmod(tmp, 0o644)
        os.replace(tmp, path)
    except BaseException:
        with contextlib.suppress(OSError):
            os.unlink(tmp)
        raise


def print_report(summary: dict[str, Any]) -> None:
    keys = ["models", "built", "forward_runs", "flopcounter", "footprint", "footprint_no_unknown",
            "footprint_params_exact", "state_ok", "timeouts"]
    print("\n" + f"{'':14s}" + "".join(f"{k[:18]:>20s}" for k in keys))
    for lib, s in summary.items():
        print(f"{lib:14s}" + "".join(f"{s.get(k, -1):>20d}" for k in keys))
    print()
    for h in headline(summary):
        print(h)
    for lib, s in summary.items():
        print(f"\n{lib}: footprint failures by cause")
        for cause, c in s["footprint_failures"].items():
            print(f"  {len(c['models']):4d} ({c['forward_ok']} fwd ok) {cause}")
            print(f"       {', '.join(c['models'][:10])}{' …' if len(c['models']) > 10 else ''}")
        if s["unknown_ops"]:
            print(f"{lib}: unknown operators")
            for op, ms in s["unknown_ops"].items():
                print(f"  {len(ms):4d} {op} ({', '.join(ms[:5])})")


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--only", action="append", choices=LIBS, help="a library to sweep (repeatable; default: all)")
    ap.add_argument("--limit", type=int, default=None, help="at most N models per library")
    ap.add_argument("--timm-sample", type=int, default=DEFAULT_TIMM_SAMPLE,
                    help=f"timm models, spread over the families (default {DEFAULT_TIMM_SAMPLE}; 0: all)")
    ap.add_argument("--models", default=None, help="comma-separated names (model types for transformers)")
    ap.add_argument("--timeout", type=float, default=180.0, help="seconds per model (default 180)")
    ap.add_argument("--workers", type=int, default=2, help="models at once (default 2)")
    ap.add_argument("--max-gb", type=float, default=8.0, help="memory limit of each model's process (RLIMIT_DATA, "
                    "GiB; 0: none; default 8)")
    ap.add_argument("--out", type=Path, default=ROOT / "benchmarks" / "results", help="output folder")
    ap.add_argument("--fresh", action="store_true", help="do not keep the previous file's other records")
    ap.add_argument("--report-only", action="store_true", help="rewrite the report from the JSON file, run nothing")
    args = ap.parse_args(argv)
    if args.report_only:
        json_path = args.out / "model_zoo_sweep.json"
        old = json.loads(json_path.read_text())
        summary = summarise(old["records"])
        meta = {**old["meta"], **static_meta()}
        write_whole(json_path, json.dumps({**old, "meta": meta, "summary": summary}, indent=1, default=str))
        write_whole(args.out / "model_zoo_sweep.md", markdown(summary, meta))
        print_report(summary)
        return 0
    libs = args.only or list(LIBS)
    only_models = [m.strip() for m in args.models.split(",") if m.strip()] if args.models else None
    tasks = list_tasks(libs, args.timm_sample, only_models)
    if args.limit is not None:
        per: Counter[str] = Counter()
        kept = []
        for lib, name in tasks:
            per[lib] += 1
            if per[lib] <= args.limit:
                kept.append((lib, name))
        tasks = kept
    print(f"{len(tasks)} models: " + ", ".join(f"{lib} {n}" for lib, n in Counter(t[0] for t in tasks).items()),
          flush=True)
    fp_path = footprint_ready()
    print(f"torch_footprint from {fp_path}", flush=True)
    t0 = time.perf_counter()
    records = sweep(tasks, max(1, args.workers), args.timeout, args.max_gb)
    wall = time.perf_counter() - t0
    source = footprint_source(fp_path)
    for r in records:
        r["footprint_source"] = source

    args.out.mkdir(parents=True, exist_ok=True)
    json_path = args.out / "model_zoo_sweep.json"
    runs: list[dict[str, Any]] = []
    if not args.fresh and json_path.exists():
        try:
            old = json.loads(json_path.read_text())
            done = {(r["lib"], r["name"]) for r in records}
            records = [r for r in old.get("records", []) if (r["lib"], r["name"]) not in done] + records
            runs = old.get("runs", [])
        except (ValueError, KeyError):
            pass
    records.sort(key=lambda r: (LIBS.index(r["lib"]), r["name"]))
    import timm
    import torch
    import torchvision
    import transformers

    command = " ".join([Path(sys.argv[0]).name, *sys.argv[1:]]) if argv is None else str(argv)
    runs.append({"timm_sample": args.timm_sample if "timm" in libs and not only_models else None, "command": command,
                 "models": len(tasks), "footprint": source, "wall_s": round(wall, 1), "workers": args.workers,
                 "timeout_s": args.timeout,
                 "date": time.strftime("%Y-%m-%d %H:%M:%S")})
    meta = {"versions": f"torch {torch.__version__}, transformers {transformers.__version__}, timm {timm.__version__}, "
                        f"torchvision {torchvision.__version__}, python {sys.version.split()[0]}",
            "footprint (this run)": source,
            "machine": f"{os.cpu_count()} CPU cores, {args.workers} models at once, 1 torch thread each, "
                       f"{args.max_gb:g} GiB of memory each (RLIMIT_DATA)",
            "runs": "; ".join(f"`{r['command']}` ({r['models']} models, {r['wall_s'] / 60:.1f} min, {r['date']}, "
                              f"footprint {r.get('footprint', '?')})" for r in runs),
            **static_meta()}
    summary = summarise(records)
    write_whole(json_path, json.dumps({"meta": meta, "runs": runs, "summary": summary, "records": records},
                                      indent=1, default=str))
    write_whole(args.out / "model_zoo_sweep.md", markdown(summary, meta))
    print_report(summarise([r for r in records if (r["lib"], r["name"]) in set(tasks)]))
    print(f"\nwrote {json_path} and model_zoo_sweep.md ({wall / 60:.1f} min)")
    return 0


if __name__ == "__main__":
    sys.exit(main())
