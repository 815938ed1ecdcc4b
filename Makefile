# make run   - create .venv if missing, install, profile the default model (resnet50)
# make test  - create .venv if missing, install with the test extras: ruff, mypy, the layer contract, the docs
#              built strict (their pasted outputs checked by a test), the tests
# make docs  - regenerate every pasted output of the docs (docs/regenerate.py), then build the site
# make bench - every benchmark script (tens of minutes; gpu_validate.py only where CUDA is)
VENV   ?= .venv
PYTHON ?= python3
PY     := $(VENV)/bin/python
MODEL  ?= resnet50

.PHONY: run test docs lint bench clean

$(VENV)/.installed-%: pyproject.toml
	@test -x $(PY) || $(PYTHON) -m venv $(VENV)
	$(PY) -m pip install --quiet --disable-pip-version-check -e ".[$*]"
	@touch $@

run: $(VENV)/.installed-all
	$(VENV)/bin/footprint profile $(MODEL)

test: $(VENV)/.installed-all,dev,docs
	$(VENV)/bin/ruff check src tests benchmarks docs
	$(VENV)/bin/mypy
	$(VENV)/bin/lint-imports
	NO_MKDOCS_2_WARNING=1 $(VENV)/bin/mkdocs build --strict --quiet --site-dir $(VENV)/site
	$(PY) -m pytest -q

docs: $(VENV)/.installed-all,dev,docs
	$(PY) docs/regenerate.py
	NO_MKDOCS_2_WARNING=1 $(VENV)/bin/mkdocs build --strict --site-dir site

bench: $(VENV)/.installed-all,dev,bench
	$(PY) benchmarks/peers.py
	$(PY) benchmarks/llama70b_scale.py
	$(PY) benchmarks/llama70b_memory.py
	$(PY) benchmarks/llm_speed.py
	$(PY) benchmarks/report_sizes.py
	$(PY) benchmarks/memory_cpu.py
	$(PY) benchmarks/roofline_cpu.py
	$(PY) benchmarks/validate_cpu.py --json benchmarks/results/validate-cpu.json
	$(PY) benchmarks/fit_kernels.py
	$(PY) benchmarks/validate_models.py --leave-one-gpu-out
	$(PY) benchmarks/kernel_model_diff.py
	$(PY) benchmarks/pricing_speed_ab.py
	$(PY) benchmarks/timer_agreement.py
	$(PY) benchmarks/distributed_cpu.py
	$(PY) benchmarks/watch_overhead.py
	$(PY) benchmarks/llm_measure.py
	$(PY) benchmarks/llm_published.py
	$(PY) benchmarks/validate_serving_kv.py
	$(PY) benchmarks/llm_quantized.py
	$(PY) benchmarks/train_published.py
	$(PY) benchmarks/train_multi_published.py
	$(PY) benchmarks/train_published_layouts.py --budget 1800
	$(PY) benchmarks/model_zoo_sweep.py
	$(PY) benchmarks/llm_zoo_sweep.py
	@if $(PY) -c "import sys, torch; sys.exit(not torch.cuda.is_available())"; then \
		$(PY) benchmarks/gpu_validate.py && $(PY) benchmarks/train_kernels.py && \
		$(PY) benchmarks/decode_profile.py --device cuda; \
	else echo "gpu_validate.py, train_kernels.py, decode_profile.py: no CUDA device here, not run"; fi

clean:
	rm -rf $(VENV) build dist site src/*.egg-info
