#!/usr/bin/env bash
# Keeps one run going on a TPU VM (or a multi-slice queued resource) until it finishes: after a
# preemption, a maintenance event or a crashed worker it recreates what is gone, sets it up and
# launches the same command again (the run resumes from its newest checkpoint).
set -euo pipefail
# shellcheck source=lib.sh source-path=SCRIPTDIR
source "$(dirname "$0")/lib.sh"

D=$(dirname "$0")

USAGE="Usage: $SCRIPT --name NAME --zone ZONE --type TYPE [--version RUNTIME] [--spot | --reserved]
                  [--queued] [--num-slices N] [--ref GIT_REF [--repo URL] | --local DIR] [--skip-setup]
                  [--dir REMOTE_DIR] [--env KEY=VALUE ...] [--workdir DIR] [--max-restarts N]
                  [--backoff SECONDS] [--max-backoff SECONDS] [--poll SECONDS] [--stop-timeout SECONDS]
                  [--internal-ip] [--project PROJECT] [--dry-run] -- COMMAND [ARG ...]

Runs COMMAND on every worker (as launch.sh does) and watches it until it finishes, every
--poll seconds: the TPU's state (the queued resource's with --queued or --num-slices, else the
VM's), then, through one ssh per slice, each worker's run. Interruptions, and what it does:

  the queued resource SUSPENDED, SUSPENDING, FAILED, DELETING (or any state but ACTIVE and the
  waiting ones), or gone; the VM PREEMPTED, TERMINATED, STOPPED (any state but READY and the
  transitional ones), or gone
      delete it (stop.sh --delete), create it again (create.sh), set it up (setup.sh), launch
  a worker without ~/REMOTE_DIR (its VM was replaced underneath)
      stop what still runs, set up, launch
  a worker's run ended with a non-zero status, without one (killed, or its VM restarted), or
      after saving on a preemption notice ('stopped: saved step' in its log)
      stop what still runs on the other workers (stop.sh), launch
  a worker's run exited 75 (train lost a process of the pod: another host died, hung or was
      unreachable) or 76 (train's step watchdog: no step within its limit, a hang)
      the same, at once: no second poll to wait for the TPU's state to change; stop.sh first
      on every worker (a stalled or hung process may still be there: SIGKILL after at most
      30 s, as nothing is left to save), then launch

Each launch gets a new id; launch.sh refuses while any run is alive, so there is never a second
run. Only one babysit.sh watches a NAME (a lock in \${TMPDIR:-/tmp}). At the start it adopts a
run already alive on every worker, else it creates the TPU if there is none, sets it up (not
with --skip-setup) and launches.

It exits 0 once every worker's run exited with status 0 (launch.sh records it in
~/REMOTE_DIR/logs/run.exit) and none stopped on a preemption notice; 1 when an interruption
comes after --max-restarts of them (a line says so); 3 when the run was stopped with stop.sh
(not relaunched); 2 for bad arguments. Before each recovery it waits --backoff seconds, doubled
for every interruption in a row without a new step seen in between (at most --max-backoff).

Its own lines (UTC time first; one per interruption: why, the launch that replaces it, the
checkpoint step it resumes from, the last step seen and the steps lost) go to stdout; the
output of gcloud and of the scripts it runs goes to stderr. The resume step is the newest
checkpoints/<step> in --workdir (default: the command's --config.workdir=...; a gs:// bucket
through gcloud storage ls, else a directory on this machine); the last step seen is the
newest 'step N' or progress 'N/M [' in a worker's log at the last poll, so the steps lost are
a lower bound.

  --name NAME          the TPU VM's name (with --num-slices: the queued resource's)
  --zone ZONE          its zone
  --type TYPE ... --spot | --reserved, --queued
                       as for create.sh: how to create it again
$SLICES_HELP
  --ref, --repo, --local
                       as for setup.sh: what to install after each create
  --skip-setup         do not run setup.sh before the first launch on a TPU that exists
  --dir REMOTE_DIR     as for setup.sh and launch.sh (default $REMOTE_DIR_DEFAULT)
  --env KEY=VALUE      as for launch.sh (repeatable)
  --workdir DIR        the run's workdir, for the resume step (default: from COMMAND)
  --max-restarts N     interruptions to recover from (default 10); each recovery attempt counts
  --backoff SECONDS    wait before a recovery (default 60)
  --max-backoff SECONDS
                       the longest wait (default 1800)
  --poll SECONDS       between checks (default 60; may be fractional)
  --stop-timeout SECONDS
                       how long stop.sh lets a run save before SIGKILL (default 900)
$INTERNAL_IP_HELP
  --project PROJECT    the Google Cloud project (default: gcloud's configured one)
  --dry-run            print the gcloud commands of one recovery (delete, create, set up,
                       launch), run nothing

Example:
  $SCRIPT --name lemur --zone us-central2-b --type v4-512 --spot --queued -- \\
      python -m easylemur.train --config configs/lemur_70b_pretrain.py --config.workdir=gs://BUCKET/lemur70b"

TYPE="" VERSION="" SPOT=0 RESERVED=0 QUEUED=0 REF="" REPO="" LOCAL="" SKIP_SETUP=0
DIR=$REMOTE_DIR_DEFAULT WORKDIR="" MAX_RESTARTS=10 BACKOFF=60 MAX_BACKOFF=1800 POLL=60 STOP_TIMEOUT=900
ENVS=()

while [ $# -gt 0 ]; do
    common_flag "$@"
    if [ "$USED" -gt 0 ]; then shift "$USED"; continue; fi
    case "$1" in
        --type) need_value "$1" "$#"; TYPE=$2; shift 2 ;;
        --type=*) TYPE=${1#*=}; shift ;;
        --version) need_value "$1" "$#"; VERSION=$2; shift 2 ;;
        --version=*) VERSION=${1#*=}; shift ;;
        --spot | --preemptible) SPOT=1; shift ;;
        --reserved) RESERVED=1; shift ;;
        --queued) QUEUED=1; shift ;;
        --ref) need_value "$1" "$#"; REF=$2; shift 2 ;;
        --ref=*) REF=${1#*=}; shift ;;
        --repo) need_value "$1" "$#"; REPO=$2; shift 2 ;;
        --repo=*) REPO=${1#*=}; shift ;;
        --local) need_value "$1" "$#"; LOCAL=$2; shift 2 ;;
        --local=*) LOCAL=${1#*=}; shift ;;
        --skip-setup) SKIP_SETUP=1; shift ;;
        --dir) need_value "$1" "$#"; DIR=$2; shift 2 ;;
        --dir=*) DIR=${1#*=}; shift ;;
        --env) need_value "$1" "$#"; ENVS+=("$2"); shift 2 ;;
        --env=*) ENVS+=("${1#*=}"); shift ;;
        --workdir) need_value "$1" "$#"; WORKDIR=$2; shift 2 ;;
        --workdir=*) WORKDIR=${1#*=}; shift ;;
        --max-restarts) need_value "$1" "$#"; MAX_RESTARTS=$2; shift 2 ;;
        --max-restarts=*) MAX_RESTARTS=${1#*=}; shift ;;
        --backoff) need_value "$1" "$#"; BACKOFF=$2; shift 2 ;;
        --backoff=*) BACKOFF=${1#*=}; shift ;;
        --max-backoff) need_value "$1" "$#"; MAX_BACKOFF=$2; shift 2 ;;
        --max-backoff=*) MAX_BACKOFF=${1#*=}; shift ;;
        --poll) need_value "$1" "$#"; POLL=$2; shift 2 ;;
        --poll=*) POLL=${1#*=}; shift ;;
        --stop-timeout) need_value "$1" "$#"; STOP_TIMEOUT=$2; shift 2 ;;
        --stop-timeout=*) STOP_TIMEOUT=${1#*=}; shift ;;
        -h | --help) usage_and_exit "$USAGE" ;;
        --) shift; break ;;
        *) die "unknown argument '$1' (the command to run goes after --; see --help)" ;;
    esac
done

check_target
check_remote_dir "$DIR"
[ -n "$TYPE" ] || die "--type is required (to create the TPU again after a preemption: v4-N, v5litepod-N, v5p-N or v6e-N)"
check_type "$TYPE"
[ $((SPOT + RESERVED)) -le 1 ] || die "--reserved excludes --spot"
[ -z "$REF" ] || [ -z "$LOCAL" ] || die "--ref and --local exclude each other"
[ -n "$REF" ] || [ -z "$REPO" ] || die "--repo needs --ref GIT_REF"
[[ $MAX_RESTARTS =~ ^[0-9]+$ ]] || die "--max-restarts '$MAX_RESTARTS' must be a number"
for v in "--backoff:$BACKOFF" "--max-backoff:$MAX_BACKOFF" "--stop-timeout:$STOP_TIMEOUT"; do
    [[ ${v#*:} =~ ^[0-9]+$ ]] || die "${v%%:*} '${v#*:}' must be a number of seconds"
done
[[ $POLL =~ ^[0-9]+(\.[0-9]+)?$ && ! $POLL =~ ^0+(\.0+)?$ ]] || die "--poll '$POLL' must be a positive number of seconds"
[ $# -gt 0 ] || die "no command to run: give it after -- (e.g. -- python -m easylemur.train --config CFG)"
for kv in ${ENVS[@]+"${ENVS[@]}"}; do
    [[ $kv =~ ^[A-Za-z_][A-Za-z0-9_]*= ]] || die "--env '$kv' must look like KEY=VALUE (KEY: letters, digits, _)"
done
if [ "$NUM_SLICES" -gt 1 ]; then QUEUED=1; fi  # a multi-slice TPU is always a queued resource
COMMAND=("$@")

# the workdir, for the step a relaunch resumes from: --workdir, else the command's
if [ -z "$WORKDIR" ]; then
    prev=""
    for w in "${COMMAND[@]}"; do
        case "$w" in --config.workdir=*) WORKDIR=${w#*=} ;; esac
        if [ "$prev" = --config.workdir ]; then WORKDIR=$w; fi
        prev=$w
    done
fi

# the other scripts' arguments
TARGET=(--name "$NAME" --zone "$ZONE")
if [ -n "$PROJECT" ]; then TARGET+=(--project "$PROJECT"); fi
if [ "$NUM_SLICES" -gt 1 ]; then TARGET+=(--num-slices "$NUM_SLICES"); fi
REACH=("${TARGET[@]}" --dir "$DIR" ${SSH_FLAGS[@]+"${SSH_FLAGS[@]}"})
CREATE_ARGS=("${TARGET[@]}" --type "$TYPE")
if [ -n "$VERSION" ]; then CREATE_ARGS+=(--version "$VERSION"); fi
if [ "$SPOT" = 1 ]; then CREATE_ARGS+=(--spot); fi
if [ "$RESERVED" = 1 ]; then CREATE_ARGS+=(--reserved); fi
DELETE_ARGS=("${REACH[@]}" --delete --timeout "$STOP_TIMEOUT")
if [ "$QUEUED" = 1 ]; then CREATE_ARGS+=(--queued); DELETE_ARGS+=(--queued); fi
SETUP_ARGS=("${REACH[@]}")
if [ -n "$REF" ]; then SETUP_ARGS+=(--ref "$REF"); fi
if [ -n "$REPO" ]; then SETUP_ARGS+=(--repo "$REPO"); fi
if [ -n "$LOCAL" ]; then SETUP_ARGS+=(--local "$LOCAL"); fi
LAUNCH_ARGS=("${REACH[@]}")
for kv in ${ENVS[@]+"${ENVS[@]}"}; do LAUNCH_ARGS+=(--env "$kv"); done

BASE=babysit-$(date -u +%Y%m%dT%H%M%SZ)-$RANDOM
LAUNCHES=0

if [ "$DRY_RUN" = 1 ]; then
    echo "# a recovery after the TPU was lost: delete, create, set up, launch (launch ids $BASE-N)"
    bash "$D/stop.sh" "${DELETE_ARGS[@]}" --dry-run
    bash "$D/create.sh" "${CREATE_ARGS[@]}" --dry-run
    bash "$D/setup.sh" "${SETUP_ARGS[@]}" --dry-run
    bash "$D/launch.sh" "${LAUNCH_ARGS[@]}" --launch-id "$BASE-1" --dry-run -- "${COMMAND[@]}"
    exit 0
fi

# one babysitter per TPU: a lock directory holding the babysitter's pid
LOCK=${TMPDIR:-/tmp}/easylemur-babysit.${PROJECT:-default}.$ZONE.$NAME
if ! mkdir "$LOCK" 2>/dev/null; then
    other=$(cat "$LOCK/pid" 2>/dev/null || true)
    if [ -n "$other" ] && kill -0 "$other" 2>/dev/null; then
        die "another babysit.sh (pid $other) watches $NAME already (lock $LOCK)"
    fi
    rm -rf "$LOCK"
    mkdir "$LOCK" || die "cannot take the lock $LOCK"
fi
echo $$ > "$LOCK/pid"
trap 'rm -rf "$LOCK"' EXIT

if [ "$QUEUED" = 1 ]; then WHAT="queued resource $NAME"; else WHAT="TPU VM $NAME"; fi

# say WORDS...: one line of the babysitter's own log, UTC time first.
say() {
    printf '%s %s\n' "$(date -u +%Y-%m-%dT%H:%M:%SZ)" "$*"
}

# sub SCRIPT ARGS...: a sibling script, its output on stderr.
sub() {
    local script=$1
    shift
    bash "$D/$script" "$@" >&2
}

# cloud_state: CS (ok, waiting, gone, broken or unknown) and CSTATE (the state gcloud gave).
cloud_state() {
    local out err rc=0 RUN_QUIET=1
    err=$(mktemp "${TMPDIR:-/tmp}/easylemur-babysit.XXXXXX")
    if [ "$QUEUED" = 1 ]; then
        out=$(run gcloud compute tpus queued-resources describe "$NAME" "${WHERE[@]}" --format="value(state.state)" \
            2> "$err") || rc=$?
    else
        out=$(run gcloud compute tpus tpu-vm describe "$NAME" "${WHERE[@]}" --format="value(state)" 2> "$err") || rc=$?
    fi
    cat "$err" >&2
    if [ "$rc" != 0 ]; then
        if grep -q NOT_FOUND "$err"; then CS=gone CSTATE=NOT_FOUND; else CS=unknown CSTATE="gcloud failed ($rc)"; fi
        rm -f "$err"
        return 0
    fi
    rm -f "$err"
    CSTATE=$(printf '%s' "$out" | awk 'NF { print $1; exit }')
    if [ "$QUEUED" = 1 ]; then
        case "$CSTATE" in
            ACTIVE) CS=ok ;;
            WAITING_FOR_RESOURCES | ACCEPTED | PROVISIONING | CREATING) CS=waiting ;;
            "") CS=unknown CSTATE="no state" ;;
            *) CS=broken ;;  # SUSPENDING, SUSPENDED, FAILED, DELETING, ...
        esac
    else
        case "$CSTATE" in
            READY) CS=ok ;;
            CREATING | STARTING | RESTARTING | REPAIRING | PROVISIONING) CS=waiting ;;
            "") CS=unknown CSTATE="no state" ;;
            *) CS=broken ;;  # PREEMPTED, TERMINATED, STOPPING, STOPPED, DELETING, ...
        esac
    fi
}

# The probe, on every worker: one line "@babysit AT|STATE|LAUNCH_ID|EXIT_STATUS|STEP|STOPPED_LINE".
# STATE: nodir (no ~/DIR or venv: a new VM), none (never launched), running, ended, or stopped
# (ended after stop.sh); EXIT_STATUS from logs/run.exit when it names that launch, else -;
# STEP and STOPPED_LINE (1: "stopped: saved step" printed) from the log's last 64 KiB since
# the newest launch header.
# shellcheck disable=SC2016  # expanded by awk
STEP_AWK='index($0, "=== ") == 1 { s = ""; st = 0; next }
{ l = $0
  while (match(l, /step [0-9]+/)) { s = substr(l, RSTART + 5, RLENGTH - 5); l = substr(l, RSTART + RLENGTH) }
  l = $0
  while (match(l, /[0-9]+\/[0-9]+ \[/)) { t = substr(l, RSTART, RLENGTH); sub(/\/.*/, "", t); s = t; l = substr(l, RSTART + RLENGTH) }
  if (index($0, "stopped: saved step ")) st = 1 }
END { print (s == "" ? "-" : s) "|" (st + 0) }'
QDIR=$(q "$DIR")
PROBE="$WORKER_ID_SH; $RUN_SH
cd $QDIR 2>/dev/null && [ -x \"\$HOME\"/$(q "$DIR-venv")/bin/python ] || { echo \"@babysit \$at|nodir|-|-|-|0\"; exit 0; }
last=\$(tail -c 65536 \"logs/run.worker\$w.log\" 2>/dev/null | tr '\\r' '\\n' | awk $(q "$STEP_AWK"))
if run_alive; then echo \"@babysit \$at|running|\$id|-|\$last\"; exit 0; fi
[ -n \"\$id\" ] || { echo \"@babysit \$at|none|-|-|\$last\"; exit 0; }
rc=- eid=; if [ -f logs/run.exit ]; then read -r rc eid < logs/run.exit; fi; [ \"\$eid\" = \"\$id\" ] || rc=-
sid=; if [ -f logs/run.stopped ]; then read -r sid < logs/run.stopped; fi
if [ \"\$sid\" = \"\$id\" ]; then st=stopped; else st=ended; fi
echo \"@babysit \$at|\$st|\$id|\$rc|\$last\""

EXPECT=""  # the launch being watched

# probe: asks every worker; false when a slice could not be reached. Sets N_WORKERS, N_RUN
# (EXPECT alive), N_OK (EXPECT exited 0), N_OTHER (another launch alive, OTHER its id),
# N_NODIR, STOPPED (EXPECT stopped with stop.sh), BAD (why the run is broken, or empty) and
# P_STEP (the newest step seen, or -).
probe() {
    local out at st id rc step stopl RUN_QUIET=1
    out=$(ssh_workers "$PROBE") || return 1
    N_WORKERS=0 N_RUN=0 N_OK=0 N_OTHER=0 N_NODIR=0 STOPPED=0 BAD="" OTHER="" P_STEP=- POD_FAULT=""
    while IFS='|' read -r at st id rc step stopl; do
        case "$at" in "@babysit "*) at=${at#@babysit } ;; *) continue ;; esac
        N_WORKERS=$((N_WORKERS + 1))
        if [[ $step =~ ^[0-9]+$ ]] && { [ "$P_STEP" = - ] || [ "$step" -gt "$P_STEP" ]; }; then P_STEP=$step; fi
        case "$st" in
            nodir)
                N_NODIR=$((N_NODIR + 1))
                BAD=${BAD:-"$at has no ~/$DIR (a new VM)"} ;;
            running)
                if [ "$id" = "$EXPECT" ]; then
                    N_RUN=$((N_RUN + 1))
                else
                    N_OTHER=$((N_OTHER + 1))
                    OTHER=$id
                fi ;;
            stopped)
                if [ "$id" = "$EXPECT" ]; then STOPPED=1; fi ;;
            ended)
                if [ -z "$EXPECT" ]; then :
                elif [ "$id" != "$EXPECT" ]; then BAD=${BAD:-"$at runs no launch $EXPECT (its VM restarted?)"}
                elif [ "$rc" = - ]; then BAD=${BAD:-"$at: the run ended without an exit status (killed, or its VM restarted)"}
                elif [ "$rc" = 75 ] || [ "$rc" = 76 ]; then
                    # train's own verdicts (docs/design.md, "Lost hosts and hangs"): relaunch at once
                    POD_FAULT=${POD_FAULT:-"$at: the run exited with status $rc ($([ "$rc" = 75 ] \
                        && echo "a process of the pod was lost" || echo "a hang: no step within the watchdog's limit"))"}
                elif [ "$rc" != 0 ]; then BAD=${BAD:-"$at: the run exited with status $rc"}
                elif [ "$stopl" = 1 ]; then BAD=${BAD:-"$at: the run saved and stopped (a preemption notice?)"}
                else N_OK=$((N_OK + 1))
                fi ;;
            none)
                if [ -n "$EXPECT" ]; then BAD=${BAD:-"$at has no run (its VM restarted?)"}; fi ;;
        esac
    done <<< "$out"
    [ "$N_WORKERS" -gt 0 ]
}

# checkpoint_step: the newest step in WORKDIR/checkpoints (0: none yet; ?: unknown).
checkpoint_step() {
    local list err rc=0 step
    if [ -z "$WORKDIR" ]; then echo "?"; return; fi
    if [[ $WORKDIR == gs://* ]]; then
        err=$(mktemp "${TMPDIR:-/tmp}/easylemur-babysit.XXXXXX")
        list=$(run gcloud storage ls "${WORKDIR%/}/checkpoints/" 2> "$err") || rc=$?
        cat "$err" >&2
        if [ "$rc" != 0 ] && ! grep -qi "matched no objects\|not found" "$err"; then rm -f "$err"; echo "?"; return; fi
        rm -f "$err"
        step=$(printf '%s\n' "$list" | sed -n 's|.*/\([0-9][0-9]*\)/$|\1|p' | sort -n | tail -n 1)
    else
        step=$({ find "${WORKDIR%/}/checkpoints" -mindepth 1 -maxdepth 1 -type d 2>/dev/null || true; } \
            | sed -n 's|.*/\([0-9][0-9]*\)$|\1|p' | sort -n | tail -n 1)
    fi
    echo "${step:-0}"
}

# wait_for STATES: polls until the TPU's state is one of STATES (ok, gone); false (FAIL set)
# when it is broken, or still not there after 30 min of deletion or 10 polls of NOT_FOUND.
wait_for() {
    local want=$1 start=$SECONDS seen="" gone=0
    while true; do
        cloud_state
        if [ "$CS" = "$want" ]; then return 0; fi
        if [ "$CSTATE" != "$seen" ]; then say "$WHAT is $CSTATE (waiting for it to be ${want/ok/ready})"; seen=$CSTATE; fi
        case "$want:$CS" in
            ok:broken) FAIL="create ($WHAT is $CSTATE)"; return 1 ;;
            ok:gone) gone=$((gone + 1)); if [ "$gone" -ge 10 ]; then FAIL="create ($WHAT not found)"; return 1; fi ;;
            gone:*) if [ $((SECONDS - start)) -ge 1800 ]; then FAIL="delete ($WHAT still $CSTATE)"; return 1; fi ;;
        esac
        sleep "$POLL"
    done
}

# relaunch KIND SETUP: brings the TPU and the run back. KIND recreate: delete and create; create;
# stop: stop what still runs; none. SETUP 1: run setup.sh (always after a create). Sets EXPECT
# to the new launch and RESUME to the step it resumes from; false with FAIL set.
relaunch() {
    local kind=$1 setup=$2 tries
    if [ "$kind" = recreate ]; then
        sub stop.sh "${DELETE_ARGS[@]}" || true  # a TPU already gone fails the delete: fine
        wait_for gone || return 1
        kind=create
    fi
    if [ "$kind" = create ]; then
        sub create.sh "${CREATE_ARGS[@]}" || { FAIL=create; return 1; }
        wait_for ok || return 1
        setup=1
    fi
    if [ "$kind" = stop ]; then
        # a worker stop.sh cannot reach, or a run it had to SIGKILL, fails it; launch.sh's check
        # then refuses while anything is still alive
        sub stop.sh "${REACH[@]}" --timeout "$STOP_TIMEOUT" || true
    fi
    if [ "$kind" = halt ]; then
        # after a lost host or a hang nothing is left to save: what still runs (a stopped or
        # hung process) gets SIGKILL after 30 s at most
        sub stop.sh "${REACH[@]}" --timeout "$((STOP_TIMEOUT < 30 ? STOP_TIMEOUT : 30))" || true
    fi
    if [ "$setup" = 1 ]; then
        tries=0
        until sub setup.sh "${SETUP_ARGS[@]}"; do  # a new VM may take a while to accept ssh
            tries=$((tries + 1))
            if [ "$tries" -ge 3 ]; then FAIL=setup; return 1; fi
            sleep "$POLL"
        done
    fi
    RESUME=$(checkpoint_step)
    LAUNCHES=$((LAUNCHES + 1))
    sub launch.sh "${LAUNCH_ARGS[@]}" --launch-id "$BASE-$LAUNCHES" -- "${COMMAND[@]}" || { FAIL=launch; return 1; }
    EXPECT=$BASE-$LAUNCHES
}

RESTARTS=0 STREAK=0 LAST_STEP=- RESUME=-

# interrupt WHY KIND SETUP: an interruption: within --max-restarts, waits the backoff, recovers
# (relaunch KIND SETUP) and logs one line; past it, logs why it gives up and exits 1.
interrupt() {
    local why=$1 delay lost i
    RESTARTS=$((RESTARTS + 1))
    if [ "$RESTARTS" -gt "$MAX_RESTARTS" ]; then
        say "interruption $RESTARTS: $why; retries exhausted (--max-restarts $MAX_RESTARTS): giving up (last step seen $LAST_STEP)"
        exit 1
    fi
    STREAK=$((STREAK + 1))
    delay=$BACKOFF
    for ((i = 1; i < STREAK && delay < MAX_BACKOFF; i++)); do delay=$((delay * 2)); done
    if [ "$delay" -gt "$MAX_BACKOFF" ]; then delay=$MAX_BACKOFF; fi
    if [ "$delay" -gt 0 ]; then
        echo "$SCRIPT: interruption $RESTARTS ($why): recovering in $delay s" >&2
        sleep "$delay"
    fi
    if relaunch "$2" "$3"; then
        lost="?"
        if [[ $LAST_STEP =~ ^[0-9]+$ && $RESUME =~ ^[0-9]+$ ]]; then
            lost=$((LAST_STEP > RESUME ? LAST_STEP - RESUME : 0))
        fi
        say "interruption $RESTARTS/$MAX_RESTARTS: $why; relaunched as launch $EXPECT, resuming from step $RESUME (last step seen $LAST_STEP, $lost steps lost)"
        LAST_STEP=$RESUME
    else
        say "interruption $RESTARTS/$MAX_RESTARTS: $why; the recovery failed at $FAIL (see stderr); trying again"
    fi
}

# first_failed: the first launch failed (FAIL says where); it counts as a restart.
first_failed() {
    RESTARTS=$((RESTARTS + 1))
    if [ "$RESTARTS" -gt "$MAX_RESTARTS" ]; then
        say "the first launch failed at $FAIL; retries exhausted (--max-restarts $MAX_RESTARTS): giving up"
        exit 1
    fi
    say "the first launch failed at $FAIL (see stderr); trying again"
    sleep "$POLL"
}

say "watching $WHAT (${NUM_SLICES} slice(s)): polls every ${POLL}s, at most $MAX_RESTARTS restarts"

# the start: adopt a run alive on every worker; else create, set up, launch as needed
while [ -z "$EXPECT" ]; do
    cloud_state
    case "$CS" in
        ok)
            if ! probe; then sleep "$POLL"; continue; fi
            if [ "$N_OTHER" = "$N_WORKERS" ]; then
                EXPECT=$OTHER
                say "launch $EXPECT is running on every worker already: watching it"
                break
            fi
            kind=none
            if [ "$N_OTHER" -gt 0 ]; then kind=stop; fi  # a run left on some workers only
            setup=1
            if [ "$SKIP_SETUP" = 1 ] && [ "$N_NODIR" = 0 ]; then setup=0; fi
            if relaunch "$kind" "$setup"; then
                say "launched $EXPECT (resumes from step $RESUME)"
            else
                first_failed
            fi ;;
        gone | broken)
            kind=create
            if [ "$CS" = broken ]; then kind=recreate; fi
            say "$WHAT is $CSTATE: $([ "$kind" = create ] && echo creating || echo "deleting and creating") it"
            if relaunch "$kind" 1; then
                say "launched $EXPECT (resumes from step $RESUME)"
            else
                first_failed
            fi ;;
        *) sleep "$POLL" ;;
    esac
done
LAST_STEP=$RESUME

# the watch. A broken run must be seen on two polls in a row: a preemption kills the runs
# before the TPU's state says so, and the second poll asks for that state first.
WAITING="" UNREACHED=0 SUSPECT=""
while true; do
    sleep "$POLL"
    cloud_state
    case "$CS" in
        ok) WAITING="" ;;
        waiting)
            if [ "$WAITING" != "$CSTATE" ]; then say "$WHAT is $CSTATE: waiting"; WAITING=$CSTATE; fi
            continue ;;
        gone | broken)
            SUSPECT=""
            interrupt "$WHAT is $CSTATE" recreate 1
            continue ;;
        *) continue ;;  # gcloud did not answer: ask again
    esac
    if ! probe; then
        UNREACHED=$((UNREACHED + 1))
        if [ "$UNREACHED" = 1 ]; then say "cannot reach every worker (ssh failed; see stderr): asking again"; fi
        continue
    fi
    UNREACHED=0
    if [[ $P_STEP =~ ^[0-9]+$ ]] && { [ "$LAST_STEP" = - ] || [ "$P_STEP" -gt "$LAST_STEP" ]; }; then
        LAST_STEP=$P_STEP
        STREAK=0  # progress since the last interruption: the backoff starts over
    fi
    if [ "$STOPPED" = 1 ] && [ "$N_RUN" = 0 ]; then
        say "launch $EXPECT was stopped with stop.sh: not relaunching (last step seen $LAST_STEP)"
        exit 3
    fi
    if [ "$N_OK" = "$N_WORKERS" ]; then
        say "launch $EXPECT finished: every worker's run exited with status 0 (last step seen $LAST_STEP, $RESTARTS restarts)"
        exit 0
    fi
    if [ "$N_OTHER" = "$N_WORKERS" ]; then
        EXPECT=$OTHER
        say "launch $EXPECT (not started here) is running on every worker: watching it"
        continue
    fi
    if [ -n "$POD_FAULT" ]; then
        # a lost host or a hang, said by train itself: the TPU's state is not waited for, and
        # whatever still runs (a stalled or hung process) is stopped on every worker first
        SUSPECT=""
        setup=0
        if [ "$N_NODIR" -gt 0 ]; then setup=1; fi
        interrupt "$POD_FAULT" halt "$setup"
        continue
    fi
    if [ -n "$BAD" ] || [ "$N_OTHER" -gt 0 ]; then
        if [ -z "$SUSPECT" ]; then
            SUSPECT=${BAD:-another launch}
            echo "$SCRIPT: $SUSPECT; looking again at the next poll" >&2
            continue
        fi
        SUSPECT=""
        kind=none
        if [ "$N_RUN" -gt 0 ] || [ "$N_OTHER" -gt 0 ]; then kind=stop; fi
        setup=0
        if [ "$N_NODIR" -gt 0 ]; then setup=1; fi
        interrupt "${BAD:-another launch $OTHER runs on some workers}" "$kind" "$setup"
    else
        SUSPECT=""
    fi
done
