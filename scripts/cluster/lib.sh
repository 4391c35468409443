# Shared settings of the e2e cluster scripts (sourced, not run).
# shellcheck shell=bash
# shellcheck disable=SC2034  # every setting here is used by the scripts that source it

KAE_E2E_HERE="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
# Scratch directory: every file, socket and mount the cluster makes lives under it.
S="${KAE_E2E_STATE:-/var/tmp/kae-e2e}"
# The node is named localhost: the kubelet refuses a loopback --node-ip, so the API server reaches
# it by its Hostname address, which is the node name, and localhost resolves to loopback.
NODE=localhost
WAIT="${KAE_E2E_WAIT:-120}"

# Loopback ports (none of them the components' defaults, so a real cluster on the machine is left
# alone).
ETCD_PORT=23790
ETCD_PEER_PORT=23800
API_PORT=16443
KUBELET_PORT=10350
KUBELET_HEALTHZ_PORT=10348
CM_PORT=10357
SCHED_PORT=10359
# nfd-master's and nfd-worker's metrics and health servers (they listen on every interface: NFD
# has a port flag, no address flag).
NFD_MASTER_PORT=23820
NFD_WORKER_PORT=23821
# The directory nfd-worker reads feature files from: fixed in NFD's code, so it is the host's.
NFD_FEATURES_DIR=/etc/kubernetes/node-feature-discovery/features.d
NFD_NAMESPACE=node-feature-discovery

# The cgroup v1 parent of every pod cgroup (kubelet cgroupRoot), one per mounted hierarchy.
CGROUP_PARENT=kae-e2e
# The pod network: CNI's bridge (made by up, so that its settings can be set before any pod
# runs), its subnet and the host's address on it, the pods' gateway.
CNI_BRIDGE=kae-e2e0
POD_SUBNET=10.213.0.0/24
POD_GATEWAY=10.213.0.1
# The Service range, and the address of its `kubernetes` Service (the first one), where pods
# reach the API server (the serving certificate lists it).
SERVICE_RANGE=10.213.128.0/24
API_SERVICE_IP=10.213.128.1
# The nat chain that stands in for kube-proxy's one rule for that Service.
API_NAT_CHAIN=KAE-E2E-APISERVER

IMAGE=kae-e2e.local/busybox:1
PAUSE_IMAGE=kae-e2e.local/pause:1

# Host sysctls the kubelet and CNI write; down puts back what up found.
SYSCTLS="vm/overcommit_memory vm/panic_on_oom kernel/panic kernel/panic_on_oops \
kernel/keys/root_maxkeys kernel/keys/root_maxbytes net/ipv4/ip_forward"

say() { echo "kae-e2e: $*" >&2; }

# running PID: the process exists and is not a zombie.
running() {
    local state
    state="$(awk '{print $3}' "/proc/$1/stat" 2>/dev/null)" || return 1
    [ -n "$state" ] && [ "$state" != Z ]
}

pid_alive() {
    local f="$S/pids/$1.pid"
    [ -s "$f" ] && running "$(cat "$f")"
}

# wait_for SECONDS DESCRIPTION COMMAND...: polls COMMAND every 0.2 s until it succeeds or the
# deadline passes (then returns 1).
wait_for() {
    local seconds="$1" what="$2"
    shift 2
    local deadline=$((SECONDS + seconds))
    until "$@" >/dev/null 2>&1; do
        if [ "$SECONDS" -ge "$deadline" ]; then
            return 1
        fi
        sleep 0.2
    done
}

# start NAME COMMAND...: runs COMMAND in its own session with its log under $S/logs and records
# its PID.
start() {
    local name="$1"
    shift
    setsid "$@" >>"$S/logs/$name.log" 2>&1 </dev/null &
    echo $! >"$S/pids/$name.pid"
}

# stop NAME [SECONDS]: SIGTERM by recorded PID, SIGKILL after the deadline, waits until gone.
stop() {
    local name="$1" seconds="${2:-20}" pid
    local f="$S/pids/$name.pid"
    [ -s "$f" ] || return 0
    pid="$(cat "$f")"
    if running "$pid"; then
        kill -TERM "$pid" 2>/dev/null || true
        local deadline=$((SECONDS + seconds))
        while running "$pid"; do
            if [ "$SECONDS" -ge "$deadline" ]; then
                kill -KILL "$pid" 2>/dev/null || true
            fi
            sleep 0.1
        done
    fi
    rm -f "$f"
}
