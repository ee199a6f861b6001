#!/usr/bin/env bash
# Runs one command on every worker of a TPU VM, detached from the ssh session, one log per worker.
set -euo pipefail
# shellcheck source=lib.sh source-path=SCRIPTDIR
source "$(dirname "$0")/lib.sh"

USAGE="Usage: $SCRIPT --name NAME --zone ZONE [--env KEY=VALUE ...] [--dir REMOTE_DIR]
                 [--launch-id ID] [--num-slices N] [--internal-ip] [--project PROJECT] [--dry-run]
                 -- COMMAND [ARG ...]

Starts COMMAND on every worker at once (gcloud compute tpus tpu-vm ssh --worker=all), in
~/REMOTE_DIR with ~/REMOTE_DIR-venv/bin first on PATH (as setup.sh left them), under nohup and
setsid: it keeps running when the ssh session ends. Each word of COMMAND reaches the worker
exactly as given here (spaces, quotes, \$ and newlines included): nothing is expanded on the
worker. Worker W appends its output to ~/REMOTE_DIR/logs/run.worker<W>.log (logs.sh shows it)
and writes the run's pid, start time and launch id to ~/REMOTE_DIR/logs/run.pid (status.sh,
stop.sh).

First every worker is checked: when one has a run still alive (or no ~/REMOTE_DIR), nothing is
started. When the start then fails on a worker, the runs this launch started on the others
are stopped again (SIGTERM, SIGKILL after 30 s). Each launch has an id, recorded on every
worker: a start that gcloud repeats after a dropped connection finds its own run and succeeds.
When COMMAND ends, its exit status goes to ~/REMOTE_DIR/logs/run.exit.

With --num-slices N the same happens on every worker of the slices NAME-0 .. NAME-(N-1) (each
step reaches the slices at once; nothing starts unless every worker of every slice passed the
check). The TPU runtime sets the multi-slice environment (MEGASCALE_*), which JAX reads; give
the run a mesh with a dcn_data axis of N, e.g. --config.mesh=dcn_data:N,fsdp:-1.

  --name NAME        the TPU VM's name
  --zone ZONE        its zone
  --env KEY=VALUE    set an environment variable for COMMAND (repeatable)
  --dir REMOTE_DIR   relative to the workers' home directory (default $REMOTE_DIR_DEFAULT)
  --launch-id ID     this launch's id (default: the time and a random number)
$SLICES_HELP
$INTERNAL_IP_HELP
  --project PROJECT  the Google Cloud project (default: gcloud's configured one)
  --dry-run          print the gcloud commands (the check, then the start), run nothing

Example:
  $SCRIPT --name lemur --zone us-central2-b -- python -m easylemur.train \\
      --config configs/lemur_70b_pretrain.py --config.workdir=gs://BUCKET/lemur70b

After a preemption, run the same launch.sh command on the recreated VM: the run resumes from
the newest checkpoint in its (bucket) workdir; babysit.sh does all of that by itself."

DIR=$REMOTE_DIR_DEFAULT LAUNCH_ID=""
ENVS=()

while [ $# -gt 0 ]; do
    common_flag "$@"
    if [ "$USED" -gt 0 ]; then shift "$USED"; continue; fi
    case "$1" in
        --env) need_value "$1" "$#"; ENVS+=("$2"); shift 2 ;;
        --env=*) ENVS+=("${1#*=}"); shift ;;
        --dir) need_value "$1" "$#"; DIR=$2; shift 2 ;;
        --dir=*) DIR=${1#*=}; shift ;;
        --launch-id) need_value "$1" "$#"; LAUNCH_ID=$2; shift 2 ;;
        --launch-id=*) LAUNCH_ID=${1#*=}; shift ;;
        -h | --help) usage_and_exit "$USAGE" ;;
        --) shift; break ;;
        *) die "unknown argument '$1' (the command to run goes after --; see --help)" ;;
    esac
done

check_target
check_remote_dir "$DIR"
[ $# -gt 0 ] || die "no command to run: give it after -- (e.g. -- python -m easylemur.train --config CFG)"
for kv in ${ENVS[@]+"${ENVS[@]}"}; do
    [[ $kv =~ ^[A-Za-z_][A-Za-z0-9_]*= ]] || die "--env '$kv' must look like KEY=VALUE (KEY: letters, digits, _)"
done

LAUNCH_ID=${LAUNCH_ID:-$(date -u +%Y%m%dT%H%M%SZ)-$RANDOM$RANDOM}
[[ $LAUNCH_ID =~ ^[A-Za-z0-9_.:-]+$ ]] || die "--launch-id '$LAUNCH_ID' must be letters, digits, _ . : -"

remote_command "$DIR" "$LAUNCH_ID" ${ENVS[@]+"${ENVS[@]}"} -- "$@"
ssh_workers "$REMOTE_CHECK" || { echo "$SCRIPT: not started: a worker above cannot take the run" >&2; exit 1; }
if ! ssh_workers "$REMOTE_START"; then
    echo "$SCRIPT: the start failed on a worker above; stopping launch $LAUNCH_ID on the others" >&2
    ssh_workers "$REMOTE_ABORT" || echo "$SCRIPT: could not reach every worker to stop launch $LAUNCH_ID (stop.sh)" >&2
    exit 1
fi
