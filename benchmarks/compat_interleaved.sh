#!/usr/bin/env bash
# guidellm, aiperf and `trtlade bench` against ONE `trtlade serve`, interleaved in rounds (the order
# rotates each round), with each client's own CPU time: do the three load generators agree on TTFT
# and throughput, and if not, why? Not part of CI. Needs scripts/setup.sh done; the clients'
# environments are made by benchmarks/compat.sh (or here, the first time).
#
#   benchmarks/compat_interleaved.sh [CONFIG] [ROUNDS] [OUT]   # default configs/smollm2-cpu.yml, 2, reports/compat-interleaved-<time>
#
# Every client: streamed chat, concurrency 4, 16 requests, 50 output tokens (ignore_eos). guidellm and
# aiperf send synthetic prompts of 64 tokens (94 after the chat template); trtlade bench sends
# benchmarks/compat/synthetic64.jsonl, 16 user messages of 64 tokens each (94 after the template), so the
# three prefill the same amount. The report gives each client's mean prompt tokens next to its TTFT.
set -euo pipefail
cd "$(dirname "$0")/.."
config="${1:-configs/smollm2-cpu.yml}"
rounds="${2:-2}"
out="${3:-reports/compat-interleaved-$(date +%Y%m%d-%H%M%S)}"
mkdir -p "$out" .compat
out="$(cd "$out" && pwd)"
venvs="$(pwd)/.compat"
pip_q() { "$1/bin/python" -m pip install --quiet --disable-pip-version-check "${@:2}"; }
[ -x "$venvs/guidellm/bin/guidellm" ] || { python3 -m venv "$venvs/guidellm"; pip_q "$venvs/guidellm" "torch==2.13.0"; pip_q "$venvs/guidellm" "guidellm==0.8.1"; }
[ -x "$venvs/aiperf/bin/aiperf" ] || { python3 -m venv "$venvs/aiperf"; pip_q "$venvs/aiperf" "aiperf==0.13.0"; }

tokenizer="$(.venv/bin/python -c 'from trtlade.reference.embedded import embedded_model_dir; print(embedded_model_dir())')"
model=SmolLM2-135M-Instruct
port="$(.venv/bin/python -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1", 0)); print(s.getsockname()[1])')"
url="http://127.0.0.1:$port"
.venv/bin/trtlade serve --config "$config" --port "$port" > "$out/server.log" 2>&1 &
server_pid=$!
trap 'kill "$server_pid" 2> /dev/null || true; wait "$server_pid" 2> /dev/null || true' EXIT
for _ in $(seq 1 300); do curl -sf "$url/health" > /dev/null && break; sleep 1; done

timed() {  # timed NAME ROUNDDIR CMD...: run CMD, record its wall and CPU seconds (user + system, children included)
  local name="$1" dir="$2"; shift 2
  /usr/bin/time -f "%e %U %S" -o "$dir/$name.time" "$@" > "$dir/$name.log" 2>&1
}
run_guidellm() {
  (cd "$1" && timed guidellm "$1" "$venvs/guidellm/bin/guidellm" run \
    --backend "kind=openai_http,target=$url,model=$model" --profile kind=concurrent,streams=4 \
    --constraint kind=max_requests,count=16 --data kind=synthetic_text,prompt_tokens=64,output_tokens=50 \
    --tokenizer "kind=huggingface_auto,model=$tokenizer" --output "kind=json,path=$1/guidellm.json" \
    --disable-console-interactive)
}
run_aiperf() {
  timed aiperf "$1" "$venvs/aiperf/bin/aiperf" profile --model "$model" --url "$url" --endpoint-type chat \
    --streaming --per-chunk-usage --use-server-token-count --concurrency 4 --request-count 16 \
    --tokenizer "$tokenizer" --synthetic-input-tokens-mean 64 --output-tokens-mean 50 \
    --artifact-dir "$1/aiperf" --ui-type simple
}
run_bench() {
  timed bench "$1" .venv/bin/trtlade bench --base-url "$url" -c 4 -n 16 --num-warmups 1 --max-tokens 50 \
    --ignore-eos --dataset benchmarks/compat/synthetic64.jsonl --modes default --result-dir "$1/bench" --no-plots
}
clients=(guidellm aiperf bench)
for r in $(seq 1 "$rounds"); do
  dir="$out/round-$r"; mkdir -p "$dir"
  for k in 0 1 2; do
    c="${clients[$(( (k + r - 1) % 3 ))]}"
    echo "round $r: $c"
    "run_$c" "$dir"
  done
done
.venv/bin/python benchmarks/compat_report.py --interleaved "$out" | tee "$out/summary.md"
