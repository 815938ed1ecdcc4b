"""What a user describes, as public records: the workload, the training set-up, the parallel
layout, the target hardware, the serving set-up and a measurement.

Each option is a field defined once, here or in :mod:`.training`: its name, type, default
and help (the string under the field). The command line derives its flags from these fields
(:mod:`torch_footprint.cli.options`) and the Python verbs take the same records, or their
fields as keyword shortcuts::

    tfp.fit("resnet50", training=Training(train=True, optimizer="adamw"), gpus=8)

A flag's spelling is ``--`` and the field's name with dashes (``--gpus-per-node``) unless the
field says otherwise; a field's metadata may add aliases and deprecated spellings. Field
names are unique across the records, so a keyword shortcut names one field.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Literal

from ..errors import FootprintError
from ..quantities import parse_bytes, parse_seconds
from .fields import Record, field_docs, field_types, gather, literal_choices, opt, signature_of, verb_records
from .simulation import Simulation
from .training import Grads, Optimizer, Parallel, PipelineSchedule, Strategy, Training

__all__ = ["RECORDS", "Calibration", "Grads", "Measurement", "Memory", "Optimizer", "Parallel", "PipelineSchedule",
           "Plan", "Record", "Sections", "Serving", "Simulation", "Strategy", "Target", "Training", "Watch",
           "Workload", "field_docs", "field_types", "gather", "literal_choices", "opt", "signature_of", "verb_records"]

Precision = Literal["fp32", "fp16", "bf16", "fp64", "fp16-mixed", "bf16-mixed"]
Quant = Literal["fp32", "bf16", "fp16", "fp8", "fp8-block128", "int8", "int4-g128", "int4-g128-awq", "nf4", "nvfp4",
                "mxfp4", "q4_0", "q4_1", "q8_0", "q4_k_m", "q5_k_m", "q6_k"]
Attention = Literal["eager", "sdpa", "fused", "flash1", "flash2", "flash3", "cudnn"]
KvCache = Literal["fp32", "bf16", "fp16", "fp8", "int8"]
Engine = Literal["vllm", "sglang", "trtllm", "llamacpp", "transformers"]  # one profile each in hardware/engines/

# other spellings people type, per vocabulary (normalised before the check)
PRECISION_ALIASES = {"float32": "fp32", "float": "fp32", "f32": "fp32", "float16": "fp16", "half": "fp16",
                     "f16": "fp16", "bfloat16": "bf16", "float64": "fp64", "double": "fp64"}
QUANT_ALIASES = {"int4-g128-gptq": "int4-g128", "gptq": "int4-g128", "awq": "int4-g128-awq", "int4": "int4-g128",
                 "gguf-q4_0": "q4_0", "gguf-q4_1": "q4_1", "ggml-q4_1": "q4_1", "gguf-q8_0": "q8_0",
                 "gguf-q4_k_m": "q4_k_m", "gguf-q5_k_m": "q5_k_m",
                 "gguf-q6_k": "q6_k", "nf4-dq": "nf4", "bfloat16": "bf16", "float16": "fp16", "fp8-e4m3": "fp8",
                 "float32": "fp32", "fp4": "nvfp4"}

ATTENTION_ALIASES = {"flash_attention_1": "flash1", "fa1": "flash1", "flash1-triton": "flash1",
                     "flash": "flash2", "flash_attention_2": "flash2", "fa2": "flash2", "flash-attention": "flash2",
                     "flash_attention_3": "flash3", "fa3": "flash3", "flex": "flash2", "flex_attention": "flash2",
                     "te": "cudnn", "transformer_engine": "cudnn", "cudnn_attention": "cudnn"}


# --------------------------------------------------------------------------- the records

@dataclass(frozen=True)
class Workload(Record):
    """What runs: the model, its inputs and the arithmetic."""

    model: Any = opt(cli=False)
    """resnet50 | timm:NAME | hf:ID | CONFIG_FOLDER | FILE.py:FACTORY | package.module:FACTORY, or an nn.Module"""
    inputs: Any = opt(cli=False)
    """input shapes such as 1,3,224,224 or 1,128:int64 (--input, repeatable; NAME=SHAPE for a keyword
    input), token ids as --input-ids B,T, or tensors; None: the model's default input"""
    batch: int | None = opt(metavar="N", aliases=("--micro-batch", "--micro-batch-size"))
    """set the first dimension of every input (per rank; with --grad-accum or --pp, one micro-batch)"""
    precision: Precision | None = opt(metavar="P", aliases=("--dtype",), aliases_of_values=PRECISION_ALIASES)
    """the arithmetic: fp32, fp16, bf16, fp64 cast weights and floating inputs; fp16-mixed and bf16-mixed keep
    fp32 weights under autocast (default: fp32; profile and bench: as the model is built)"""
    weights: str | None = opt(metavar="NAME")
    """torchvision weights whose metadata sets the input (e.g. IMAGENET1K_V2)"""
    channels_last: bool = opt(False)
    """4-d activations in channels-last (NHWC) memory: no NCHW<->NHWC transposes around tensor-core
    convolutions (default: NCHW, PyTorch's)"""
    compile: bool = opt(False)
    """torch.compile: bench compiles the model first; predict and fit price it as TorchInductor runs it
    (elementwise and normalisation chains fused into one kernel each, convolutions in channels-last, the host's
    time per kernel a launch's)"""
    cuda_graphs: bool = opt(False)
    """predict and fit: the step replayed as a CUDA graph (torch.compile's reduce-overhead mode, or captured by
    hand): the host launches it once, not each kernel"""
    attention: Attention | None = opt(metavar="KERNEL", aliases=("--attn-implementation",),
                                      aliases_of_values=ATTENTION_ALIASES, what="attention kernel")
    """a Hugging Face model's attention (transformers' attn_implementation): eager (the scores written out),
    sdpa (torch's scaled_dot_product_attention, its kernel chosen as PyTorch chooses for the target), fused
    (every attention layer as one fused kernel whatever the model's code declares, as training stacks and
    engines run it, PyTorch's choice of kernel), or that kernel named: flash1 (FlashAttention v1 or its
    Triton port, as 2023's stacks ran it), flash2 (FlashAttention-2, also flash and flex, whose Triton kernel
    is priced as one), flash3 (FlashAttention-3), cudnn (cuDNN's, also te:
    Transformer Engine's fused attention); default: the model's own choice"""
    trust_remote_code: bool = opt(False)
    """allow a Hugging Face config to run code from its repository (off by default)"""
    tensors: Literal["auto", "meta", "fake", "real"] = opt("auto", metavar="KIND", what="kind of tensors")
    """what the trace runs on: auto (meta, then fake, then real tensors for a small model whose forward reads
    values), meta, fake or real"""
    reuse: bool = opt(True, flag="--no-reuse")
    """trace every call of a repeated block (by default a call provably equal to one traced already, inputs
    of the same shapes included, replays its operators: the same trace, sooner)"""

    def check(self) -> None:
        if self.batch is not None and self.batch < 1:
            raise FootprintError(f"batch must be at least 1, got {self.batch}")

    @property
    def layout(self) -> str:
        return "nhwc" if self.channels_last else "nchw"


@dataclass(frozen=True)
class Target(Record):
    """Where it runs, or would: accelerators of the database, or this machine's device."""

    gpu: tuple[str, ...] = opt((), metavar="ID")
    """accelerator id or name (see `footprint gpus`); repeatable where several are compared"""
    hardware: str | None = opt(metavar="FILE")
    """add (or replace) accelerators from a TOML or JSON file"""
    device: str | None = opt(metavar="DEVICE")
    """this machine's device: cpu, cuda or cuda:N (bench and --measure run there, memory adds its fixed
    overheads, calibrate measures it)"""
    utilisation: float = opt(0.8, metavar="F")
    """usable fraction of memory"""
    latency: float | str | None = opt(metavar="TIME")
    """latency target with its unit, e.g. 10ms or 0.5s (a Python number: seconds): pick the lowest-power
    accelerator that meets it"""
    tf32: Literal["on", "off"] | None = opt(metavar="on|off", aliases_of_values={"true": "on", "false": "off"},
                                            what="TF32 setting")
    """fp32 matmuls and convolutions as TF32 (default: PyTorch's, convolutions only)"""
    efficiency: tuple[str, ...] = opt((), metavar="KIND=F")
    """achievable fraction of a datasheet ceiling: matrix=0.7, vector=0.5, memory=0.85 (repeatable)"""
    price: tuple[str, ...] = opt((), metavar="ID=USD/H")
    """the price of one GPU-hour, e.g. h100-sxm=2.49 (repeatable; default: the shipped table of public on-demand
    prices, dated)"""

    def check(self) -> None:
        if not 0 < self.utilisation <= 1:
            raise FootprintError(f"utilisation must be in (0, 1], got {self.utilisation}")
        if self.latency is not None:
            parse_seconds(self.latency)  # a unit given, read before any work

    @property
    def tf32_flag(self) -> bool | None:
        return None if self.tf32 is None else self.tf32 == "on"

    @property
    def efficiencies(self) -> dict[str, float] | None:
        """--efficiency KIND=F items as a mapping (None when none is given)."""
        out = {}
        for item in self.efficiency:
            name, sep, value = str(item).partition("=")
            try:
                out[name.strip()] = float(value)
            except ValueError:
                sep = ""
            if not sep:
                raise FootprintError(f"--efficiency takes KIND=FRACTION, e.g. matrix=0.6; got '{item}'")
        return out or None


@dataclass(frozen=True)
class Memory(Record):
    """What ``memory`` adds to the traced peak: fixed overheads, and the batch scaling."""

    max_batch: int | str | None = opt(metavar="BUDGET")
    """the largest batch whose provisioned memory fits this budget, with its unit: 24GiB or 24GB (a Python int:
    bytes)"""
    scaling: bool = opt(False)
    """fit peak = a + b x batch from three traces"""
    overhead: tuple[str, ...] = opt((), metavar="NAME=SIZE")
    """set a fixed overhead, e.g. cuda_context=300MiB (0 removes it); repeatable"""

    def check(self) -> None:  # sizes need their unit: read them before any work
        if self.max_batch is not None:
            parse_bytes(self.max_batch, "--max-batch budget")
        for name, size in self.overheads.items():
            parse_bytes(size, f"overhead {name}")

    @property
    def overheads(self) -> dict[str, str]:
        out = {}
        for item in self.overhead:
            name, sep, size = str(item).partition("=")
            if not sep or not name.strip():
                raise FootprintError(f"--overhead takes NAME=SIZE, e.g. cuda_context=300MiB; got '{item}'")
            out[name.strip()] = size
        return out


@dataclass(frozen=True)
class Serving(Record):
    """How a language model is served: request lengths, storage schemes, engine."""

    prompt: int | None = opt(metavar="TOKENS")
    """prompt tokens per request (default 1024, halved with --output's default until both fit the model's
    maximum positions)"""
    output: int | None = opt(metavar="TOKENS")
    """generated tokens per request (default 256, or what the model's maximum leaves after --prompt)"""
    quant: Quant | None = opt(metavar="SCHEME", deprecated={"--weights": None}, aliases_of_values=QUANT_ALIASES,
                              what="weight scheme")
    """weights stored as fp32, bf16, fp16, fp8, fp8-block128, int8, int4-g128 (GPTQ), int4-g128-awq, nf4, nvfp4,
    mxfp4, q4_0, q4_1, q8_0, q4_k_m, q5_k_m, q6_k (default: as the checkpoint stores them)"""
    kv: KvCache | None = opt(metavar="DTYPE", what="KV-cache scheme")
    """KV cache: fp32, bf16, fp16, fp8, int8 (default: the activations')"""
    engine: Engine | None = opt(metavar="NAME", what="engine")
    """add how this engine sizes its KV cache: vllm, sglang, trtllm, llamacpp, transformers (its continuous
    batching; hardware/engines/NAME.toml; the knobs below take the engine's defaults)"""
    max_model_len: int | None = opt(metavar="TOKENS")
    """with --engine: the longest request the engine admits (default: the model's maximum positions)"""
    engine_version: str | None = opt(metavar="VERSION")
    """with --engine: the release whose sizing rule applies, e.g. 0.6.4 (default: the newest; vLLM before 0.8
    profiles max(max_model_len, 2048) tokens and counts memory outside PyTorch as that release did)"""
    gpu_memory_utilization: float | None = opt(metavar="F")
    """with --engine vllm: the fraction of the GPU's memory vLLM may use (default 0.9)"""
    max_num_seqs: int | None = opt(metavar="N")
    """with --engine vllm or trtllm: requests in flight at most (default 256; TensorRT-LLM's max_batch_size 2048)"""
    max_num_batched_tokens: int | None = opt(metavar="TOKENS")
    """with --engine: tokens in one step, the size of the profile run whose activations are held back (vLLM
    8192 on a device of 70 GiB or more, else 2048; SGLang's chunked_prefill_size and TensorRT-LLM's
    max_num_tokens 8192)"""
    block_size: int | None = opt(metavar="TOKENS")
    """with --engine: tokens per cache block or page (vLLM 16, SGLang page_size 1, TensorRT-LLM
    tokens_per_block 32)"""
    mem_fraction_static: float | None = opt(metavar="F")
    """with --engine sglang: the fraction of memory for weights and the token pool (default by tensor
    parallelism: 0.88 at 1 GPU, 0.87 at 2, 0.85 at 4, 0.81 at 8, 0.79 at 16)"""
    kv_cache_free_gpu_memory_fraction: float | None = opt(metavar="F")
    """with --engine trtllm: the fraction of the memory left free after the weights and activations that the
    KV cache takes (default 0.9)"""
    ctx_size: int | None = opt(metavar="TOKENS")
    """with --engine llamacpp: the cache's cells, allocated whole (llama-server's --ctx-size, default 4096)"""
    ubatch_size: int | None = opt(metavar="TOKENS")
    """with --engine llamacpp: tokens per micro-batch, what the compute buffer is sized for (default 512)"""
    num_scheduler_steps: int | None = opt(metavar="N")
    """with --engine vllm (its V0 engine, 0.6 to 0.9): decode steps between scheduling points (multi-step
    scheduling, default 1); a request that arrives meanwhile waits for them"""
    enable_chunked_prefill: int | None = opt(metavar="0|1")
    """with --engine vllm: 1 runs prompt chunks beside the decodes in one step; 0 (vLLM V0's default below a
    max_model_len of 32K) prefills waiting prompts first, in steps that decode nothing"""
    enable_mixed_chunk: int | None = opt(metavar="0|1")
    """with --engine sglang: 1 runs prompt chunks beside the decodes; 0 (the default) prefills in steps of their
    own"""
    chunk: int | None = opt(metavar="TOKENS")
    """chunked prefill: tokens per chunk"""
    simulate: bool = opt(False)
    """also simulate continuous batching as the engine schedules it (chunked prefill under
    --max-num-batched-tokens, admission by free cache blocks and --max-num-seqs, preemption): --num-prompts
    requests of --prompt + --output tokens from --concurrency clients; throughput, TTFT, TPOT, latency p50/p90/p99"""
    concurrency: int = opt(8, metavar="N")
    """with --simulate: clients, each sending its next request when the last one ends (not with --request-rate)"""
    num_prompts: int | None = opt(metavar="N")
    """with --simulate: requests in all (default 10 per client; at a --request-rate 1,000; a trace: its rows)"""
    allow_longer: bool = opt(False)
    """allow a context beyond the model's maximum"""
    measure: bool = opt(False)
    """also run the model on --device (random weights): prefill and decode timed"""

    def check(self) -> None:
        for name in ("max_model_len", "max_num_seqs", "max_num_batched_tokens", "block_size", "ctx_size",
                     "ubatch_size", "concurrency", "num_prompts", "num_scheduler_steps"):
            value = getattr(self, name)
            if value is not None and value < 1:
                raise FootprintError(f"--{name.replace('_', '-')} must be at least 1, got {value}")
        for name in ("enable_chunked_prefill", "enable_mixed_chunk"):
            if getattr(self, name) not in (None, 0, 1):
                raise FootprintError(f"--{name.replace('_', '-')} takes 0 or 1, got {getattr(self, name)}")
        for name in ("gpu_memory_utilization", "mem_fraction_static", "kv_cache_free_gpu_memory_fraction"):
            value = getattr(self, name)
            if value is not None and not 0 < value <= 1:
                raise FootprintError(f"--{name.replace('_', '-')} must be in (0, 1], got {value}")
        if self.chunk is not None and self.chunk < 1:
            raise FootprintError(f"--chunk must be at least 1 token, got {self.chunk}")
        if (self.prompt is not None and self.prompt < 1) or (self.output is not None and self.output < 1):
            raise FootprintError(f"--prompt and --output must be at least 1 token, got {self.prompt} and "
                                 f"{self.output}")


@dataclass(frozen=True)
class Measurement(Record):
    """How ``bench`` measures on this machine."""

    batches: str | tuple[int | str, ...] | None = opt(flag="--batch", metavar="SIZES")
    """batch sizes, e.g. 1,8,32,auto (auto: the largest that fits); default: the inputs' own"""
    cudnn_benchmark: bool = opt(False)
    """let cuDNN time its algorithms (torch.backends.cudnn.benchmark)"""
    inference_mode: bool = opt(True, flag="--no-inference-mode")
    """torch.no_grad instead of inference_mode"""
    profile: bool = opt(False)
    """add torch.profiler's operator table"""
    max_memory: int | str | None = opt(metavar="SIZE")
    """CPU memory budget with its unit, e.g. 16GiB: batches predicted above it are not run (default 80% of free
    RAM)"""
    min_reps: int = opt(30, metavar="N")
    """timed calls at least"""
    min_time: float = opt(2.0, metavar="SECONDS")
    """seconds of timed calls at least"""
    threads: int | None = opt(metavar="N")
    """torch's CPU threads (default: torch's, one per core)"""
    nproc: int | None = opt(metavar="N")
    """training steps on N ranks started by torchrun (gloo on CPU, NCCL on CUDA): per-rank memory, step and
    communication time beside prediction"""
    nnodes: int | None = opt(metavar="N")
    """with --nproc: split the ranks over N torchrun processes on this machine, each one node of --nproc / N
    ranks, meeting by torchrun's own c10d rendezvous on 127.0.0.1"""
    steps: int = opt(5, metavar="N")
    """with --nproc: timed steps per rank"""
    warmup: int = opt(2, metavar="N")
    """with --nproc: untimed steps per rank before them"""
    sample_interval: float = opt(0.1, metavar="SECONDS")
    """seconds between samples of the device and this process while timing: utilisation, memory, power
    (0: no sampling)"""
    timeout: float = opt(600.0, metavar="SECONDS")
    """with --nproc: seconds the ranks may run once connected before they are stopped as hung"""

    def check(self) -> None:
        if self.min_reps < 1 or self.min_time < 0:
            raise FootprintError("--min-reps must be at least 1 and --min-time not negative")
        if self.steps < 1 or self.warmup < 0:
            raise FootprintError("--steps must be at least 1 and --warmup not negative")
        if self.sample_interval < 0:
            raise FootprintError(f"--sample-interval cannot be negative, got {self.sample_interval}")
        if self.threads is not None and self.threads < 1:
            raise FootprintError(f"--threads must be at least 1, got {self.threads}")
        if self.max_memory is not None:
            parse_bytes(self.max_memory, "--max-memory budget")
        if self.nnodes is not None and (self.nnodes < 1 or not self.nproc or self.nproc % self.nnodes):
            raise FootprintError(f"--nnodes {self.nnodes} splits the ranks into nodes of equal size: it must divide "
                                 f"--nproc ({self.nproc or 'not given'})")


@dataclass(frozen=True)
class Watch(Record):
    """How ``watch`` follows a real job, and what it sets beside it."""

    pid: int | None = opt(metavar="N")
    """follow this running process (one of yours) instead of running a command"""
    interval: float = opt(1.0, metavar="SECONDS")
    """seconds between samples"""
    predict: str | None = opt(metavar="MODEL")
    """the model the job runs: its predicted memory (set up with --input, --batch, --train, --optimizer,
    --precision and --device as memory takes them) beside the observed peak, the difference named"""
    torch_stats: bool = opt(False)
    """each Python process of the job reports torch's allocated and reserved CUDA bytes (a command only), so a
    GPU peak splits into memory outside PyTorch, allocator reserve and the rest"""
    job_log: str | None = opt(metavar="FILE")
    """append the job's output to this file (keeps it off a live display on the same terminal)"""
    grace: float = opt(10.0, metavar="SECONDS")
    """after Ctrl-C, seconds the job has to stop before it is killed"""
    time_limit: float | None = opt(metavar="SECONDS")
    """stop the command after so many seconds"""
    plain: bool = opt(False)
    """one plain line per sample, even on a terminal"""

    def check(self) -> None:
        if not self.interval > 0:
            raise FootprintError(f"--interval must be more than 0 seconds, got {self.interval}")


@dataclass(frozen=True)
class Sections(Record):
    """What ``report`` adds to the profile, the memory and the prediction."""

    fit: bool = opt(False)
    """add every accelerator's answer (traces 2 more batches)"""
    bench: bool = opt(False)
    """add a measurement on this machine (runs the model)"""


@dataclass(frozen=True)
class Calibration(Record):
    """How ``calibrate`` measures this machine's ceilings."""

    quick: bool = opt(False)
    """smaller sizes, fewer repetitions"""
    force: bool = opt(False)
    """save even a calibration that fails its sanity checks"""


@dataclass(frozen=True)
class Plan(Record):
    """What ``plan`` searches: the run's sequence and batch, the micro-batches to try, the run's length."""

    seq: int = opt(4096, metavar="TOKENS")
    """tokens per sequence (the traced input ids: 1 x TOKENS per micro-batch sequence)"""
    global_batch: int | None = opt(metavar="N", aliases=("--global-batch-size",))
    """sequences per optimizer step, whole job (default: 4M tokens' worth, 2**22 // --seq, at least --gpus)"""
    micro_batches: str = opt("1,2,4,8", metavar="SIZES")
    """micro-batch sizes to try (sequences per rank per micro-batch; each size is traced, a larger one only where
    a smaller one fit)"""
    tokens: float | None = opt(metavar="N")
    """price a run of N tokens (e.g. 15e12): GPU-hours and dollars, from --price or the shipped table"""
    serve: bool = opt(False)
    """plan a serving fleet instead of a training run: the accelerator (--gpu, default every one with a price),
    engine, tensor-parallel degree, max_num_seqs and replicas that serve --request-rate within --slo-ttft and
    --slo-tpot at the lowest price, each candidate simulated at its share of the traffic"""
    attainment: float = opt(0.9, metavar="F")
    """with --serve: the fraction of requests that must meet both latency targets (DistServe's SLO attainment)"""

    def check(self) -> None:
        if self.seq < 1:
            raise FootprintError(f"--seq must be at least 1 token, got {self.seq}")
        if self.global_batch is not None and self.global_batch < 1:
            raise FootprintError(f"--global-batch must be at least 1, got {self.global_batch}")
        if self.tokens is not None and not self.tokens > 0:
            raise FootprintError(f"--tokens must be more than 0, got {self.tokens}")
        if not 0 < self.attainment <= 1:
            raise FootprintError(f"--attainment is a fraction of requests in (0, 1], got {self.attainment}")
        self.sizes  # noqa: B018 - read before any work

    @property
    def sizes(self) -> tuple[int, ...]:
        """--micro-batches as numbers."""
        try:
            out = tuple(sorted({int(x) for x in str(self.micro_batches).split(",") if x.strip()}))
        except ValueError:
            out = ()
        if not out or out[0] < 1:
            raise FootprintError(f"--micro-batches takes sizes of at least 1 such as 1,2,4; got '{self.micro_batches}'")
        return out

    def batch_for(self, gpus: int) -> int:
        """The global batch in sequences (module default: 4M tokens, at least one a GPU)."""
        return self.global_batch or max(2**22 // self.seq, gpus, 1)


RECORDS: tuple[type[Record], ...] = (Workload, Training, Parallel, Target, Memory, Serving, Simulation, Measurement,
                                     Watch, Sections, Calibration, Plan)


