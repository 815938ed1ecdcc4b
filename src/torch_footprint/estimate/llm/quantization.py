"""Weight and KV-cache storage schemes, by their real bytes: packed values plus the scales,
zero points and indices each format stores, and the tensors each tool leaves unquantized.

A scheme prices one parameter of the traced model from its shape and its role:

* ``linear``: a matrix (or a stack of experts' matrices) inside the decoder layers, the
  tensors every tool quantizes; ``in`` is the last dimension (``F.linear``'s weight is
  ``[out, in]``), the one groups and blocks run along;
* ``embedding`` / ``head``: the input embeddings and the output head (tied: one tensor);
* ``vector``: norms and biases (one dimension), never quantized.

The plain schemes (fp32, bf16, fp16) store every tensor at that width: a model run as the
checkpoint's dtype would not be (CPUs often run language models in fp32).

Sources, one per scheme (``Scheme.source``), and the storage each prices:

* GPTQ int4 g128 (AutoGPTQ ``QuantLinear``): ``qweight`` int32 [in/8, out], ``qzeros``
  int32 [in/128, out/8], ``scales`` fp16 [in/128, out], ``g_idx`` int32 [in];
  embeddings, head and norms in fp16.
* AWQ int4 g128 (AutoAWQ ``WQLinear_GEMM``): the same without ``g_idx``.
* NF4 with double quantization (bitsandbytes ``quantize_4bit``, transformers'
  integration): 4 bits, one 8-bit absmax per 64 weights, one fp32 scale per 256 absmax
  blocks; ``lm_head`` and embeddings kept in 16 bits.
* fp8 (compressed-tensors ``FP8``, llm-compressor's checkpoints): one byte per weight, a
  per-tensor fp32 weight scale and input scale; embeddings, head and norms in bf16.
* fp8 in 128 x 128 blocks (DeepSeek-V3's own checkpoint, its config's ``quantization_config``):
  one byte per weight and an fp32 scale per block; embeddings, head and norms in bf16.
* NVFP4 (NVIDIA ModelOpt's checkpoints, e.g. nvidia/Llama-3.3-70B-Instruct-FP4): e2m1 values
  packed two a byte, an fp8 e4m3 scale per 16 weights along the input, an fp32 global scale
  and input scale per matrix; embeddings, head and norms in bf16. The matrix work runs at the
  accelerator's fp4 rate, else its fp8 rate (TensorRT-LLM's fp4 GEMMs need Blackwell).
* MXFP4 (the OCP Microscaling format, openai/gpt-oss's checkpoints: ``*_blocks`` and
  ``*_scales``): e2m1 values packed two a byte, an e8m0 scale (one byte) per 32 weights along
  the input; what the config's ``modules_to_not_convert`` names (gpt-oss: attention, router,
  embeddings, head) and norms and biases in bf16. Matrix work at the accelerator's fp4 rate,
  else at the 16-bit rate (Hopper dequantizes to bf16 in the GEMM: vLLM's Marlin and Triton
  MXFP4 kernels).
* int8 per channel (compressed-tensors ``W8A16``): one byte per weight, a 16-bit scale per
  output channel; embeddings, head and norms in 16 bits.
* GGUF (llama.cpp ``ggml-common.h`` blocks; ``llama-quant.cpp`` picks each tensor's type):
  Q4_0 18 bytes per 32 weights, Q4_1 20/32 (a 16-bit scale and a 16-bit minimum), Q8_0 34/32,
  Q4_K 144/256, Q5_K 176/256, Q6_K 210/256; the
  ``_M`` mixes put ``attn_v`` and ``ffn_down`` of the "more bits" layers in Q6_K, the output
  head in Q6_K (Q8_0 in a Q8_0 file), an untied token embedding in the base type (a tied one
  gets the head's); norms, mixture-of-experts routers and state-space convolutions stay
  F32 (``convert_hf_to_gguf.py``). Rows not a multiple of 256 fall back (Q4_K to Q5_0,
  Q5_K to Q5_1, Q6_K to Q8_0), and rows that fit no block of their type to F16.
"""

from __future__ import annotations

import fnmatch
import math
import re
from collections.abc import Callable
from dataclasses import dataclass, replace
from typing import Any

from ...errors import FootprintError
from ...settings import QUANT_ALIASES

GGUF_SOURCE = "https://github.com/ggml-org/llama.cpp/blob/master/src/llama-quant.cpp"
# bytes per block, weights per block (ggml-common.h)
GGUF_BLOCKS = {"q4_0": (18, 32), "q4_1": (20, 32), "q5_0": (22, 32), "q5_1": (24, 32), "q8_0": (34, 32),
               "q4_k": (144, 256), "q5_k": (176, 256), "q6_k": (210, 256), "f16": (2, 1), "f32": (4, 1)}
_K_FALLBACK = {"q4_k": "q5_0", "q5_k": "q5_1", "q6_k": "q8_0"}


def gguf_bytes(kind: str, numel: int, row: int) -> int:
    """Bytes of ``numel`` weights in GGUF type ``kind``, rows of ``row`` weights."""
    size, block = GGUF_BLOCKS[kind]
    if row % block:
        # llama-quant.cpp: a k-quant falls back to a 32-block type, and a row that fits no block
        # is stored in F16 (a state-space model's 4-wide convolution, a 14-wide patch kernel)
        return gguf_bytes(_K_FALLBACK.get(kind, "f16"), numel, row)
    return numel // block * size


def more_bits(i: int, n: int) -> bool:
    """llama.cpp's ``use_more_bits``: the layers its ``_M`` mixes keep in more bits."""
    return i < n // 8 or i >= 7 * n // 8 or (i - n // 8) % 3 == 2


@dataclass(frozen=True)
class Param:
    """What a scheme needs to know of one parameter."""

    name: str
    shape: tuple[int, ...]
    role: str  # "linear", "embedding", "head", "vector"
    layer: int | None = None
    layers: int = 1  # decoder layers in the model
    experts: int = 0  # the model's experts per layer (0: dense)

    @property
    def numel(self) -> int:
        return math.prod(self.shape)

    @property
    def row(self) -> int:
        return self.shape[-1] if self.shape else 1


@dataclass(frozen=True)
class Scheme:
    """A weight storage scheme: bytes of each parameter, and the arithmetic it runs at."""

    name: str
    label: str
    source: str
    price: Callable[[Param], int]
    compute: str | None = None  # rate key of the matrix work where the accelerator has it (None: 16-bit)
    fallback: str | None = None  # the rate key used where the accelerator lacks ``compute``
    sixteen: str = "bf16"  # the dtype of what it leaves unquantized, and of the activations

    def bytes_of(self, p: Param) -> int:
        return self.price(p)


def _plain(elem: float) -> Callable[[Param], int]:
    return lambda p: int(p.numel * elem)


def _keep16(quant: Callable[[Param], int]) -> Callable[[Param], int]:
    """Quantize the decoder layers' matrices; embeddings, head and vectors stay in 16 bits."""
    return lambda p: quant(p) if p.role == "linear" else 2 * p.numel


def _int4_groups(g_idx: bool) -> Callable[[Param], int]:
    def price(p: Param) -> int:
        rows_in = p.row
        out = p.numel // rows_in
        groups = -(-rows_in // 128)
        stacks = p.numel // (rows_in * out) if out else 1
        per = rows_in * out // 2 + groups * out // 2 + groups * out * 2 + (4 * rows_in if g_idx else 0)
        return stacks * per
    return price


def _nf4(p: Param) -> int:
    blocks = -(-p.numel // 64)
    return p.numel // 2 + blocks + 4 * -(-blocks // 256)


def _fp8(p: Param) -> int:
    stacks = p.numel // (p.shape[-2] * p.shape[-1]) if len(p.shape) >= 2 else 1
    return p.numel + 8 * stacks  # fp32 weight scale and input scale per matrix


def _fp8_blocks(p: Param) -> int:
    """fp8 with one fp32 scale per 128 x 128 block (DeepSeek-V3's checkpoint: ``weight_scale_inv``)."""
    rows_in = p.row
    out = p.numel // rows_in
    stacks = p.numel // (p.shape[-2] * p.shape[-1]) if len(p.shape) >= 2 else 1
    out_per = out // stacks if stacks else out
    return p.numel + 4 * stacks * -(-out_per // 128) * -(-rows_in // 128)


def _nvfp4(p: Param) -> int:
    """e2m1 values two a byte, an fp8 scale per 16 along the input, an fp32 global and input scale per matrix."""
    stacks = p.numel // (p.shape[-2] * p.shape[-1]) if len(p.shape) >= 2 else 1
    return p.numel // 2 + -(-p.row // 16) * (p.numel // p.row) + 8 * stacks


def _mxfp4(p: Param) -> int:
    """e2m1 values two a byte, an e8m0 scale per 32 along the input (OCP MX, gpt-oss's ``_blocks``, ``_scales``)."""
    return p.numel // 2 + -(-p.row // 32) * (p.numel // p.row)


def _int8(p: Param) -> int:
    return p.numel + 2 * (p.numel // p.row)  # a 16-bit scale per output channel


_V = re.compile(r"(^|[._])(v_proj|wv|value)($|[._])")
# tensors llama.cpp's converter (convert_hf_to_gguf.py) always writes in F32 and its quantizer
# leaves alone: a mixture of experts' router (FFN_GATE_INP), a state-space convolution (SSM_CONV1D)
_GGUF_F32 = re.compile(r"(^|\.)(gate|router|conv1d)\.weight$")
_DOWN = re.compile(r"(^|[._])(down_proj|w2|fc2|c_proj|dense_4h_to_h|out_proj)($|[._])")


def _gguf(base: str, mix: bool) -> Callable[[Param], int]:
    head_type = "q8_0" if base == "q8_0" else "q6_k"

    def price(p: Param) -> int:
        if p.role == "vector" or _GGUF_F32.search(p.name):
            return 4 * p.numel  # F32, as the converter writes norms, routers and convolutions
        if p.role == "head":
            return gguf_bytes(head_type, p.numel, p.row)
        if p.role == "embedding":
            return gguf_bytes(base, p.numel, p.row)
        kind = base
        if mix and p.layer is not None:
            leaf = p.name.rsplit(".", 2)
            where = ".".join(leaf[-2:])
            if p.experts == 8 and _V.search(where):
                kind = "q8_0"
            elif (_V.search(where) or (_DOWN.search(where) and "mlp" in p.name or "experts" in p.name
                                       and "down" in where)) and more_bits(p.layer, p.layers):
                kind = "q6_k"
        return gguf_bytes(kind, p.numel, p.row)
    return price


_GPTQ = "https://github.com/AutoGPTQ/AutoGPTQ/blob/main/auto_gptq/nn_modules/qlinear/qlinear_cuda_old.py"
_AWQ = "https://github.com/casper-hansen/AutoAWQ/blob/main/awq/modules/linear/gemm.py"
_BNB = "https://github.com/huggingface/transformers/blob/main/src/transformers/integrations/bitsandbytes.py"
_MODELOPT = "https://github.com/NVIDIA/TensorRT-Model-Optimizer/blob/main/modelopt/torch/quantization/qtensor/nvfp4_tensor.py"
_CT = ("https://github.com/neuralmagic/compressed-tensors/blob/main/src/compressed_tensors/quantization/"
       "quant_scheme.py")

SCHEMES: dict[str, Scheme] = {s.name: s for s in (
    Scheme("fp32", "float32", "https://pytorch.org/docs/stable/tensor_attributes.html", _plain(4), sixteen="fp32"),
    Scheme("bf16", "bfloat16", "https://pytorch.org/docs/stable/tensor_attributes.html", _plain(2)),
    Scheme("fp16", "float16", "https://pytorch.org/docs/stable/tensor_attributes.html", _plain(2), sixteen="fp16"),
    Scheme("fp8", "fp8 e4m3, per-tensor scales (W8A8)", _CT, _keep16(_fp8), compute="fp8"),
    Scheme("fp8-block128", "fp8 e4m3, a scale per 128 x 128 block (DeepSeek-V3)",
           "https://huggingface.co/deepseek-ai/DeepSeek-V3/blob/main/config.json", _keep16(_fp8_blocks),
           compute="fp8"),
    Scheme("mxfp4", "MXFP4: fp4 e2m1, an e8m0 scale per 32 weights (OCP MX, gpt-oss)",
           "https://www.opencompute.org/documents/ocp-microscaling-formats-mx-v1-0-spec-final-pdf",
           _keep16(_mxfp4), compute="fp4"),
    Scheme("int8", "int8 per output channel, 16-bit scales (W8A16)", _CT, _keep16(_int8)),
    Scheme("int4-g128", "int4, groups of 128, GPTQ layout (qweight, qzeros, scales, g_idx)", _GPTQ,
           _keep16(_int4_groups(True)), sixteen="fp16"),
    Scheme("int4-g128-awq", "int4, groups of 128, AWQ layout (qweight, qzeros, scales)", _AWQ,
           _keep16(_int4_groups(False)), sixteen="fp16"),
    Scheme("nf4", "NF4 with double quantization (bitsandbytes)", _BNB, _keep16(_nf4)),
    Scheme("nvfp4", "NVFP4: fp4 e2m1, an fp8 scale per 16 weights (ModelOpt)", _MODELOPT, _keep16(_nvfp4),
           compute="fp4", fallback="fp8"),
    Scheme("q4_0", "GGUF Q4_0", GGUF_SOURCE, _gguf("q4_0", False), sixteen="fp16"),
    Scheme("q4_1", "GGUF Q4_1", GGUF_SOURCE, _gguf("q4_1", False), sixteen="fp16"),
    Scheme("q8_0", "GGUF Q8_0", GGUF_SOURCE, _gguf("q8_0", False), sixteen="fp16"),
    Scheme("q4_k_m", "GGUF Q4_K_M", GGUF_SOURCE, _gguf("q4_k", True), sixteen="fp16"),
    Scheme("q5_k_m", "GGUF Q5_K_M", GGUF_SOURCE, _gguf("q5_k", True), sixteen="fp16"),
    Scheme("q6_k", "GGUF Q6_K", GGUF_SOURCE, _gguf("q6_k", False), sixteen="fp16"),
)}
ALIASES = QUANT_ALIASES  # what people type for a scheme (settings.py holds the vocabulary)

# KV cache: bytes per element (fp8 and int8 caches keep a per-tensor scale: negligible)
KV_SCHEMES = {"fp32": 4, "bf16": 2, "fp16": 2, "fp8": 1, "int8": 1}


def weight_scheme(name: str) -> Scheme:
    key = name.strip().lower()
    key = ALIASES.get(key, key)
    if key not in SCHEMES:
        raise FootprintError(f"unknown weight scheme '{name}': use {', '.join(SCHEMES)}")
    return SCHEMES[key]


def activation_dtype(scheme: Scheme | None) -> str | None:
    """The activations' dtype under a weight scheme: a plain scheme's own (fp32, bf16, fp16), a
    quantized one's 16-bit type (None: as the model is built)."""
    if scheme is None:
        return None
    return scheme.name if scheme.name in ("fp32", "bf16", "fp16") else scheme.sixteen


def kv_scheme(name: str) -> int:
    key = name.strip().lower()
    if key not in KV_SCHEMES:
        raise FootprintError(f"unknown KV-cache scheme '{name}': use {', '.join(KV_SCHEMES)}")
    return KV_SCHEMES[key]


def checkpoint_scheme(config: object) -> Scheme | None:
    """The scheme a config's ``quantization_config`` says its checkpoint is stored in (None:
    no such section): fp8 (per tensor, or in 128 x 128 blocks), MXFP4, GPTQ and AWQ int4 in
    groups of 128, bitsandbytes NF4, ModelOpt NVFP4; the tensors its ``modules_to_not_convert``
    names kept in 16 bits. Any other is refused in one line rather than priced as the dtype."""
    q = getattr(config, "quantization_config", None)
    if q is None:
        return None
    get = q.get if isinstance(q, dict) else lambda k, d=None: getattr(q, k, d)
    method = str(get("quant_method", "") or "").lower()
    bits, group = get("bits"), get("group_size")
    name = None
    if method == "fp8":
        name = "fp8-block128" if list(get("weight_block_size", []) or []) == [128, 128] else "fp8"
    elif method == "mxfp4":
        name = "mxfp4"
    elif method in ("gptq", "awq") and bits == 4 and group == 128:
        name = "int4-g128" if method == "gptq" else "int4-g128-awq"
    elif method == "bitsandbytes" and get("load_in_4bit") and get("bnb_4bit_quant_type") == "nf4":
        name = "nf4"
    elif method == "modelopt" and str(get("quant_algo", "")).upper() == "NVFP4":
        name = "nvfp4"
    if name is None:
        what = ", ".join(f"{k} {get(k)}" for k in ("bits", "group_size", "quant_algo") if get(k) is not None)
        raise FootprintError(f"the checkpoint's quantization_config ({method or 'no quant_method'}"
                             f"{', ' + what if what else ''}) is not a scheme torch-footprint prices: give --quant "
                             f"with the nearest of {', '.join(SCHEMES)}")
    scheme = SCHEMES[name]
    keep = [str(m) for m in (get("modules_to_not_convert") or [])]
    if not keep:
        return scheme
    price = scheme.price

    def kept(p: Param) -> int:
        module = p.name.rsplit(".", 1)[0]
        if any(fnmatch.fnmatchcase(module, k) or fnmatch.fnmatchcase(module, k + ".*") for k in keep):
            return 2 * p.numel
        return price(p)
    return replace(scheme, price=kept, label=f"{scheme.label}; not {', '.join(keep)}")


def unquantized_dtype(config: Any) -> str | None:
    """The 16-bit dtype a quantized checkpoint keeps what it leaves unquantized in, and runs its
    activations in (its scheme's), where its config names no dtype (a build would take fp32);
    None otherwise."""
    stored = vars(config)  # transformers 5 keeps ``dtype`` (its ``torch_dtype`` warns), 4.x ``torch_dtype``
    if getattr(config, "quantization_config", None) is None or any(stored.get(k) for k in ("dtype", "torch_dtype")):
        return None
    scheme = checkpoint_scheme(config)
    return scheme.sixteen if scheme is not None else None
