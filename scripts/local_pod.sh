#!/usr/bin/env bash
# A local pod: N training processes on this machine, joined as one multi-process JAX run
# (docs/design.md, "Lost hosts and hangs"), to try what a pod does when a host dies or hangs.
set -euo pipefail

USAGE="Usage: scripts/local_pod.sh N [--devices D] [--port PORT] [--logs DIR] -- TRAIN_ARG ...

Starts N processes of 'python -m easylemur.train TRAIN_ARG ...' on CPUs, each with D devices
(default 1), process i with --config.distributed.coordinator_address=127.0.0.1:PORT (default: a
free port), --config.distributed.num_processes=N and --config.distributed.process_id=i; process
i's output goes to DIR/process<i>.log (default: a new directory under \${TMPDIR:-/tmp}), and
'process <i> <pid>' lines to stdout, so that one can be killed or stopped (kill -STOP PID).
It waits for every process and prints 'process <i> exited <status> after <s> s' for each as it
exits, then exits with the first non-zero status (0 when all exited 0). Exit statuses of train: 0 done,
1 failed, 2 bad input, 75 a process of the pod lost, 76 a hang (no step within the watchdog's
limit), 143/130 stopped by SIGTERM/SIGINT after a save.

Example:
  scripts/local_pod.sh 4 -- --config configs/tiny_pretrain.py --config.workdir=/tmp/pod \\
      --config.data.shards=4 --config.distributed.heartbeat_timeout_seconds=5"

die() { echo "local_pod.sh: $1" >&2; exit 2; }

[ $# -ge 1 ] || { echo "$USAGE" >&2; exit 2; }
case "$1" in -h | --help) echo "$USAGE"; exit 0 ;; esac
N=$1
shift
[[ $N =~ ^[1-9][0-9]*$ ]] || die "N must be a positive number of processes, got '$N'"
DEVICES=1 PORT="" LOGS=""
while [ $# -gt 0 ]; do
    case "$1" in
        --devices) [ $# -ge 2 ] || die "--devices needs a value"; DEVICES=$2; shift 2 ;;
        --port) [ $# -ge 2 ] || die "--port needs a value"; PORT=$2; shift 2 ;;
        --logs) [ $# -ge 2 ] || die "--logs needs a value"; LOGS=$2; shift 2 ;;
        --) shift; break ;;
        -h | --help) echo "$USAGE"; exit 0 ;;
        *) die "unknown flag '$1' (the train arguments come after --)" ;;
    esac
done
[[ $DEVICES =~ ^[1-9][0-9]*$ ]] || die "--devices must be a positive number, got '$DEVICES'"
[ $# -gt 0 ] || die "no train arguments after -- (at least --config FILE)"
PYTHON=${PYTHON:-$(cd "$(dirname "$0")/.." && pwd)/.venv/bin/python}
[ -x "$PYTHON" ] || PYTHON=python3
if [ -z "$PORT" ]; then
    PORT=$("$PYTHON" -c 'import socket; s = socket.socket(); s.bind(("127.0.0.1", 0)); print(s.getsockname()[1])')
fi
[[ $PORT =~ ^[0-9]+$ ]] || die "--port must be a number, got '$PORT'"
if [ -z "$LOGS" ]; then LOGS=$(mktemp -d "${TMPDIR:-/tmp}/easylemur-pod.XXXXXX"); fi
mkdir -p "$LOGS"
echo "local pod: $N processes, $DEVICES device(s) each, coordinator 127.0.0.1:$PORT, logs in $LOGS"

PIDS=()
for ((i = 0; i < N; i++)); do
    XLA_FLAGS="--xla_force_host_platform_device_count=$DEVICES" JAX_PLATFORMS=cpu \
        "$PYTHON" -u -m easylemur.train "$@" \
        "--config.distributed.coordinator_address=127.0.0.1:$PORT" \
        "--config.distributed.num_processes=$N" "--config.distributed.process_id=$i" \
        > "$LOGS/process$i.log" 2>&1 &
    PIDS+=("$!")
    echo "process $i ${PIDS[$i]}"
done
# a Ctrl-C or SIGTERM to this script reaches every process
trap 'kill -TERM "${PIDS[@]}" 2>/dev/null || true' INT TERM

# each exit said when it happens (wait -n), not in process order: a stopped coordinator does not
# hide the workers' exits
declare -A INDEX
for ((i = 0; i < N; i++)); do INDEX[${PIDS[$i]}]=$i; done
START=$SECONDS FIRST=0
for ((left = N; left > 0; left--)); do
    rc=0 DONE=""
    wait -n -p DONE "${PIDS[@]}" || rc=$?
    [ -n "$DONE" ] || break  # no child left to wait for
    echo "process ${INDEX[$DONE]} exited $rc after $((SECONDS - START)) s"
    if [ "$FIRST" = 0 ] && [ "$rc" != 0 ]; then FIRST=$rc; fi
done
exit "$FIRST"
