"""What every model source shares: the record of a built model, building on the meta device
(or for real, under :func:`real_weights`), initialisation skipped while building."""

from __future__ import annotations

import contextlib
import importlib
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from typing import Any

import torch
from torch import nn

from ..errors import FootprintError, MissingExtraError
from .inputs import InputSpec


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


def require(package: str, extra: str, purpose: str) -> Any:
    try:
        return importlib.import_module(package)
    except ImportError:
        raise MissingExtraError(package, extra, purpose) from None


_INIT_FUNCS = ("uniform_", "normal_", "trunc_normal_", "constant_", "ones_", "zeros_", "eye_", "dirac_",
               "xavier_uniform_", "xavier_normal_", "kaiming_uniform_", "kaiming_normal_", "orthogonal_",
               "sparse_")


_RANDOM_METHODS = ("uniform_", "normal_", "random_", "exponential_", "log_normal_", "cauchy_", "geometric_")


@contextlib.contextmanager
def skip_init() -> Iterator[None]:
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


REAL = {"on": False}


@contextlib.contextmanager
def real_weights() -> Iterator[None]:
    """Inside this context the sources build models for real, initialised as their
    constructors do (for measuring them), instead of on the meta device."""
    old = REAL["on"]
    REAL["on"] = True
    try:
        yield
    finally:
        REAL["on"] = old


def build_on_meta(ctor: Callable[[], nn.Module], what: str) -> tuple[nn.Module, list[str]]:
    """Build on the meta device; where the constructor cannot run there, build for real
    (initialisation skipped) and move to meta. Returns the model and a note saying which.
    Under :func:`real_weights`, build for real with the constructor's own initialisation."""
    if REAL["on"]:
        try:
            return check_module(ctor(), what), ["built with random weights (the constructor's initialisation)"]
        except FootprintError:
            raise
        except Exception as e:
            raise FootprintError(f"could not build {what}: {type(e).__name__}: {e}") from e
    try:
        with torch.device("meta"), skip_init():  # initialising meta tensors would only cost time
            model = ctor()
        return check_module(model, what), []
    except FootprintError:
        raise
    except Exception as meta_err:  # the constructor needs real values (e.g. torchvision's regnet)
        try:
            with skip_init():
                model = ctor()
        except Exception as real_err:
            raise FootprintError(
                f"could not build {what}: {type(real_err).__name__}: {real_err}"
            ) from real_err
        model = check_module(model, what).to("meta")
        return model, [
            f"the constructor cannot run on the meta device ({type(meta_err).__name__}); built on CPU "
            "with initialisation skipped, then moved to meta"
        ]


def check_module(obj: Any, what: str) -> nn.Module:
    if not isinstance(obj, nn.Module):
        raise FootprintError(f"{what} returned {type(obj).__name__}, not a torch.nn.Module")
    return obj


