#!/usr/bin/env bash
# Runs a README command on a pristine Debian 12 machine made on this one:
#
#   sudo scripts/pristine-check.sh                       # 'bash scripts/test.sh', the test command
#   sudo scripts/pristine-check.sh 'bash scripts/demo.sh'
#   sudo CI=true scripts/pristine-check.sh               # as CI runs it
#   sudo CI=true WEFT_PRISTINE_CA=/etc/ssl/certs/ca-certificates.crt scripts/pristine-check.sh
#                                    # behind a TLS-intercepting proxy (docs/testing.md)
#
# What "pristine" means here:
#   - the root is a minbase Debian 12 (bookworm) made by mmdebstrap, nothing
#     of this machine's packages in it; the repository is a fresh clone of
#     HEAD (uncommitted changes are not in it), with shared/ beside it when
#     this checkout has one (CI lays it out so);
#   - the command runs in a private mount namespace whose root IS that root
#     (pivot_root, not chroot: the mount namespaces the real nodes make with
#     unshare, and nsenter into them, stay inside it), and in a PID namespace
#     of its own: /proc shows only its processes, and when the command ends
#     or this script is stopped, every process it started is killed with it;
#   - /sys (cgroups included) and /dev are the machine's, /run is a new
#     tmpfs; the network namespace is the machine's root one, as on a real
#     machine (the tests never touch it; apt and the Go module proxy need it);
#   - only what the project's machine kind preinstalls is bound in: Go
#     (read-only, /usr/local/go, with its env file: GOFLAGS, GOTOOLCHAIN), and
#     /etc/resolv.conf. Every cache starts empty (apt, Go's module and build
#     caches, ccache, the image cache): the root's HOME is /root inside it.
#
# Environment:
#   WEFT_PRISTINE_DIR    where the root is made (default /var/tmp); it needs
#                        ~25 GB for the full test command
#   WEFT_PRISTINE_KEEP=1 keep the root afterwards (its path is printed)
#   WEFT_PRISTINE_CA     a CA bundle the machine's registries need beyond
#                        Debian's ca-certificates (bound in as
#                        /etc/pristine-ca.crt and named by SSL_CERT_FILE,
#                        CURL_CA_BUNDLE and GIT_SSL_CAINFO)
#   WEFT_PRISTINE_BIND   more host paths to bind read-only at the same path,
#                        space-separated (e.g. a local mirror)
#   WEFT_DEBIAN_MIRROR   mmdebstrap's MIRROR arguments (default: its own,
#                        with bookworm-updates and -security)
#   CI                   passed through (CI=true: skips become failures)
# The command's output is also written to WEFT_PRISTINE_LOG (default
# /var/tmp/weft-pristine-<time>.log); the script exits with its status.
#
# It removes everything it made, also when interrupted: the root (unless
# kept), the namespaces (they die with their last process), and the cgroups
# made inside (every top-level cgroup that was not there before, with its
# children).
set -euo pipefail
repo=$(cd "$(dirname "$0")/.." && pwd)

if [[ ${1:-} == --inner ]]; then
    # In the new mount and PID namespaces (we are PID 1): build the machine's
    # mounts under the root, pivot into it, and run the command.
    root=$2 cmd=$3
    mount --make-rprivate /
    mount --bind "$root" "$root"                  # pivot_root needs a mount point
    mount -t proc proc "$root/proc"
    mount --rbind /sys "$root/sys" && mount --make-rslave "$root/sys"
    mount --rbind /dev "$root/dev" && mount --make-rslave "$root/dev"
    mount -t tmpfs -o mode=0755,nosuid,nodev tmpfs "$root/run"
    mkdir -p "$root/run/lock" && chmod 1777 "$root/run/lock"
    bind_ro() { mkdir -p "$2"; mount --bind "$1" "$2"; mount -o remount,bind,ro "$2"; }
    gobin=$(command -v go || true)
    if [[ -n $gobin ]]; then
        goroot=$(go env GOROOT)
        bind_ro "$goroot" "$root$goroot"
    fi
    if [[ -n ${WEFT_PRISTINE_CA:-} ]]; then
        touch "$root/etc/pristine-ca.crt"
        mount --bind "$WEFT_PRISTINE_CA" "$root/etc/pristine-ca.crt"
    fi
    for p in ${WEFT_PRISTINE_BIND:-}; do bind_ro "$p" "$root$p"; done
    cd "$root"
    mkdir -p .pristine-old
    pivot_root . .pristine-old
    cd /
    umount -l /.pristine-old
    rmdir /.pristine-old
    envs=(HOME=/root TERM=dumb LANG=C.UTF-8 USER=root LOGNAME=root
          PATH=${goroot:+$goroot/bin:}/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin)
    [[ -n ${CI:-} ]] && envs+=(CI="$CI")
    if [[ -n ${WEFT_PRISTINE_CA:-} ]]; then
        envs+=(SSL_CERT_FILE=/etc/pristine-ca.crt CURL_CA_BUNDLE=/etc/pristine-ca.crt
               GIT_SSL_CAINFO=/etc/pristine-ca.crt)
    fi
    cd /work/weft
    # Not exec: PID 1 must stay to reap, and its exit ends the namespace.
    env -i "${envs[@]}" bash -c "$cmd" </dev/null
    exit $?
fi

cmd=${1:-bash scripts/test.sh}
[[ $(id -u) == 0 ]] || { echo "pristine-check: run as root" >&2; exit 1; }
for t in mmdebstrap:mmdebstrap unshare:util-linux git:git; do
    command -v "${t%%:*}" >/dev/null || { echo "pristine-check: ${t%%:*} is missing (Debian package ${t#*:})" >&2; exit 1; }
done

t0=$SECONDS
say() { printf 'pristine-check: [%4ds] %s\n' $((SECONDS - t0)) "$*" >&2; }
base=${WEFT_PRISTINE_DIR:-/var/tmp}
mkdir -p "$base"
work=$(mktemp -d "$base/weft-pristine.XXXXXX")
root=$work/root
log=${WEFT_PRISTINE_LOG:-/var/tmp/weft-pristine-$(date -u +%Y%m%dT%H%M%SZ).log}
cgroups_before=$work/cgroups.before
find /sys/fs/cgroup -mindepth 1 -type d 2>/dev/null | sort >"$cgroups_before"
inner_pid=""

cleanup() {
    local rc=$?
    trap - EXIT INT TERM HUP
    if [[ -n $inner_pid ]] && kill -0 "$inner_pid" 2>/dev/null; then
        say "stopping the pristine machine's processes"
        kill -KILL "$inner_pid" 2>/dev/null || true   # unshare --kill-child takes PID 1 with it
        wait "$inner_pid" 2>/dev/null || true
    fi
    # Cgroups made inside: the directories that were not there before,
    # children first. Their processes are gone with the PID namespace; a
    # cgroup's last process can take a moment to be reaped.
    # Only top-level cgroups that are new, with what is below them: other
    # programs on the machine make cgroups under their own (pre-existing)
    # ones meanwhile, and those are not ours. A top-level cgroup is
    # /sys/fs/cgroup/NAME on a cgroup2 machine, /sys/fs/cgroup/CONTROLLER/NAME
    # on a v1 or hybrid one.
    local new all depth=2
    [[ $(stat -fc %T /sys/fs/cgroup 2>/dev/null) == cgroup2fs ]] && depth=1
    all=$(comm -13 "$cgroups_before" <(find /sys/fs/cgroup -mindepth 1 -type d 2>/dev/null | sort) || true)
    new=$(while read -r d; do
              [[ -n $d ]] || continue
              top=$(cut -d/ -f1-$((4 + depth)) <<<"$d")
              grep -qxF -- "$top" <<<"$all" && echo "$d"
          done <<<"$all")
    if [[ -n $new ]]; then
        for _ in 1 2 3 4 5 6 7 8 9 10; do
            sort -r <<<"$new" | while read -r d; do [[ -d $d ]] && rmdir "$d" 2>/dev/null || true; done
            new=$(while read -r d; do [[ -d $d ]] && echo "$d"; done <<<"$new")
            [[ -z $new ]] && break
            sleep 0.5
        done
        [[ -n $new ]] && say "cgroups left (still in use?): $(head -5 <<<"$new" | paste -sd' ')"
    fi
    if [[ ${WEFT_PRISTINE_KEEP:-} == 1 ]]; then
        say "root kept: $root"
    else
        rm -rf --one-file-system "$work"
    fi
    exit "$rc"
}
trap cleanup EXIT
trap 'exit 130' INT
trap 'exit 143' TERM
trap 'exit 129' HUP

say "making a minbase Debian 12 root in $root (mmdebstrap)"
# shellcheck disable=SC2086
mmdebstrap --variant=minbase --hook-dir=/usr/share/mmdebstrap/hooks/merged-usr \
    bookworm "$root" ${WEFT_DEBIAN_MIRROR:-} >"$work/mmdebstrap.log" 2>&1 ||
    { tail -n 20 "$work/mmdebstrap.log" >&2; say "mmdebstrap failed"; exit 1; }
cp -L /etc/resolv.conf "$root/etc/resolv.conf"
if command -v go >/dev/null; then
    goenv=$(go env GOENV)
    if [[ -f $goenv ]]; then
        mkdir -p "$root$(dirname "$goenv")"
        cp "$goenv" "$root$goenv"
    fi
fi
mkdir -p "$root/work"
git clone --quiet --no-local "$repo" "$root/work/weft"
say "cloned $(git -C "$repo" rev-parse --short HEAD) into /work/weft"
[[ -d $repo/../shared ]] && cp -r "$repo/../shared" "$root/work/shared" && chmod -R a-w "$root/work/shared"

say "running '$cmd' inside (output also in $log)"
set +e
unshare --mount --pid --fork --kill-child=SIGKILL --propagation private \
    bash "$repo/scripts/pristine-check.sh" --inner "$root" "$cmd" > >(tee "$log") 2>&1 &
inner_pid=$!
wait "$inner_pid"
rc=$?
inner_pid=""
set -e
say "'$cmd' exited $rc after $((SECONDS - t0)) s (the root's making included)"
exit "$rc"
