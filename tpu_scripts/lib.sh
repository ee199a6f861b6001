#!/usr/bin/env bash
# Shared by the tpu_scripts: argument checks, quoting, and running (or, with --dry-run,
# printing) gcloud commands. Sourced, never run.
# shellcheck disable=SC2034  # the variables set here are read by the scripts that source it

# Where setup.sh installs easylemur on every worker and launch.sh runs from; logs and the pid
# file of the launched run go to $REMOTE_DIR/logs. Relative to the worker's home directory.
REMOTE_DIR_DEFAULT=easylemur

DRY_RUN=0
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
ssh_workers() {
    local command=$1 worker=${2:-all}
    run gcloud compute tpus tpu-vm ssh "$NAME" "${WHERE[@]}" --worker="$worker" --command="$command"
}

# The shell on each worker, prepended to the remote commands: its worker number (gcloud's
# --worker index), from the VM metadata server; TPU_WORKER_ID where a platform sets it.
# shellcheck disable=SC2016  # expanded on the worker, not here
WORKER_ID_SH='w=${TPU_WORKER_ID:-$(curl -sf -m 5 -H Metadata-Flavor:Google http://metadata.google.internal/computeMetadata/v1/instance/attributes/agent-worker-number || hostname)}'

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

# remote_command DIR [KEY=VALUE ...] -- COMMAND...: sets REMOTE to the shell command launch.sh
# runs on each worker. Every word of COMMAND and every KEY=VALUE is quoted with q, so the
# worker's shell hands them to the program byte for byte; only the scaffolding around them
# (the worker number, paths, the pid check) is expanded there. The launched shell writes its
# own pid after setsid made it a session leader, so the pid is also the process group that
# stop.sh signals.
remote_command() {
    local dir=$1 envs=()
    shift
    while [ "$1" != -- ]; do envs+=("$1"); shift; done
    shift
    local qdir log
    qdir=$(q "$dir")
    log="logs/run.worker\$w.log"
    REMOTE="$WORKER_ID_SH; cd $qdir && mkdir -p logs || exit 1
if [ -f logs/run.pid ] && kill -0 \"\$(cat logs/run.pid)\" 2>/dev/null; then
  echo \"worker \$w: a run is still running (pid \$(cat logs/run.pid)); stop it first (stop.sh)\" >&2; exit 1
fi
{ printf '=== %s worker %s:' \"\$(date -u +%Y-%m-%dT%H:%M:%SZ)\" \"\$w\"; printf ' %s' $(qall "$@"); echo; } >> \"$log\"
PATH=\"\$HOME/$qdir-venv/bin:\$PATH\" nohup setsid sh -c 'echo \$\$ > logs/run.pid; exec \"\$@\"' sh $(qall env ${envs[@]+"${envs[@]}"} "$@") >> \"$log\" 2>&1 < /dev/null &
echo \"worker \$w: started, log ~/$qdir/$log\""
}
