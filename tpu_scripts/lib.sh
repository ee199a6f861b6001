#!/usr/bin/env bash
# Shared by the tpu_scripts: argument checks, quoting, and running (or, with --dry-run,
# printing) gcloud commands. Sourced, never run.
# shellcheck disable=SC2034  # the variables set here are read by the scripts that source it

# Where setup.sh installs easylemur on every worker and launch.sh runs from; logs and the pid
# file of the launched run go to $REMOTE_DIR/logs. Relative to the worker's home directory.
REMOTE_DIR_DEFAULT=easylemur

# The oldest Python the pinned JAX supports (jax, jaxlib and libtpu 0.10 declare
# Requires-Python >=3.11; setup.py's python_requires says the same): setup.sh's venv has it.
PY_MIN=3.11
PY_MIN_TUPLE=3,11

DRY_RUN=0
RUN_QUIET=0  # 1: run does not print the commands it runs (babysit.sh's polls)
SSH_FLAGS=()  # --internal-ip: gcloud's ssh and scp reach the workers by their internal address
PROJECT=""
NAME=""
ZONE=""
NUM_SLICES=1  # --num-slices N: a multi-slice queued resource NAME, its slices the TPU VMs NAME-0 .. NAME-(N-1)
NODES=()      # the TPU VMs the scripts reach: NAME, or NAME-0 .. NAME-(N-1) (set by check_target)
SCRIPT=$(basename "$0")

die() {
    echo "$SCRIPT: error: $*" >&2
    exit 2
}

# q WORD: WORD single-quoted for a POSIX shell, byte for byte (a ' becomes '\''). Used for the
# commands printed by --dry-run and for every word of a command run on the workers, whose
# login shell parses it once more.
q() {
    local s=$1 out="'"
    if [[ $s =~ ^[A-Za-z0-9_./:=@%+,-]+$ ]]; then
        printf '%s' "$s"
        return
    fi
    while [[ $s == *\'* ]]; do
        out+="${s%%\'*}'\\''"
        s=${s#*\'}
    done
    printf "%s%s'" "$out" "$s"
}

# qall WORD...: the words quoted with q, space-separated.
qall() {
    local out="" w
    for w in "$@"; do
        out+="${out:+ }$(q "$w")"
    done
    printf '%s' "$out"
}

# run CMD...: prints the command (quoted, one line per command) and, unless --dry-run, runs it.
run() {
    if [ "$DRY_RUN" = 1 ]; then
        printf '%s\n' "$(qall "$@")"
    else
        if [ "$RUN_QUIET" = 0 ]; then printf '+ %s\n' "$(qall "$@")" >&2; fi
        "$@"
    fi
}

# need_value FLAG ARGC: a flag that takes a value must have one.
need_value() {
    [ "$2" -ge 2 ] || die "$1 needs a value"
}

check_name() {
    [ -n "$NAME" ] || die "--name is required (the TPU VM's name)"
    [[ $NAME =~ ^[a-z]([-a-z0-9]{0,61}[a-z0-9])?$ ]] \
        || die "--name '$NAME' is not a valid TPU name (lower-case letters, digits and '-', starting with a letter)"
}

check_zone() {
    [ -n "$ZONE" ] || die "--zone is required (e.g. us-central2-b)"
    [[ $ZONE =~ ^[a-z]+-[a-z]+[0-9]+-[a-z]$ ]] || die "--zone '$ZONE' is not a zone name like us-central2-b"
}

check_project() {
    [ -z "$PROJECT" ] || [[ $PROJECT =~ ^[a-z][-a-z0-9]{4,28}[a-z0-9]$ ]] \
        || die "--project '$PROJECT' is not a Google Cloud project id"
}

check_slices() {
    [[ $NUM_SLICES =~ ^[1-9][0-9]{0,2}$ ]] || die "--num-slices '$NUM_SLICES' must be a number of slices (1, 2, ...)"
    [ $((${#NAME} + 1 + ${#NUM_SLICES})) -le 63 ] || die "--name '$NAME' is too long for $NUM_SLICES slices ($NAME-$((NUM_SLICES - 1)) must fit in 63 characters)"
}

# The flags every script takes: --name, --zone, (optional) --project and --num-slices, checked;
# then WHERE and NODES. One slice: the TPU VM NAME. N slices: the queued resource NAME, whose
# slices gcloud names NAME-0 .. NAME-(N-1) (create.sh passes --node-prefix=NAME).
check_target() {
    check_name
    check_zone
    check_project
    check_slices
    where_flags
    NODES=()
    if [ "$NUM_SLICES" = 1 ]; then
        NODES=("$NAME")
    else
        local i
        for ((i = 0; i < NUM_SLICES; i++)); do NODES+=("$NAME-$i"); done
    fi
}

# gcloud's flags shared by every command: the zone and, when given, the project.
where_flags() {
    WHERE=(--zone="$ZONE")
    if [ -n "$PROJECT" ]; then WHERE+=(--project="$PROJECT"); fi
}

# ssh_workers COMMAND [WORKER [SLICE]]: COMMAND run by the login shell of every worker (or
# one) of every slice (or slice SLICE, an index into NODES). gcloud runs COMMAND again when ssh
# exits 255 (it takes that for a dropped connection), so every remote command here is safe to
# run twice. With several slices the command starts with slice_name=NODE (the workers' messages
# name their slice), the slices are reached at once, each one's output is printed after all
# have answered, in slice order (one slice alone: as it comes, for logs.sh --follow), and the
# status is the first slice's failure (every slice is reached even when one fails).
ssh_workers() {
    local command=$1 worker=${2:-all} only=${3:-}
    if [ "$NUM_SLICES" = 1 ]; then
        run gcloud compute tpus tpu-vm ssh "$NAME" "${WHERE[@]}" --worker="$worker" ${SSH_FLAGS[@]+"${SSH_FLAGS[@]}"} \
            --command="$command"
        return
    fi
    local i node tmp rc=0 r pids=()
    local -a picked=()
    for ((i = 0; i < NUM_SLICES; i++)); do
        if [ -z "$only" ] || [ "$only" = "$i" ]; then picked+=("$i"); fi
    done
    if [ "$DRY_RUN" = 1 ] || [ ${#picked[@]} = 1 ]; then  # printed only, or one slice: its output as it comes
        for i in "${picked[@]}"; do
            node=${NODES[$i]}
            run gcloud compute tpus tpu-vm ssh "$node" "${WHERE[@]}" --worker="$worker" \
                ${SSH_FLAGS[@]+"${SSH_FLAGS[@]}"} --command="slice_name=$node; $command" || return
        done
        return 0
    fi
    tmp=$(mktemp -d "${TMPDIR:-/tmp}/easylemur-ssh.XXXXXX")
    for i in "${picked[@]}"; do
        node=${NODES[$i]}
        run gcloud compute tpus tpu-vm ssh "$node" "${WHERE[@]}" --worker="$worker" ${SSH_FLAGS[@]+"${SSH_FLAGS[@]}"} \
            --command="slice_name=$node; $command" > "$tmp/$i.out" 2> "$tmp/$i.err" &
        pids+=($!)
    done
    local k=0
    for i in "${picked[@]}"; do
        r=0
        wait "${pids[$k]}" || r=$?
        k=$((k + 1))
        cat "$tmp/$i.out"
        cat "$tmp/$i.err" >&2
        if [ "$r" != 0 ] && [ "$rc" = 0 ]; then rc=$r; fi
    done
    rm -rf "$tmp"
    return "$rc"
}

# scp_workers FILE DEST: copies FILE to DEST (relative to the home directory) on every worker
# of every slice.
scp_workers() {
    local node
    for node in "${NODES[@]}"; do
        run gcloud compute tpus tpu-vm scp "$1" "$node:$2" "${WHERE[@]}" --worker=all ${SSH_FLAGS[@]+"${SSH_FLAGS[@]}"} \
            || return
    done
}

# The shell on each worker, prepended to the remote commands: its worker number (gcloud's
# --worker index), from the VM metadata server; TPU_WORKER_ID where a platform sets it; the
# hostname where neither answers (logs.sh computes the same name on the worker it reads).
# $at names the worker in messages: "worker W", or with several slices "NODE worker W".
# shellcheck disable=SC2016  # expanded on the worker, not here
WORKER_ID_SH='w=${TPU_WORKER_ID:-$(curl -sf -m 5 -H Metadata-Flavor:Google http://metadata.google.internal/computeMetadata/v1/instance/attributes/agent-worker-number || hostname)}; at="${slice_name:+$slice_name }worker $w"'

# Bash functions for the remote commands, which find the run launch.sh started from
# logs/run.pid: "PID START LAUNCH_ID", START being the process's start time (field 22 of
# /proc/PID/stat, in clock ticks since boot). A pid alone is not an identity: after a VM
# restart or once the run has ended the pid may name an unrelated process, which must never
# be signalled.
#   proc_state PID: "STATE START" of a process, empty when there is none.
#   group_alive PGID: a process of the group is alive (zombies, which wait for a parent to
#     reap them, do not count).
#   run_alive: sets pid, start and id from logs/run.pid; true while the run is alive: its
#     leader with the recorded start time, or, once the leader has exited, what is left of its
#     process group (no new process can take the pid while that group has members).
# shellcheck disable=SC2016  # expanded on the worker, not here
RUN_SH='proc_state() { local s; s=$(cat "/proc/$1/stat" 2>/dev/null) || return 0; s=${s##*) }; set -- $s; echo "$1 ${20}"; }
group_alive() { ps -A -o pgid=,stat= | awk -v g="$1" '"'"'$1 == g && $2 !~ /^Z/ { f = 1 } END { exit !f }'"'"'; }
run_alive() {
  pid="" start="" id=""
  { [ -f logs/run.pid ] && read -r pid start id < logs/run.pid && [ -n "$pid" ] && [ -n "$start" ]; } || return 1
  case "$(proc_state "$pid")" in
    "" | "Z $start") group_alive "$pid" ;;
    *" $start") return 0 ;;
    *) return 1 ;;
  esac
}'

# The program launch.sh runs under setsid (as sh -c PROGRAM sh LAUNCH_ID COMMAND...): it
# records its own pid (a session leader, so also the process group stop.sh signals), its start
# time and the launch id, runs COMMAND and writes its exit status and the launch id to
# logs/run.exit ("STATUS LAUNCH_ID"; babysit.sh tells a finished run from a crashed one by it).
# The wrapper traps SIGTERM and SIGINT with a no-op, so the group's signal ends COMMAND (whose
# dispositions are the defaults again) while the wrapper waits to record how it ended; a
# SIGKILL (or a VM gone) leaves no run.exit.
# shellcheck disable=SC2016  # expanded on the worker, not here
RUN_WRAPPER='id=$1; shift; echo "$$ $(sed "s/.*) //" /proc/$$/stat | cut -d" " -f20) $id" > logs/run.pid.new && mv logs/run.pid.new logs/run.pid || exit 1
trap : TERM INT
"$@"; rc=$?
echo "$rc $id" > logs/run.exit.new && mv logs/run.exit.new logs/run.exit
exit "$rc"'

# common_flag ARGS...: handles the flags every script takes; sets USED to the number of words
# it took (0: not one of them).
common_flag() {
    USED=0
    case "$1" in
        --name) need_value "$1" "$#"; NAME=$2; USED=2 ;;
        --name=*) NAME=${1#*=}; USED=1 ;;
        --zone) need_value "$1" "$#"; ZONE=$2; USED=2 ;;
        --zone=*) ZONE=${1#*=}; USED=1 ;;
        --project) need_value "$1" "$#"; PROJECT=$2; USED=2 ;;
        --project=*) PROJECT=${1#*=}; USED=1 ;;
        --internal-ip) SSH_FLAGS=(--internal-ip); USED=1 ;;
        --dry-run) DRY_RUN=1; USED=1 ;;
        --num-slices) need_value "$1" "$#"; NUM_SLICES=$2; USED=2 ;;
        --num-slices=*) NUM_SLICES=${1#*=}; USED=1 ;;
    esac
}

# usage_and_exit TEXT: --help.
usage_and_exit() {
    printf '%s\n' "$1"
    exit 0
}

# check_type TYPE: the accelerator types the scripts know a runtime for.
check_type() {
    [[ $1 =~ ^(v4|v5litepod|v5p|v6e)-[0-9]+$ ]] \
        || die "--type '$1' is not an accelerator type v4-N, v5litepod-N, v5p-N or v6e-N (e.g. v4-512, v5p-128)"
}

# runtime_for TYPE: the TPU software version for JAX on that generation (Cloud TPU's
# "TPU software versions" page: v4 and older tpu-ubuntu2204-base, v5e v2-alpha-tpuv5-lite,
# v5p v2-alpha-tpuv5, v6e v2-alpha-tpuv6e).
runtime_for() {
    case "$1" in
        v4-*) echo tpu-ubuntu2204-base ;;
        v5litepod-*) echo v2-alpha-tpuv5-lite ;;
        v5p-*) echo v2-alpha-tpuv5 ;;
        v6e-*) echo v2-alpha-tpuv6e ;;
        *) die "no runtime version known for --type '$1'" ;;
    esac
}

# check_remote_dir DIR: a directory on the workers, relative to the home directory.
check_remote_dir() {
    [[ $1 =~ ^[A-Za-z0-9_][A-Za-z0-9_./-]*$ && $1 != *..* ]] \
        || die "--dir '$1' must be a path relative to the workers' home directory (letters, digits, _ . / -)"
}

# The flags every script that reaches the workers documents.
INTERNAL_IP_HELP="  --internal-ip      reach the workers by their internal IP (from a VM in the same network)"
SLICES_HELP="  --num-slices N     a multi-slice queued resource NAME (create.sh --num-slices N): every
                     worker of its slices NAME-0 .. NAME-(N-1) (default 1: the TPU VM NAME)"

# remote_command DIR LAUNCH_ID [KEY=VALUE ...] -- COMMAND...: sets REMOTE_CHECK, REMOTE_START
# and REMOTE_ABORT, the shell commands launch.sh runs on every worker: the check that no other
# run is alive, the start, and the stop of this launch's runs when the start failed somewhere.
# Every word of COMMAND and every KEY=VALUE is quoted with q, so the worker's shell hands them
# to the program byte for byte; only the scaffolding around them (the worker number, paths,
# the run checks) is expanded there. A start that runs twice (gcloud's retry) finds its launch
# id in logs/run.pid (written by the run itself, so only once it has started) and succeeds
# without starting a second run.
remote_command() {
    local dir=$1 launch=$2 envs=()
    shift 2
    while [ "$1" != -- ]; do envs+=("$1"); shift; done
    shift
    local qdir qid log pre
    qdir=$(q "$dir")
    qid=$(q "$launch")
    log="logs/run.worker\$w.log"
    pre="$WORKER_ID_SH; $RUN_SH"
    REMOTE_CHECK="$pre
cd $qdir 2>/dev/null || { echo \"\$at: no ~/$qdir (run setup.sh first)\" >&2; exit 1; }
if run_alive && [ \"\$id\" != $qid ]; then
  echo \"\$at: a run is still running (pid \$pid); stop it first (stop.sh)\" >&2; exit 1
fi
echo \"\$at: ready\""
    REMOTE_START="$pre
cd $qdir && mkdir -p logs || exit 1
if run_alive; then
  if [ \"\$id\" = $qid ]; then echo \"\$at: launch \$id already running (pid \$pid)\"; exit 0; fi
  echo \"\$at: a run is still running (pid \$pid); stop it first (stop.sh)\" >&2; exit 1
fi
if [ \"\$id\" = $qid ]; then echo \"\$at: launch $qid already started (and ended: see ~/$qdir/$log)\"; exit 0; fi
{ printf '=== %s worker %s launch %s:' \"\$(date -u +%Y-%m-%dT%H:%M:%SZ)\" \"\$w\" $qid; printf ' %s' $(qall "$@"); echo; } >> \"$log\"
PATH=\"\$HOME/$qdir-venv/bin:\$PATH\" nohup setsid sh -c $(q "$RUN_WRAPPER") sh $qid $(qall env ${envs[@]+"${envs[@]}"} "$@") >> \"$log\" 2>&1 < /dev/null &
i=0; until [ -f logs/run.pid ] && read -r pid start id < logs/run.pid && [ \"\$id\" = $qid ]; do
  if [ \$i -ge 100 ]; then echo \"\$at: the run did not write logs/run.pid in 10 s; see ~/$qdir/$log\" >&2; exit 1; fi
  sleep 0.1; i=\$((i + 1))
done
echo \"\$at: started, log ~/$qdir/$log\""
    REMOTE_ABORT="$pre
cd $qdir 2>/dev/null && run_alive && [ \"\$id\" = $qid ] || exit 0
kill -TERM -- \"-\$pid\"; i=0
while group_alive \"\$pid\"; do
  if [ \$i -ge 30 ]; then kill -KILL -- \"-\$pid\"; break; fi
  sleep 1; i=\$((i + 1))
done
echo \"\$at: stopped run \$pid of launch $qid\""
}

# stop_command DIR TIMEOUT: sets REMOTE_STOP, stop.sh's command on every worker: the run's
# launch id to logs/run.stopped (babysit.sh does not relaunch a run stopped on purpose), SIGTERM
# to the run's process group, a wait for every process of the group (a child can outlive the
# leader), and SIGKILL to the group once TIMEOUT seconds have passed.
stop_command() {
    local qdir
    qdir=$(q "$1")
    REMOTE_STOP="$WORKER_ID_SH; $RUN_SH
cd $qdir 2>/dev/null && run_alive || { echo \"\$at: no run\"; exit 0; }
echo \"\$id\" > logs/run.stopped
kill -TERM -- \"-\$pid\" && echo \"\$at: SIGTERM sent to run \$pid, waiting for it to save and exit\"
i=0; while group_alive \"\$pid\"; do
  if [ \$i -ge $2 ]; then
    kill -KILL -- \"-\$pid\" 2>/dev/null
    echo \"\$at: run \$pid still running after $2 s: SIGKILL sent to its process group (it may not have saved)\" >&2; exit 1
  fi
  sleep 1; i=\$((i + 1))
done
echo \"\$at: run \$pid ended\""
}
