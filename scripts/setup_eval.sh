#!/usr/bin/env bash
# Installs the Debian packages that MultiPL-E's languages need to run in the evaluation sandbox
# (easylemur/eval/benchmarks/multipl_e/languages.py), bubblewrap itself, MariaDB for InterCode-SQL and
# InterCode-Bash's and -CTF's tools.
# Idempotent: a tool or file already present is skipped. Without apt-get, or when an install fails, it
# prints one line and goes on; the tests that need the missing tool are then skipped, with the reason.
set -uo pipefail
updated=""
apt_install() {  # CHECK PACKAGE...: CHECK is a command on PATH or an absolute file path
    if [ "${1#/}" != "$1" ]; then [ -e "$1" ] && return 0; else command -v "$1" >/dev/null 2>&1 && return 0; fi
    local check=$1
    shift
    command -v apt-get >/dev/null 2>&1 || { echo "setup_eval: no apt-get; install $* for $check" >&2; return 0; }
    local sudo=""
    [ "$(id -u)" = 0 ] || sudo="sudo -n"
    if [ -z "$updated" ]; then $sudo apt-get update -qq >/dev/null 2>&1; updated=1; fi
    $sudo apt-get install -y -qq "$@" >/dev/null 2>&1 \
        || echo "setup_eval: could not install $* (apt-get install -y $*); what needs $check will be skipped" >&2
}
apt_install bwrap bubblewrap
apt_install node nodejs
apt_install g++ g++
apt_install javac default-jdk-headless
apt_install /usr/share/java/javatuples.jar libjavatuples-java
apt_install go golang-go
apt_install /usr/bin/rustc rustc
apt_install bash bash
apt_install perl perl
apt_install /usr/share/perl5/Test/Deep.pm libtest-deep-perl
# InterCode-SQL's engine (easylemur/eval/benchmarks/intercode_sql/server.py): a private MariaDB server per run
apt_install /usr/sbin/mariadbd mariadb-server
# InterCode-Bash (easylemur/eval/benchmarks/intercode_bash/): git for its machines and reward, and the tools of
# InterCode's nl2bash image its gold commands use (a task whose tool is missing is skipped)
apt_install git git
apt_install tree tree
apt_install cal ncal
apt_install column bsdextrautils
apt_install cpio cpio
apt_install jq jq
apt_install pstree psmisc
# WebArena's browser (easylemur/eval/benchmarks/webarena/browser.py): Playwright drives Debian's Chromium
# (Playwright's own browser builds are a download from its CDN, not a package)
apt_install /usr/bin/chromium chromium
# InterCode-CTF's tools (its image's sleuthkit, netcat, unzip, gdb, poppler-utils, and pycryptodome as Debian packages it)
apt_install srch_strings sleuthkit
apt_install nc netcat-openbsd
apt_install unzip unzip
apt_install gdb gdb
apt_install pdftotext poppler-utils
apt_install /usr/lib/python3/dist-packages/Cryptodome python3-pycryptodome
exit 0
