#!/usr/bin/env bash
# Stops the run on every worker (it saves a checkpoint first), and with --delete the TPU VM too.
set -euo pipefail
# shellcheck source=lib.sh source-path=SCRIPTDIR
source "$(dirname "$0")/lib.sh"

USAGE="Usage: $SCRIPT --name NAME --zone ZONE [--delete] [--queued] [--timeout SECONDS]
               [--dir REMOTE_DIR] [--num-slices N] [--internal-ip] [--project PROJECT] [--dry-run]

Sends SIGTERM to the run launch.sh started on every worker: easylemur finishes its step,
saves a checkpoint, waits for it and exits (status 143); the same launch.sh command resumes
it. Waits until every process of each worker's run has ended; after --timeout seconds
(default 900) it sends SIGKILL to what is left and fails. Only the run launch.sh recorded is
signalled: its pid and start time must both match (a stale pid file means no run). Each
worker notes the stopped launch in ~/REMOTE_DIR/logs/run.stopped: babysit.sh does not relaunch
a run stopped on purpose.

With --delete, then deletes the TPU VM (gcloud compute tpus tpu-vm delete), or with --queued
its queued resource and the VM in it (gcloud compute tpus queued-resources delete --force).
Workers that cannot be reached (a preempted VM) do not stop the deletion. With --num-slices N
the run is stopped on every slice at once, and --delete deletes the queued resource NAME with
all its slices (--queued is implied).

  --name NAME        the TPU VM's name
  --zone ZONE        its zone
  --delete           delete the TPU VM after stopping the run
  --queued           it was created with create.sh --queued (with --delete)
  --timeout SECONDS  how long to wait for the runs to save and exit (default 900)
  --dir REMOTE_DIR   as given to launch.sh (default $REMOTE_DIR_DEFAULT)
$SLICES_HELP
$INTERNAL_IP_HELP
  --project PROJECT  the Google Cloud project (default: gcloud's configured one)
  --dry-run          print the gcloud commands, run nothing"

DIR=$REMOTE_DIR_DEFAULT DELETE=0 QUEUED=0 TIMEOUT=900

while [ $# -gt 0 ]; do
    common_flag "$@"
    if [ "$USED" -gt 0 ]; then shift "$USED"; continue; fi
    case "$1" in
        --delete) DELETE=1; shift ;;
        --queued) QUEUED=1; shift ;;
        --timeout) need_value "$1" "$#"; TIMEOUT=$2; shift 2 ;;
        --timeout=*) TIMEOUT=${1#*=}; shift ;;
        --dir) need_value "$1" "$#"; DIR=$2; shift 2 ;;
        --dir=*) DIR=${1#*=}; shift ;;
        -h | --help) usage_and_exit "$USAGE" ;;
        *) die "unknown argument '$1' (see --help)" ;;
    esac
done

check_target
check_remote_dir "$DIR"
[[ $TIMEOUT =~ ^[0-9]+$ ]] || die "--timeout '$TIMEOUT' must be a number of seconds"
[ "$QUEUED" = 0 ] || [ "$DELETE" = 1 ] || die "--queued only matters with --delete"
if [ "$NUM_SLICES" -gt 1 ]; then QUEUED=1; fi  # a multi-slice TPU is always a queued resource

stop_command "$DIR" "$TIMEOUT"

if [ "$DELETE" = 0 ]; then
    ssh_workers "$REMOTE_STOP"
    exit 0
fi
ssh_workers "$REMOTE_STOP" || echo "$SCRIPT: could not stop the run on every worker; deleting anyway" >&2
if [ "$QUEUED" = 1 ]; then
    run gcloud compute tpus queued-resources delete "$NAME" "${WHERE[@]}" --force --quiet
else
    run gcloud compute tpus tpu-vm delete "$NAME" "${WHERE[@]}" --quiet
fi
