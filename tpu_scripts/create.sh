#!/usr/bin/env bash
# Creates a TPU VM (or a queued resource that becomes one) for easylemur.
set -euo pipefail
# shellcheck source=lib.sh source-path=SCRIPTDIR
source "$(dirname "$0")/lib.sh"

USAGE="Usage: $SCRIPT --name NAME --zone ZONE --type TYPE [--version RUNTIME] [--spot | --preemptible]
                 [--reserved] [--queued] [--num-slices N] [--project PROJECT] [--dry-run]

Creates a TPU VM: gcloud compute tpus tpu-vm create, or with --queued a queued resource
(gcloud compute tpus queued-resources create, node id = NAME) that becomes the VM when
capacity frees up (watch it with status.sh --queued).

With --num-slices N (2 or more) a multi-slice queued resource NAME (--node-count=N
--node-prefix=NAME): N slices of TYPE, the TPU VMs NAME-0 .. NAME-(N-1), provisioned together
and joined by the data-center network; give the other scripts the same --num-slices N. The
TPU runtime sets up multi-slice JAX (the MEGASCALE_* settings): the run's config needs a mesh
with a dcn_data axis of N, e.g. --config.mesh=dcn_data:N,fsdp:-1.

  --name NAME        the TPU VM's name
  --zone ZONE        e.g. us-central2-b (v4), us-east5-a (v5p), us-west4-a (v5e), us-east1-d (v6e)
  --type TYPE        accelerator type: v4-N, v5litepod-N, v5p-N or v6e-N (e.g. v4-512)
  --version RUNTIME  TPU software version; default by type: v4 $(runtime_for v4-8),
                     v5litepod $(runtime_for v5litepod-8), v5p $(runtime_for v5p-8), v6e $(runtime_for v6e-8)
  --spot             Spot capacity (cheaper, can be preempted at any time: see docs/guides/tpu-pods.md)
  --preemptible      an alias of --spot, with a warning: Google now documents Spot TPUs, which
                     replace preemptible ones (also in queued resources)
  --reserved         use the project's reservation
  --queued           a queued resource instead of a direct create
  --num-slices N     N slices in one queued resource (implies --queued; default 1)
  --project PROJECT  the Google Cloud project (default: gcloud's configured one)
  --dry-run          print the gcloud commands, run nothing"

TYPE="" VERSION="" SPOT=0 RESERVED=0 QUEUED=0

while [ $# -gt 0 ]; do
    common_flag "$@"
    if [ "$USED" -gt 0 ]; then shift "$USED"; continue; fi
    case "$1" in
        --type) need_value "$1" "$#"; TYPE=$2; shift 2 ;;
        --type=*) TYPE=${1#*=}; shift ;;
        --version) need_value "$1" "$#"; VERSION=$2; shift 2 ;;
        --version=*) VERSION=${1#*=}; shift ;;
        --spot) SPOT=1; shift ;;
        --preemptible)
            echo "$SCRIPT: warning: --preemptible is taken as --spot (Spot TPUs replace preemptible ones)" >&2
            SPOT=1; shift ;;
        --reserved) RESERVED=1; shift ;;
        --queued) QUEUED=1; shift ;;
        -h | --help) usage_and_exit "$USAGE" ;;
        *) die "unknown argument '$1' (see --help)" ;;
    esac
done

check_target
[ ${#SSH_FLAGS[@]} = 0 ] || die "--internal-ip is for the scripts that reach the workers (setup, launch, status, logs, stop)"
[ -n "$TYPE" ] || die "--type is required (v4-N, v5litepod-N, v5p-N or v6e-N, e.g. v4-512)"
check_type "$TYPE"
VERSION=${VERSION:-$(runtime_for "$TYPE")}
[[ $VERSION =~ ^[a-z0-9][-a-z0-9.]*$ ]] || die "--version '$VERSION' is not a TPU software version name"
[ $((SPOT + RESERVED)) -le 1 ] || die "--reserved excludes --spot"

CAPACITY=()
if [ "$SPOT" = 1 ]; then CAPACITY+=(--spot); fi
if [ "$RESERVED" = 1 ]; then CAPACITY+=(--reserved); fi

if [ "$NUM_SLICES" -gt 1 ]; then
    # multi-slice needs a queued resource; gcloud names the slices NAME-0 .. NAME-(N-1)
    run gcloud compute tpus queued-resources create "$NAME" "${WHERE[@]}" --node-count="$NUM_SLICES" \
        --node-prefix="$NAME" --accelerator-type="$TYPE" --runtime-version="$VERSION" ${CAPACITY[@]+"${CAPACITY[@]}"}
    if [ "$DRY_RUN" = 0 ]; then
        echo "$SCRIPT: queued; the slices ${NODES[*]} exist once the state is ACTIVE:" >&2
        echo "  $(dirname "$0")/status.sh --name $NAME --zone $ZONE --num-slices $NUM_SLICES" >&2
    fi
elif [ "$QUEUED" = 1 ]; then
    run gcloud compute tpus queued-resources create "$NAME" "${WHERE[@]}" --node-id="$NAME" \
        --accelerator-type="$TYPE" --runtime-version="$VERSION" ${CAPACITY[@]+"${CAPACITY[@]}"}
    if [ "$DRY_RUN" = 0 ]; then
        echo "$SCRIPT: queued; the VM '$NAME' exists once the state is ACTIVE:" >&2
        echo "  $(dirname "$0")/status.sh --name $NAME --zone $ZONE --queued" >&2
    fi
else
    run gcloud compute tpus tpu-vm create "$NAME" "${WHERE[@]}" \
        --accelerator-type="$TYPE" --version="$VERSION" ${CAPACITY[@]+"${CAPACITY[@]}"}
fi
