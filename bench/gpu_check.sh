#!/usr/bin/env bash
# The first run of podc on an NVIDIA GPU, in one go: every check and timing that a short
# loan of a GPU machine needs, each step with its own timeout, a failing step not stopping
# the others. Writes OUT/summary.json and OUT/summary.md (one entry per step: status,
# figures, log tail) and each step's full log under OUT/logs/.
#
#     bash bench/gpu_check.sh [--out DIR] [--podc PATH] [--python PATH] [--wheels DIR] [--dry-run]
#
# Needs the prebuilt release binary (`cargo build --release`; no cargo on the GPU machine:
# the binary travels with the tree) and a Python with JAX for the baselines (`--python`,
# default python3; bench/setup.sh makes one with gymnax, flax and optax). `--wheels DIR`
# installs the Python packages the baselines and the Gymnasium env need (gymnax, flax,
# optax, gymnasium, ...) from wheels in DIR, offline, into a venv beside the system's
# packages (JAX stays the machine's). `--dry-run` runs every step on the CPU plugin at
# small sizes, to prove the script before a GPU is there; the JSON has the same shape.
set -u

OUT=gpu-check
PODC=target/release/podc
WHEELS=
PY=python3
DRY=0
while [ $# -gt 0 ]; do
    case "$1" in
        --out) OUT=$2; shift 2 ;;
        --podc) PODC=$2; shift 2 ;;
        --wheels) WHEELS=$2; shift 2 ;;
        --python) PY=$2; shift 2 ;;
        --dry-run) DRY=1; shift ;;
        *) echo "gpu_check.sh: unknown argument $1" >&2; exit 2 ;;
    esac
done
# Paths given are the caller's; the steps run from the repository root.
if [ "$PODC" != target/release/podc ]; then PODC=$(realpath "$PODC"); fi
mkdir -p "$OUT/logs" "$OUT/figures"
OUT=$(realpath "$OUT")
if [ -n "$WHEELS" ]; then WHEELS=$(realpath "$WHEELS"); fi
PY=$(command -v "$PY" || echo "$PY")
case "$PY" in /*) ;; *) PY=$(realpath "$PY") ;; esac
cd "$(dirname "$0")/.."
PODC=$(realpath "$PODC")
: > "$OUT/steps.jsonl"

if [ "$DRY" = 1 ]; then
    BACKEND=cpu
    ENV_SIZES="1024 4096"
    TRAIN_SIZES="256 1024"
    SEBULBA_STEPS=65536
else
    BACKEND=cuda
    ENV_SIZES="4096 65536 1048576"
    TRAIN_SIZES="4096 65536"
    SEBULBA_STEPS=2000000
fi
export PODC_BACKEND=$BACKEND

if [ -n "$WHEELS" ]; then
    python3 -m venv --system-site-packages "$OUT/venv" &&
        "$OUT/venv/bin/pip" install -q --no-index --find-links "$WHEELS" gymnax flax optax gymnasium &&
        PY=$OUT/venv/bin/python
fi

# step NAME TIMEOUT_S FUNCTION: runs FUNCTION with FIG (a JSON-lines file of figures) set,
# under a timeout, and records its status.
step() {
    local name=$1 limit=$2 fn=$3 start rc status ms
    export FIG="$OUT/figures/$name.jsonl"
    : > "$FIG"
    echo "== $name (timeout ${limit}s)"
    start=$(date +%s%N)
    timeout --kill-after=10 "$limit" bash -c "set -o pipefail; $(declare -f "$fn"); $fn" > "$OUT/logs/$name.log" 2>&1
    rc=$?
    ms=$(( ($(date +%s%N) - start) / 1000000 ))
    case $rc in 0) status=ok ;; 124|137) status=timeout ;; *) status=failed ;; esac
    echo "   $status ($((ms / 1000)) s)"
    printf '{"name": "%s", "status": "%s", "rc": %d, "seconds": %d.%03d, "timeout_s": %d}\n' \
        "$name" "$status" "$rc" $((ms / 1000)) $((ms % 1000)) "$limit" >> "$OUT/steps.jsonl"
}
export PODC BACKEND PY ENV_SIZES TRAIN_SIZES SEBULBA_STEPS

# 1. The devices the plugin reports, with their kind and memory.
devices() {
    "$PODC" devices
}

# 2. Compiled results against the interpreter (tests/pass) and Gymnasium's steps (env fixtures).
parity() {
    python3 bench/gpu_parity.py --podc "$PODC" --backend "$BACKEND" --json | tee -a "$FIG"
}

# 3. Env throughput, random actions, 128 steps.
bench_env() {
    for env in catch cartpole; do
        for b in $ENV_SIZES; do
            "$PODC" bench env "examples/envs/$env.pod" --envs "$b" --steps 128 --json |
                python3 -c "import json,sys; r=json.loads(sys.stdin.read()); r['env']='$env'; print(json.dumps(r))" | tee -a "$FIG"
        done
    done
}

# 4. Anakin training against bench/purejaxrl.py on the same device, compile times included.
bench_train() {
    local failed=0
    for cfg in "a2c catch examples/catch_a2c.pod 16 10" "ppo cartpole examples/cartpole_ppo.pod 128 1"; do
        set -- $cfg
        for b in $TRAIN_SIZES; do
            PODC_NO_CACHE=1 "$PODC" bench train "$3" --envs "$b" --rollout "$4" --updates-per-call "$5" --runs 3 --json |
                python3 -c "import json,sys; r=json.loads(sys.stdin.read()); r['side']='podc'; r['algo']='$1'; r['env']='$2'; print(json.dumps(r))" |
                tee -a "$FIG" || failed=1
            "$PY" bench/purejaxrl.py --algo "$1" --env "$2" --envs "$b" --rollout "$4" --updates-per-call "$5" --runs 3 --json |
                python3 -c "import json,sys; r=json.loads(sys.stdin.read()); r['side']='jax'; r['algo']='$1'; r['env']='$2'; print(json.dumps(r))" |
                tee -a "$FIG" || failed=1
        done
    done
    return $failed
}

# 5. Sebulba IMPALA on Gymnasium's CartPole-v1, actors and learner on device 0. The env
# workers run in the baselines' Python when it has Gymnasium, else in podc's own.
sebulba() {
    local run python=()
    run=$(mktemp -d)/impala
    "$PY" -c "import gymnasium" 2>/dev/null && python=(--python "$PY")
    "$PODC" train examples/cartpole_impala.pod --env gymnasium:CartPole-v1 --actor-devices 0 --learner-devices 0 \
        --total-steps "$SEBULBA_STEPS" --seed 0 "${python[@]}" --out "$run" &&
        python3 -c "
import json, sys
sys.path.insert(0, 'bench')
from last5 import last5
r = [json.loads(l) for l in open('$run/metrics.jsonl')]
print(json.dumps({'env_steps': r[-1]['env_steps'], 'last5_return': last5(__import__('pathlib').Path('$run')),
                  'steps_per_sec': r[-1]['env_steps'] / r[-1]['wall_s'], 'wall_s': r[-1]['wall_s'],
                  'policy_lag': r[-1].get('policy_lag'), 'learner_idle': r[-1].get('learner_idle')}))" | tee -a "$FIG"
}

# 6. The Nature CNN's forward and backward at batch 256, podc against JAX.
nature_cnn() {
    local failed=0
    PODC_NO_CACHE=1 "$PODC" bench run bench/nature_cnn.pod --entry main --runs 10 --json |
        python3 -c "import json,sys; r=json.loads(sys.stdin.read()); r['side']='podc'; print(json.dumps(r))" | tee -a "$FIG" || failed=1
    "$PY" bench/nature_cnn_jax.py --batch 256 --runs 10 |
        python3 -c "import json,sys; r=json.loads(sys.stdin.read()); r['side']='jax'; print(json.dumps(r))" | tee -a "$FIG" || failed=1
    return $failed
}

# Each step's timeout; all six stay under 8 minutes.
step devices 30 devices
step parity 90 parity
step bench_env 90 bench_env
step bench_train 150 bench_train
step sebulba 90 sebulba
step nature_cnn 60 nature_cnn

python3 - "$OUT" "$DRY" "$BACKEND" <<'EOF'
import json, subprocess, sys, datetime
from pathlib import Path
out, dry, backend = Path(sys.argv[1]), sys.argv[2] == "1", sys.argv[3]
steps = [json.loads(l) for l in (out / "steps.jsonl").read_text().splitlines()]
for s in steps:
    s["figures"] = [json.loads(l) for l in (out / "figures" / f"{s['name']}.jsonl").read_text().splitlines() if l.strip().startswith("{")]
    s["log_tail"] = "\n".join((out / "logs" / f"{s['name']}.log").read_text(errors="replace").splitlines()[-15:])
commit = subprocess.run(["git", "rev-parse", "--short", "HEAD"], capture_output=True, text=True).stdout.strip()
summary = {"date": datetime.datetime.now(datetime.timezone.utc).isoformat(timespec="seconds"), "commit": commit,
           "dry_run": dry, "backend": backend, "steps": steps}
(out / "summary.json").write_text(json.dumps(summary, indent=1) + "\n")
md = [f"# gpu_check: {summary['date']}, podc {commit}, backend {backend}{' (dry run)' if dry else ''}", "",
      "| step | status | seconds | figures |", "| --- | --- | ---: | --- |"]
for s in steps:
    md.append(f"| {s['name']} | {s['status']} | {s['seconds']:.0f} | {len(s['figures'])} |")
for s in steps:
    md += ["", f"## {s['name']}: {s['status']}", ""]
    md += [f"- `{json.dumps(f)[:400]}`" for f in s["figures"]]
    md += ["", "```", s["log_tail"], "```"]
(out / "summary.md").write_text("\n".join(md) + "\n")
print(f"wrote {out}/summary.json and {out}/summary.md")
EOF
