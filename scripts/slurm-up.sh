#!/usr/bin/env bash
# A single-node Slurm cluster on this machine, for difftest's launcher tests (and for trying the
# `srun` launcher by hand). Debian 12 packages, no systemd: munged, slurmctld and slurmd are
# started directly, each writing a pidfile under $SLURM_UP_DIR, and `stop` ends exactly those
# pids. Idempotent: `start` on a running cluster only checks it.
#
#   scripts/slurm-up.sh start    install (as root, when missing), configure, start, wait for idle
#   scripts/slurm-up.sh stop     stop the daemons this script started (by pidfile)
#   scripts/slurm-up.sh status   print what runs, exit 0 when the node takes jobs
#
# The config goes to /etc/slurm/slurm.conf (where srun looks for it); an existing file that this
# script did not write is left alone and the script stops with an error.
set -euo pipefail

STATE=${SLURM_UP_DIR:-/var/tmp/difftest-slurm}
CONF=/etc/slurm/slurm.conf
CGROUP_CONF=/etc/slurm/cgroup.conf
MARK="# written by difftest scripts/slurm-up.sh"
PACKAGES=(slurmctld slurmd slurm-client munge)

say() { echo "slurm-up: $*" >&2; }
die() { say "error: $*"; exit 1; }

alive() {  # alive PIDFILE: the pid in it runs
    [[ -s $1 ]] && kill -0 "$(cat "$1")" 2>/dev/null
}

install_packages() {
    local missing=()
    for bin in slurmctld slurmd srun munged mungekey; do
        command -v "$bin" >/dev/null 2>&1 || missing+=("$bin")
    done
    ((${#missing[@]} == 0)) && return 0
    [[ $(id -u) == 0 ]] || die "missing ${missing[*]}; install ${PACKAGES[*]} (as root)"
    say "installing ${PACKAGES[*]}"
    export DEBIAN_FRONTEND=noninteractive
    apt-get update -q >"$STATE/apt.log" 2>&1 || { cat "$STATE/apt.log" >&2; die "apt-get update failed"; }
    apt-get install -y -q "${PACKAGES[@]}" >>"$STATE/apt.log" 2>&1 \
        || { tail -n 30 "$STATE/apt.log" >&2; die "apt-get install failed"; }
}

write_config() {
    local host node proctrack
    host=$(hostname -s)
    # The node line as slurmd sees this machine (CPUs, sockets, memory), minus its UpTime line.
    node=$(slurmd -C | head -n 1)
    [[ $node == NodeName=* ]] || die "slurmd -C printed no node line: $node"
    if mountpoint -q /sys/fs/cgroup/freezer 2>/dev/null; then
        proctrack=proctrack/cgroup
    else
        proctrack=proctrack/pgid
    fi
    if [[ -e $CONF ]] && ! grep -qF "$MARK" "$CONF"; then
        die "$CONF exists and was not written by this script; not touching it"
    fi
    local tmp
    tmp=$(mktemp "$CONF.XXXXXX")
    cat >"$tmp" <<EOF
$MARK
ClusterName=difftest
SlurmctldHost=$host(127.0.0.1)
SlurmUser=root
AuthType=auth/munge
MpiDefault=none
ProctrackType=$proctrack
TaskPlugin=task/none
SelectType=select/cons_tres
SelectTypeParameters=CR_CPU
SchedulerType=sched/backfill
SchedulerParameters=batch_sched_delay=0
ReturnToService=2
InactiveLimit=15
KillWait=5
MinJobAge=30
MailProg=/bin/true
StateSaveLocation=$STATE/ctld
SlurmdSpoolDir=$STATE/d
SlurmctldPidFile=$STATE/slurmctld.pid
SlurmdPidFile=$STATE/slurmd.pid
SlurmctldLogFile=$STATE/slurmctld.log
SlurmdLogFile=$STATE/slurmd.log
JobAcctGatherType=jobacct_gather/none
AccountingStorageType=accounting_storage/none
$node NodeAddr=127.0.0.1 State=UNKNOWN
PartitionName=debug Nodes=ALL Default=YES MaxTime=INFINITE State=UP OverSubscribe=NO
EOF
    chmod 644 "$tmp"
    mv "$tmp" "$CONF"
    if [[ $proctrack == proctrack/cgroup ]]; then
        if [[ -e $CGROUP_CONF ]] && ! grep -qF "$MARK" "$CGROUP_CONF"; then
            die "$CGROUP_CONF exists and was not written by this script; not touching it"
        fi
        printf '%s\nCgroupPlugin=cgroup/v1\nCgroupAutomount=no\n' "$MARK" >"$CGROUP_CONF"
    fi
}

start_munge() {
    alive "$STATE/munged.pid" && return 0
    [[ -s /etc/munge/munge.key ]] || mungekey --create --keyfile=/etc/munge/munge.key
    chown munge:munge /etc/munge/munge.key
    chmod 400 /etc/munge/munge.key
    install -d -o munge -g munge -m 755 /run/munge
    install -d -o munge -g munge -m 700 /var/lib/munge /var/log/munge
    # munged refuses to run as root; its pidfile lives in a directory it may write.
    install -d -o munge -g munge -m 755 "$STATE/munge"
    runuser -u munge -- /usr/sbin/munged --pid-file="$STATE/munge/munged.pid" \
        --log-file="$STATE/munge/munged.log"
    ln -sf "$STATE/munge/munged.pid" "$STATE/munged.pid"
    for _ in $(seq 50); do alive "$STATE/munged.pid" && return 0; sleep 0.1; done
    die "munged did not start (see $STATE/munge/munged.log)"
}

start_daemon() {  # start_daemon NAME: slurmctld or slurmd, daemonised, writing its pidfile
    local name=$1
    alive "$STATE/$name.pid" && return 0
    rm -f "$STATE/$name.pid"
    "/usr/sbin/$name" || die "$name did not start (see $STATE/$name.log)"
    for _ in $(seq 100); do alive "$STATE/$name.pid" && return 0; sleep 0.1; done
    die "$name wrote no pidfile (see $STATE/$name.log)"
}

node_ready() {
    local state
    state=$(sinfo --noheader --format=%t 2>/dev/null | head -n 1)
    [[ $state == idle* || $state == mix* || $state == alloc* ]]
}

start() {
    install -d -m 755 "$STATE" "$STATE/ctld" "$STATE/d"
    install_packages
    if ! alive "$STATE/slurmctld.pid" || ! alive "$STATE/slurmd.pid"; then
        write_config
    fi
    start_munge
    start_daemon slurmctld
    start_daemon slurmd
    for _ in $(seq 300); do
        if node_ready; then say "ready: $(sinfo --noheader --format='%P %D %t %c CPUs' | head -n 1)"; return 0; fi
        if sinfo --noheader --format=%t 2>/dev/null | grep -qE 'down|drain'; then
            scontrol update nodename="$(hostname -s)" state=resume >/dev/null 2>&1 || true
        fi
        sleep 0.1
    done
    die "the node never became idle; $(sinfo 2>&1 | tail -n 2); see $STATE/*.log"
}

stop_pidfile() {  # stop_pidfile FILE: TERM the pid, wait, KILL if it lingers
    local file=$1 pid
    [[ -s $file ]] || return 0
    pid=$(cat "$file")
    if kill -0 "$pid" 2>/dev/null; then
        kill -TERM "$pid" 2>/dev/null || true
        for _ in $(seq 50); do kill -0 "$pid" 2>/dev/null || break; sleep 0.1; done
        kill -0 "$pid" 2>/dev/null && kill -KILL "$pid" 2>/dev/null || true
    fi
    rm -f "$file"
}

stop() {
    stop_pidfile "$STATE/slurmd.pid"
    stop_pidfile "$STATE/slurmctld.pid"
    stop_pidfile "$STATE/munge/munged.pid"
    rm -f "$STATE/munged.pid"
    say "stopped"
}

status() {
    local rc=0
    for name in munged slurmctld slurmd; do
        if alive "$STATE/$name.pid"; then say "$name: running (pid $(cat "$STATE/$name.pid"))"
        else say "$name: not running"; rc=1; fi
    done
    node_ready || rc=1
    return $rc
}

case ${1:-start} in
    start) start ;;
    stop) stop ;;
    status) status ;;
    *) die "usage: $0 start|stop|status" ;;
esac
