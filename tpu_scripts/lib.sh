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
SSH_FLAGS=()  # --internal-ip: gcloud's ssh and scp reach the workers by their internal address
PROJECT=""
NAME=""
ZONE=""
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
        printf '+ %s\n' "$(qall "$@")" >&2
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

# The flags every script takes: --name, --zone and (optional) --project, checked; then WHERE.
check_target() {
    check_name
    check_zone
    check_project
    where_flags
}

# gcloud's flags shared by every command: the zone and, when given, the project.
where_flags() {
    WHERE=(--zone="$ZONE")
    if [ -n "$PROJECT" ]; then WHERE+=(--project="$PROJECT"); fi
}

# ssh_workers COMMAND [WORKER]: COMMAND run by the login shell of every worker (or one).
# gcloud runs COMMAND again when ssh exits 255 (it takes that for a dropped connection), so
# every remote command here is safe to run twice.
ssh_workers() {
    local command=$1 worker=${2:-all}
    run gcloud compute tpus tpu-vm ssh "$NAME" "${WHERE[@]}" --worker="$worker" ${SSH_FLAGS[@]+"${SSH_FLAGS[@]}"} \
        --command="$command"
}

# The shell on each worker, prepended to the remote commands: its worker number (gcloud's
# --worker index), from the VM metadata server; TPU_WORKER_ID where a platform sets it; the
# hostname where neither answers (logs.sh computes the same name on the worker it reads).
# shellcheck disable=SC2016  # expanded on the worker, not here
WORKER_ID_SH='w=${TPU_WORKER_ID:-$(curl -sf -m 5 -H Metadata-Flavor:Google http://metadata.google.internal/computeMetadata/v1/instance/attributes/agent-worker-number || hostname)}'

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
# time and the launch id, then becomes COMMAND with exec, which keeps both.
# shellcheck disable=SC2016  # expanded on the worker, not here
RUN_WRAPPER='id=$1; shift; echo "$$ $(sed "s/.*) //" /proc/$$/stat | cut -d" " -f20) $id" > logs/run.pid.new && mv logs/run.pid.new logs/run.pid && exec "$@"'

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

# The flag every script that reaches the workers documents.
INTERNAL_IP_HELP="  --internal-ip      reach the workers by their internal IP (from a VM in the same network)"

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
cd $qdir 2>/dev/null || { echo \"worker \$w: no ~/$qdir (run setup.sh first)\" >&2; exit 1; }
if run_alive && [ \"\$id\" != $qid ]; then
  echo \"worker \$w: a run is still running (pid \$pid); stop it first (stop.sh)\" >&2; exit 1
fi
echo \"worker \$w: ready\""
    REMOTE_START="$pre
cd $qdir && mkdir -p logs || exit 1
if run_alive; then
  if [ \"\$id\" = $qid ]; then echo \"worker \$w: launch \$id already running (pid \$pid)\"; exit 0; fi
  echo \"worker \$w: a run is still running (pid \$pid); stop it first (stop.sh)\" >&2; exit 1
fi
if [ \"\$id\" = $qid ]; then echo \"worker \$w: launch $qid already started (and ended: see ~/$qdir/$log)\"; exit 0; fi
{ printf '=== %s worker %s launch %s:' \"\$(date -u +%Y-%m-%dT%H:%M:%SZ)\" \"\$w\" $qid; printf ' %s' $(qall "$@"); echo; } >> \"$log\"
PATH=\"\$HOME/$qdir-venv/bin:\$PATH\" nohup setsid sh -c $(q "$RUN_WRAPPER") sh $qid $(qall env ${envs[@]+"${envs[@]}"} "$@") >> \"$log\" 2>&1 < /dev/null &
i=0; until [ -f logs/run.pid ] && read -r pid start id < logs/run.pid && [ \"\$id\" = $qid ]; do
  if [ \$i -ge 100 ]; then echo \"worker \$w: the run did not write logs/run.pid in 10 s; see ~/$qdir/$log\" >&2; exit 1; fi
  sleep 0.1; i=\$((i + 1))
done
echo \"worker \$w: started, log ~/$qdir/$log\""
    REMOTE_ABORT="$pre
cd $qdir 2>/dev/null && run_alive && [ \"\$id\" = $qid ] || exit 0
kill -TERM -- \"-\$pid\"; i=0
while group_alive \"\$pid\"; do
  if [ \$i -ge 30 ]; then kill -KILL -- \"-\$pid\"; break; fi
  sleep 1; i=\$((i + 1))
done
echo \"worker \$w: stopped run \$pid of launch $qid\""
}

# stop_command DIR TIMEOUT: sets REMOTE_STOP, stop.sh's command on every worker: SIGTERM to the
# run's process group, a wait for every process of the group (a child can outlive the
# leader), and SIGKILL to the group once TIMEOUT seconds have passed.
stop_command() {
    local qdir
    qdir=$(q "$1")
    REMOTE_STOP="$WORKER_ID_SH; $RUN_SH
cd $qdir 2>/dev/null && run_alive || { echo \"worker \$w: no run\"; exit 0; }
kill -TERM -- \"-\$pid\" && echo \"worker \$w: SIGTERM sent to run \$pid, waiting for it to save and exit\"
i=0; while group_alive \"\$pid\"; do
  if [ \$i -ge $2 ]; then
    kill -KILL -- \"-\$pid\" 2>/dev/null
    echo \"worker \$w: run \$pid still running after $2 s: SIGKILL sent to its process group (it may not have saved)\" >&2; exit 1
  fi
  sleep 1; i=\$((i + 1))
done
echo \"worker \$w: run \$pid ended\""
}
