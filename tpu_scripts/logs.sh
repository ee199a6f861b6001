#!/usr/bin/env bash
# Shows one worker's log of the run launch.sh started.
set -euo pipefail
# shellcheck source=lib.sh source-path=SCRIPTDIR
source "$(dirname "$0")/lib.sh"

USAGE="Usage: $SCRIPT --name NAME --zone ZONE --worker I [--follow] [--lines N] [--dir REMOTE_DIR]
               [--num-slices N --slice S] [--internal-ip] [--project PROJECT] [--dry-run]

Prints the last N lines of worker I's log (~/REMOTE_DIR/logs/run.worker<I>.log, the name
worker I gave it: its number, or its hostname where the metadata server did not answer); --follow
keeps printing as it grows (Ctrl-C stops watching, not the run). Worker 0 is the one that
writes metrics and prints the step lines (with --num-slices: worker 0 of slice 0).

  --name NAME        the TPU VM's name
  --zone ZONE        its zone
  --worker I         the worker, 0 .. workers-1
  --follow           follow the log (tail -F)
  --lines N          lines to show (default 100)
  --dir REMOTE_DIR   as given to launch.sh (default $REMOTE_DIR_DEFAULT)
$SLICES_HELP
  --slice S          with --num-slices: the worker of slice NAME-S (default 0)
$INTERNAL_IP_HELP
  --project PROJECT  the Google Cloud project (default: gcloud's configured one)
  --dry-run          print the gcloud command, run nothing"

DIR=$REMOTE_DIR_DEFAULT WORKER="" FOLLOW=0 LINES=100 SLICE=0

while [ $# -gt 0 ]; do
    common_flag "$@"
    if [ "$USED" -gt 0 ]; then shift "$USED"; continue; fi
    case "$1" in
        --worker) need_value "$1" "$#"; WORKER=$2; shift 2 ;;
        --worker=*) WORKER=${1#*=}; shift ;;
        --follow) FOLLOW=1; shift ;;
        --slice) need_value "$1" "$#"; SLICE=$2; shift 2 ;;
        --slice=*) SLICE=${1#*=}; shift ;;
        --lines) need_value "$1" "$#"; LINES=$2; shift 2 ;;
        --lines=*) LINES=${1#*=}; shift ;;
        --dir) need_value "$1" "$#"; DIR=$2; shift 2 ;;
        --dir=*) DIR=${1#*=}; shift ;;
        -h | --help) usage_and_exit "$USAGE" ;;
        *) die "unknown argument '$1' (see --help)" ;;
    esac
done

check_target
check_remote_dir "$DIR"
[ -n "$WORKER" ] || die "--worker is required (0 for the first worker)"
[[ $WORKER =~ ^[0-9]+$ ]] || die "--worker '$WORKER' must be a worker number (0, 1, ...)"
[[ $LINES =~ ^[0-9]+$ ]] || die "--lines '$LINES' must be a number of lines"
if ! [[ $SLICE =~ ^[0-9]+$ ]] || [ "$SLICE" -ge "$NUM_SLICES" ]; then
    die "--slice '$SLICE' must be a slice number below --num-slices ($NUM_SLICES)"
fi

TAIL="tail -n $LINES"
if [ "$FOLLOW" = 1 ]; then TAIL+=" -F"; fi
# the log's name is computed on the worker as launch.sh did there
ssh_workers "$WORKER_ID_SH; cd $(q "$DIR") && $TAIL \"logs/run.worker\$w.log\"" "$WORKER" "$SLICE"
