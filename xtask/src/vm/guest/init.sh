#!/bin/busybox sh
/bin/busybox mkdir -p /proc /sys /dev /tmp /run /usr/bin /sbin /usr/sbin
/bin/busybox --install -s /bin
export PATH=/bin:/sbin:/usr/bin:/usr/sbin
mount -t proc proc /proc
mount -t sysfs sysfs /sys
mount -t devtmpfs devtmpfs /dev 2>/dev/null
mount -t tmpfs tmpfs /tmp
mkdir -p /dev/shm
mount -t tmpfs tmpfs /dev/shm
mount -t tracefs tracefs /sys/kernel/tracing
mount -t debugfs debugfs /sys/kernel/debug
mount -t bpf bpf /sys/fs/bpf
mount -t cgroup2 cgroup2 /sys/fs/cgroup
echo "LOCKSCOPE-VM-BOOTED $(uname -r) cpus=$(nproc)"
pass=0
fail=0
step() {
    name=$1
    shift
    echo "LOCKSCOPE-VM-STEP-BEGIN $name"
    "$@" >/tmp/step.out 2>&1
    rc=$?
    cat /tmp/step.out
    echo "LOCKSCOPE-VM-STEP-END $name rc=$rc"
    if [ "$rc" -eq 0 ]; then pass=$((pass + 1)); else fail=$((fail + 1)); fi
}
dump() {
    echo "LOCKSCOPE-VM-FILE-BEGIN $1"
    cat "/tmp/$1" 2>/dev/null
    echo
    echo "LOCKSCOPE-VM-FILE-END $1"
}
. /vm-steps.sh
echo "LOCKSCOPE-VM-RESULT pass=$pass fail=$fail"
sync
# The serial line drains after echo returns: give it time before the power goes.
sleep 2
poweroff -f
