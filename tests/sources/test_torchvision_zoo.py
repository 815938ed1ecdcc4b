"""Every torchvision classification model: parameters and MACs against its published weights metadata.

Expected values come from outside this project: each weight's ``meta["num_params"]`` and
``meta["_ops"]`` (GMACs, published to 3 decimals, which torchvision calls "GFLOPS"), at
each weight's own input size. Weights that build the same model (same classes, same input
size) are profiled once and every one of them is checked against that profile.
"""

from __future__ import annotations

import pytest

torchvision = pytest.importorskip("torchvision")

import torch_footprint as tfp  # noqa: E402

MODELS = torchvision.models.list_models(module=torchvision.models)


def _groups(name: str) -> dict[tuple, list]:
    groups: dict[tuple, list] = {}
    for w in torchvision.models.get_model_weights(name):
        key = (w.transforms.keywords["crop_size"], len(w.meta["categories"] or ()), w.meta.get("min_size"))
        groups.setdefault(key, []).append(w)
    return groups


def test_the_zoo_has_80_models() -> None:
    assert len(MODELS) == 80
    assert sum(len(list(torchvision.models.get_model_weights(m))) for m in MODELS) >= 115


@pytest.mark.parametrize("name", MODELS)
def test_params_and_macs_match_published(name: str) -> None:
    for (crop, _, _), weights in _groups(name).items():
        p = tfp.profile(name, weights=weights[0].name)
        assert p.trace.inputs[0]["shape"] == [1, 3, crop, crop]
        assert p.unknown_ops == {}
        for w in weights:
            assert p.params == w.meta["num_params"], w.name
            assert round(p.macs / 1e9, 3) == pytest.approx(w.meta["_ops"], abs=1e-9), w.name
