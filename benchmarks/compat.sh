#!/usr/bin/env bash
# Run the clients our users already run against `trtlade serve` on the embedded model, and write a
# report next to `trtlade bench` at the same concurrency. Not part of CI (it installs three tools and
# takes about 10 minutes on 2 cores). Usage:
#
#   benchmarks/compat.sh [CONFIG] [OUT]        # default configs/smollm2-cpu.yml, reports/compat-<time>
#
# - guidellm 0.8.1 and aiperf 0.13.0: streamed chat at concurrency 4, 16 requests, 64 prompt tokens,
#   50 output tokens (guidellm always sends continuous_usage_stats; aiperf with --per-chunk-usage);
# - trtlade bench at the same concurrency (default mode: no lookahead field, the server's default);
# - lm-eval 0.4.13 (local-completions, token-id prompts): the local task in benchmarks/compat/ scored with
#   lookahead on (the server spec (2,4,2) for every request) and off ((1,1,0)): loglikelihood
#   (multiple choice) and generate_until must give identical scores and identical per-sample outputs.
#
# Each tool gets its own virtual environment under .compat/ (kept between runs). guidellm and lm-eval
# get the pinned CPU torch first, so they never pull CUDA wheels. Needs `scripts/setup.sh` done.
set -euo pipefail
cd "$(dirname "$0")/.."
config="${1:-configs/smollm2-cpu.yml}"
out="${2:-reports/compat-$(date +%Y%m%d-%H%M%S)}"
mkdir -p "$out" .compat
out="$(cd "$out" && pwd)"
venvs="$(pwd)/.compat"
pip_q() { "$1/bin/python" -m pip install --quiet --disable-pip-version-check "${@:2}"; }

venv() {  # venv NAME PACKAGE... (torch first when asked)
  local dir="$venvs/$1"; shift
  if [ ! -x "$dir/bin/python" ]; then
    python3 -m venv "$dir"
    if [ "$1" = "--torch" ]; then pip_q "$dir" "torch==2.13.0"; fi
    [ "$1" = "--torch" ] && shift
    pip_q "$dir" "$@"
  fi
}
echo "installing the clients under $venvs/ (first run only)"
venv guidellm --torch "guidellm==0.8.1"
venv aiperf "aiperf==0.13.0"
venv lmeval --torch "lm-eval[api]==0.4.13" "transformers>=5.0,<6"

tokenizer="$(.venv/bin/python -c 'from trtlade.reference.embedded import embedded_model_dir; print(embedded_model_dir())')"
model=SmolLM2-135M-Instruct
port="$(.venv/bin/python -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1", 0)); print(s.getsockname()[1])')"
url="http://127.0.0.1:$port"
server_pid=""

start_server() {  # start_server CONFIG LOG
  .venv/bin/trtlade serve --config "$1" --port "$port" > "$2" 2>&1 &
  server_pid=$!
  for _ in $(seq 1 300); do
    if curl -sf "$url/health" > /dev/null; then return 0; fi
    sleep 1
  done
  echo "the server did not become ready; see $2" >&2
  exit 1
}
stop_server() { kill "$server_pid" 2> /dev/null || true; wait "$server_pid" 2> /dev/null || true; }
trap stop_server EXIT

echo "load clients against $config at concurrency 4"
start_server "$config" "$out/server-load.log"
(cd "$out" && "$venvs/guidellm/bin/guidellm" run \
  --backend "kind=openai_http,target=$url,model=$model" --profile kind=concurrent,streams=4 \
  --constraint kind=max_requests,count=16 --data kind=synthetic_text,prompt_tokens=64,output_tokens=50 \
  --tokenizer "kind=huggingface_auto,model=$tokenizer" --output "kind=json,path=$out/guidellm.json" \
  --disable-console-interactive > guidellm.log 2>&1)
"$venvs/aiperf/bin/aiperf" profile --model "$model" --url "$url" --endpoint-type chat --streaming \
  --per-chunk-usage --use-server-token-count --concurrency 4 --request-count 16 --tokenizer "$tokenizer" \
  --synthetic-input-tokens-mean 64 --output-tokens-mean 50 --artifact-dir "$out/aiperf" --ui-type simple \
  > "$out/aiperf.log" 2>&1
.venv/bin/trtlade bench --base-url "$url" -c 4 -n 16 --num-warmups 1 --max-tokens 50 --ignore-eos \
  --modes default --result-dir "$out/bench" --no-plots > "$out/bench.log" 2>&1
stop_server

for mode in on off; do
  spec=$([ "$mode" = on ] && echo 2,4,2 || echo 1,1,0)
  printf 'model: {}\nlookahead:\n  spec: %s\n' "$spec" > "$out/lookahead-$mode.yml"
  echo "lm-eval with lookahead $mode ($spec)"
  start_server "$out/lookahead-$mode.yml" "$out/server-lm-eval-$mode.log"
  HF_HUB_OFFLINE=1 HF_DATASETS_OFFLINE=1 "$venvs/lmeval/bin/lm_eval" run --model local-completions \
    --tasks trtlade_arith_mc trtlade_arith_gen --include_path benchmarks/compat \
    --model_args "model=$model" "base_url=$url/v1/completions" "tokenizer=$tokenizer" \
    tokenizer_backend=huggingface tokenized_requests=True num_concurrent=1 max_retries=1 \
    --output_path "$out/lm-eval-$mode" --log_samples > "$out/lm-eval-$mode.log" 2>&1
  stop_server
done

.venv/bin/python benchmarks/compat_report.py "$out" | tee "$out/results.md"
