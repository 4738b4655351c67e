step doctor lockscope doctor
step churn lockscope record -n 5 -o /tmp/churn.json -- lockscope workload mmap-churn --seconds 4
dump churn.json
step handoff lockscope record -n 5 -o /tmp/handoff.json -- lockscope workload mmap-handoff --seconds 4
dump handoff.json
# The futex probes (calls that cannot wait are handled whole at their exit, their
# arguments read from the saved registers): counts equal the workload's own.
step futex lockscope record -n 1 -o /tmp/futex.json -- lockscope workload futex-mutex --threads 4 --seconds 2 --load 300 --json
dump futex.json
step pi-contend lockscope record -n 5 -o /tmp/pi.json -- lockscope workload pi-contend --threads 4 --seconds 4
dump pi.json
step pi-calm lockscope record -n 5 -o /tmp/pi-calm.json -- lockscope workload pi-contend --threads 1 --one-cpu --seconds 3
dump pi-calm.json
step pi-kprobe env LOCKSCOPE_SPIN_KPROBES=1 lockscope record -n 5 -o /tmp/pi-kprobe.json -- lockscope workload pi-contend --threads 4 --seconds 4
dump pi-kprobe.json
# Lock holders, against workloads that know them: a long and a short holder of a
# process's mmap_lock (a rwsem; on PREEMPT_RT an rtmutex-based rwsem), and a pipe's
# mutex held by its writer and reader threads (on PREEMPT_RT an rtmutex).
step holders lockscope record -n 5 -o /tmp/holders.json -- lockscope workload mmap-holders --seconds 2 --one-cpu
dump holders.json
step pipe-holders lockscope record -n 5 -o /tmp/pipe-holders.json -- lockscope workload pipe-mutex --seconds 2
dump pipe-holders.json
# PREEMPT_RT only: the ptrace + cyclictest scenario of the original latency report.
# cyclictest is the traced command (its own maxima become spikes next to lockscope's);
# the storm starts once cyclictest runs (lockscope's probes are attached by then) and
# ends before it, so the storm's own counts fall inside the recording.
ptrace_rt() {
    started=$(date +%s)
    (
        # Find cyclictest with builtins (the fewer short-lived processes, the fewer
        # freed task_structs a tracee can reuse, with their pi_lock's name).
        n=0
        cpid=
        while [ -z "$cpid" ]; do
            for d in /proc/[0-9]*; do
                read -r c 2>/dev/null <"$d/comm" && [ "$c" = cyclictest ] && cpid=${d#/proc/}
            done
            n=$((n + 1))
            if [ "$n" -gt 600 ]; then echo "storm rc=no cyclictest within 60 s"; exit 1; fi
            [ -n "$cpid" ] || sleep 0.1
        done
        lockscope workload ptrace-storm --tracers 2 --seconds 2 >/tmp/storm.out 2>&1
        echo "storm rc=$?"
        # Builtins only from here: a process forked now could take the memory of a
        # tracee's task_struct, and its pi_lock's name with it (lock names are per
        # address; README, "Memory stays flat").
        if kill -0 $cpid 2>/dev/null; then inside=yes; else inside=no; fi
        echo "storm inside recording: $inside"
    ) >/tmp/storm.log 2>&1 &
    lockscope record -a --latency-threshold PTRACE_RT_THRESHOLD -n 0 -o /tmp/ptrace-rt.json -- \
        cyclictest -S -p98 -m -i2000 -D 5 -q
    rc=$?
    wait
    cat /tmp/storm.out /tmp/storm.log
    grep -q "storm rc=0" /tmp/storm.log || rc=1
    echo "step seconds: $(($(date +%s) - started))"
    return $rc
}
case "$(uname -r)" in
*-rt-*)
    step ptrace-rt ptrace_rt
    dump ptrace-rt.json
    ;;
esac
