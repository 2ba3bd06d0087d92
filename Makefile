# mpidwe: one-command set-up. `make demo` and `make test` create .venv if missing and
# install everything into it (PyTorch's CPU build where no NVIDIA GPU is, and an MPI from
# PyPI unless MPI=site).
#   make install              .venv with everything, the kernels compiled into numba's cache
#   make warm WARM="--dim 300"  compile the kernels of other training options too (mpidwe warm)
#   make demo                 generate the demo corpus, preprocess it on NP ranks, train, evaluate
#   make test                 the whole test suite (launches real mpiexec with 1 to 8 ranks;
#                             tests/mpi is the MPI suite: each test a job of N ranks)
#   make test-install         pip install ".[mpich]" in a clean venv, then a 2-rank run (minutes)
#   make bench                benchmarks against gensim on ../shared/data (minutes)
# Knobs: PYTHON=python3.11  NP=2  MPI=mpich|openmpi|site  TORCH=torch==2.13.0  WARM="--dim 300"
#        TORCH_INDEX=URL (where PyTorch comes from; TORCH_INDEX= for PyPI's default build)
#
# PyTorch: without nvidia-smi, the CPU build from PyTorch's CPU index (PyPI's Linux wheel is
# the CUDA build: several GB of nvidia-* packages); where that index does not answer, the
# CPU build as $(TORCH)+cpu from pip's own indexes, never the CUDA build. With nvidia-smi,
# PyPI's build (CUDA). `make torch-args` prints the pip arguments this machine gets.

PYTHON ?= python3
VENV ?= .venv
NP ?= 2
MPI ?= mpich
TORCH ?= torch==2.13.0
TORCH_CPU_INDEX ?= https://download.pytorch.org/whl/cpu
NVIDIA_SMI := $(shell command -v nvidia-smi 2>/dev/null)
TORCH_INDEX ?= $(if $(NVIDIA_SMI),,$(TORCH_CPU_INDEX))
# the CPU build's name on a mirror or wheel folder: X+cpu on Linux (elsewhere PyPI's is the CPU build)
TORCH_CPU := $(if $(and $(findstring ==,$(TORCH)),$(filter Linux,$(shell uname -s))),$(TORCH)+cpu,$(TORCH))
DEMO_DIR ?= demo
BIN := $(VENV)/bin
PIP := $(BIN)/python -m pip
STAMP := $(VENV)/.installed-$(MPI)
TEST_STAMP := $(VENV)/.installed-test

.PHONY: install warm demo test test-fast test-install bench clean distclean torch-args

$(BIN)/python:
	$(PYTHON) -m venv $(VENV)

# The pip arguments for PyTorch, as a shell command's output; says on stderr which build and why.
ifeq ($(TORCH_INDEX),)
TORCH_ARGS = echo "make: PyTorch from PyPI: $(if $(NVIDIA_SMI),nvidia-smi found,TORCH_INDEX is empty), so the CUDA build on Linux" \
	"(TORCH_INDEX=$(TORCH_CPU_INDEX) for the CPU build)" >&2; echo "$(TORCH)"
else ifneq ($(TORCH_INDEX),$(TORCH_CPU_INDEX))
TORCH_ARGS = echo "make: PyTorch from TORCH_INDEX=$(TORCH_INDEX)" >&2; echo "--index-url $(TORCH_INDEX) $(TORCH)"
else
TORCH_ARGS = if $(PYTHON) -c 'import sys, urllib.request; urllib.request.urlopen(sys.argv[1], timeout=20)' \
		"$(TORCH_CPU_INDEX)/torch/" >/dev/null 2>&1; then \
	echo "make: PyTorch's CPU build from $(TORCH_CPU_INDEX): no NVIDIA GPU here (no nvidia-smi; TORCH_INDEX= for PyPI's CUDA build)" >&2; \
	echo "--index-url $(TORCH_CPU_INDEX) $(TORCH)"; \
	else echo "make: PyTorch's CPU build as $(TORCH_CPU) from pip's indexes: no NVIDIA GPU here (no nvidia-smi)," \
		"and $(TORCH_CPU_INDEX) does not answer (TORCH_INDEX=URL for a mirror of it)" >&2; echo "$(TORCH_CPU)"; fi
endif

$(STAMP): $(BIN)/python setup.cfg pyproject.toml
	$(PIP) install --upgrade pip setuptools wheel
	args=$$($(TORCH_ARGS)) && $(PIP) install $$args || { echo "make: could not install PyTorch" \
		"($${args:-no arguments}); set TORCH_INDEX to an index that has it" >&2; exit 1; }
ifeq ($(MPI),site)
	# build mpi4py against the MPI whose mpicc is on PATH (e.g. after `module load openmpi`)
	$(PIP) install --no-binary mpi4py --no-cache-dir mpi4py
else
	$(PIP) install "$(MPI)" mpi4py
endif
	$(PIP) install -e .
	# compile the numba kernels a default run uses into numba's disk cache, so that the
	# first run does not (docs/guide.md, "Compiled kernels"; again: make warm)
	$(BIN)/python -m mpidwe warm $(WARM)
	touch $@

$(TEST_STAMP): $(STAMP)
	$(PIP) install -e ".[test]"
	# Debian's Slurm and munge for tests/test_slurm.py (a private one-node cluster); where
	# they cannot be installed (not root, no apt-get) those tests skip
	@if command -v slurmctld >/dev/null 2>&1 || [ -x /usr/sbin/slurmctld ]; then :; \
	elif [ "$$(id -u)" = 0 ] && command -v apt-get >/dev/null 2>&1; then \
		{ apt-get update && DEBIAN_FRONTEND=noninteractive apt-get install -y --no-install-recommends \
			slurm-wlm munge; } || echo "make: could not install slurm-wlm and munge; the Slurm tests will skip"; \
	else echo "make: no slurmctld, and installing slurm-wlm and munge needs root and apt-get; the Slurm tests will skip"; fi
	touch $@

install: $(STAMP)

torch-args:
	@$(TORCH_ARGS)

warm: $(STAMP)
	$(BIN)/python -m mpidwe warm $(WARM)

demo: $(STAMP)
	PATH="$(abspath $(BIN)):$$PATH" $(BIN)/python -m mpidwe.demo --dir $(DEMO_DIR) --ranks $(NP)

# -v: one line per test, so the log names every check, the MPI suite's jobs
# (tests/mpi/...[nprocs=N]) included, and shows which test was running if CI stops
test: $(TEST_STAMP)
	PATH="$(abspath $(BIN)):$$PATH" $(BIN)/python -m pytest -v -ra --durations=15 tests

test-fast: $(TEST_STAMP)
	PATH="$(abspath $(BIN)):$$PATH" $(BIN)/python -m pytest -ra -m "not mpi and not slow and not install" tests

# pip install ".[mpich]" into a clean venv (PyTorch first, as `make install` chooses it), then
# a 2-rank run through the console script: the pip path of the README (a few minutes, network)
test-install: $(TEST_STAMP)
	args=$$($(TORCH_ARGS)) && PATH="$(abspath $(BIN)):$$PATH" MPIDWE_TEST_TORCH_ARGS="$$args" \
		$(BIN)/python -m pytest -v -ra -m install tests/test_install.py

bench: $(TEST_STAMP)
	PATH="$(abspath $(BIN)):$$PATH" $(BIN)/python benchmarks/preprocess.py
	PATH="$(abspath $(BIN)):$$PATH" $(BIN)/python benchmarks/train.py --workdir bench-work
	PATH="$(abspath $(BIN)):$$PATH" OPENBLAS_NUM_THREADS=1 OMP_NUM_THREADS=1 $(BIN)/python benchmarks/evaluate.py
	PATH="$(abspath $(BIN)):$$PATH" $(BIN)/python benchmarks/ranks.py demo --workdir bench-work/ranks
	PATH="$(abspath $(BIN)):$$PATH" $(BIN)/python benchmarks/ranks.py enwiki --workdir bench-work/ranks
	PATH="$(abspath $(BIN)):$$PATH" $(BIN)/python benchmarks/scaling.py bench-work/ranks/run-enwiki-1-sparse \
		bench-work/ranks/run-enwiki-2-sparse bench-work/ranks/run-enwiki-2-dense

clean:
	rm -rf $(DEMO_DIR) bench-work .pytest_cache build *.egg-info

distclean: clean
	rm -rf $(VENV)
