#!/usr/bin/env bash
# The state of a TPU VM (and its queued resource) and of the run launch.sh started on each worker.
set -euo pipefail
# shellcheck source=lib.sh source-path=SCRIPTDIR
source "$(dirname "$0")/lib.sh"

USAGE="Usage: $SCRIPT --name NAME --zone ZONE [--queued] [--dir REMOTE_DIR] [--num-slices N]
                 [--internal-ip] [--project PROJECT] [--dry-run]

Prints the queued resource's state (with --queued), the TPU VM's state, health, type and
runtime, and for each worker whether the launched run is alive and its log's last line.

With --queued the queued resource's state decides first, and the VM is described only when
it exists (ACTIVE): WAITING_FOR_RESOURCES (and ACCEPTED, PROVISIONING, CREATING) says to wait;
SUSPENDED (a spot preemption: the VM is gone), FAILED and DELETING get the steps to take. A
preempted VM (state PREEMPTED) gets the recovery steps too. With --num-slices N (--queued
implied) every slice NAME-0 .. NAME-(N-1) is described and every worker of each is asked.

  --name NAME        the TPU VM's name
  --zone ZONE        its zone
  --queued           it was created with create.sh --queued
  --dir REMOTE_DIR   as given to setup.sh and launch.sh (default $REMOTE_DIR_DEFAULT)
$SLICES_HELP
$INTERNAL_IP_HELP
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
if [ "$NUM_SLICES" -gt 1 ]; then QUEUED=1; fi  # a multi-slice TPU is always a queued resource

d=$(dirname "$0")
ON="--name $NAME --zone $ZONE$([ -z "$PROJECT" ] || echo " --project $PROJECT")"
if [ "$NUM_SLICES" -gt 1 ]; then ON+=" --num-slices $NUM_SLICES"; fi

# recreate: the steps after the VM is gone (preempted): its bucket workdir has the checkpoints.
recreate() {
    echo "Recover: delete it, create it again, set it up and launch the same command; the run"
    echo "resumes from the newest checkpoint in its workdir (a bucket: the VM's disks are gone):"
    echo "  $d/stop.sh $ON --delete$([ "$QUEUED" = 1 ] && echo ' --queued')"
    echo "  $d/create.sh $ON --type TYPE$([ "$QUEUED" = 1 ] && echo ' --queued') ...   # as before"
    echo "  $d/setup.sh $ON ...                # as before"
    echo "  $d/launch.sh $ON -- COMMAND...     # the same command"
    echo "(babysit.sh watches a run and does these steps by itself after each interruption.)"
}

if [ "$QUEUED" = 1 ]; then
    if [ "$DRY_RUN" = 1 ]; then
        run gcloud compute tpus queued-resources describe "$NAME" "${WHERE[@]}" --format="value(state.state)"
    else
        QSTATE=$(run gcloud compute tpus queued-resources describe "$NAME" "${WHERE[@]}" \
            --format="value(state.state)") || exit 1
        echo "$NAME (queued resource): $QSTATE"
        case "$QSTATE" in
            ACTIVE) ;;
            WAITING_FOR_RESOURCES | ACCEPTED | PROVISIONING | CREATING)
                echo "No VM yet: the queued resource waits for capacity, then creates the VM (state ACTIVE)."
                echo "Ask again later:  $d/status.sh $ON --queued"
                echo "Give up:          $d/stop.sh $ON --delete --queued"
                exit 0 ;;
            SUSPENDING | SUSPENDED)
                echo "$NAME was preempted (spot capacity reclaimed): the VM is deleted, the queued resource stays $QSTATE."
                recreate
                exit 0 ;;
            FAILED)
                echo "The queued resource failed; why: gcloud compute tpus queued-resources describe $NAME $(qall "${WHERE[@]}") --format='value(state.failedData)'"
                echo "Delete it, then create it again (another zone or type, --reserved, or later):"
                echo "  $d/stop.sh $ON --delete --queued"
                echo "  $d/create.sh $ON --type TYPE --queued ..."
                exit 0 ;;
            DELETING)
                echo "The queued resource is being deleted; create it again once it is gone (status.sh then fails with NOT_FOUND)."
                exit 0 ;;
            *)
                echo "$SCRIPT: unexpected queued resource state '$QSTATE' (expected ACTIVE, WAITING_FOR_RESOURCES, SUSPENDED, FAILED, ...)" >&2
                exit 1 ;;
        esac
    fi
fi
# every slice (one: the VM NAME) is described; the workers are asked only when all are READY
WAIT=""
for node in "${NODES[@]}"; do
    STATE=""
    if [ "$DRY_RUN" = 1 ]; then
        run gcloud compute tpus tpu-vm describe "$node" "${WHERE[@]}" \
            --format="value(state,health,acceleratorType,runtimeVersion)"
    else
        INFO=$(run gcloud compute tpus tpu-vm describe "$node" "${WHERE[@]}" \
            --format="value(state,health,acceleratorType,runtimeVersion)") || exit 1
        echo "$node: $INFO"
        STATE=${INFO%%[[:space:]]*}
    fi
    case "$STATE" in
        PREEMPTED | TERMINATED)
            echo "$node was preempted."
            recreate
            exit 0 ;;
        "" | READY) ;;
        *) WAIT+="${WAIT:+, }$node is $STATE" ;;
    esac
done
if [ -n "$WAIT" ]; then
    echo "$WAIT: the workers cannot be reached yet"
    exit 0
fi

QDIR=$(q "$DIR")
ssh_workers "$WORKER_ID_SH; $RUN_SH
cd $QDIR 2>/dev/null || { echo \"\$at: no ~/$QDIR (run setup.sh)\"; exit 0; }
if run_alive; then s=\"running (pid \$pid, launch \$id)\"; else s='not running'; fi
echo \"\$at: \$s; log: \$(tail -n 1 \"logs/run.worker\$w.log\" 2>/dev/null || echo none)\""
