#!/usr/bin/env bash
# The state of a TPU VM (and its queued resource) and of the run launch.sh started on each worker.
set -euo pipefail
# shellcheck source=lib.sh source-path=SCRIPTDIR
source "$(dirname "$0")/lib.sh"

USAGE="Usage: $SCRIPT --name NAME --zone ZONE [--queued] [--dir REMOTE_DIR] [--project PROJECT] [--dry-run]

Prints the queued resource's state (with --queued), the TPU VM's state, health, type and
runtime, and for each worker whether the launched run is alive and its log's last line. A
preempted VM (state PREEMPTED) gets the recovery steps instead.

  --name NAME        the TPU VM's name
  --zone ZONE        its zone
  --queued           it was created with create.sh --queued
  --dir REMOTE_DIR   as given to setup.sh and launch.sh (default $REMOTE_DIR_DEFAULT)
  --project PROJECT  the Google Cloud project (default: gcloud's configured one)
  --dry-run          print the gcloud commands, run nothing"

DIR=$REMOTE_DIR_DEFAULT QUEUED=0

while [ $# -gt 0 ]; do
    common_flag "$@"
    if [ "$USED" -gt 0 ]; then shift "$USED"; continue; fi
    case "$1" in
        --queued) QUEUED=1; shift ;;
        --dir) need_value "$1" "$#"; DIR=$2; shift 2 ;;
        --dir=*) DIR=${1#*=}; shift ;;
        -h | --help) usage_and_exit "$USAGE" ;;
        *) die "unknown argument '$1' (see --help)" ;;
    esac
done

check_target
check_remote_dir "$DIR"

if [ "$QUEUED" = 1 ]; then
    run gcloud compute tpus queued-resources describe "$NAME" "${WHERE[@]}" --format="value(state.state)"
fi
STATE=""
if [ "$DRY_RUN" = 1 ]; then
    run gcloud compute tpus tpu-vm describe "$NAME" "${WHERE[@]}" \
        --format="value(state,health,acceleratorType,runtimeVersion)"
else
    INFO=$(run gcloud compute tpus tpu-vm describe "$NAME" "${WHERE[@]}" \
        --format="value(state,health,acceleratorType,runtimeVersion)") || exit 1
    echo "$NAME: $INFO"
    STATE=${INFO%%[[:space:]]*}
fi

case "$STATE" in
    PREEMPTED | TERMINATED)
        d=$(dirname "$0")
        echo "$NAME was preempted. Recover: delete it, create it again, set it up and launch the same command;"
        echo "the run resumes from the newest checkpoint in its workdir (a bucket: the VM's disks are gone):"
        echo "  $d/stop.sh --name $NAME --zone $ZONE --delete$([ "$QUEUED" = 1 ] && echo ' --queued')"
        echo "  $d/create.sh --name $NAME --zone $ZONE --type TYPE ...   # as before"
        echo "  $d/setup.sh --name $NAME --zone $ZONE ...                # as before"
        echo "  $d/launch.sh --name $NAME --zone $ZONE -- COMMAND...     # the same command"
        exit 0 ;;
    "" | READY) ;;
    *) echo "$NAME is $STATE: the workers cannot be reached yet"; exit 0 ;;
esac

QDIR=$(q "$DIR")
ssh_workers "$WORKER_ID_SH; cd $QDIR 2>/dev/null || { echo \"worker \$w: no ~/$QDIR (run setup.sh)\"; exit 0; }
if [ -f logs/run.pid ] && kill -0 \"\$(cat logs/run.pid)\" 2>/dev/null; then s=\"running (pid \$(cat logs/run.pid))\"; else s='not running'; fi
echo \"worker \$w: \$s; log: \$(tail -n 1 \"logs/run.worker\$w.log\" 2>/dev/null || echo none)\""
