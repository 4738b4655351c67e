//! Developer tasks for lockscope: `cargo xtask <command>`.
//!
//! `cargo xtask` is an alias (see `.cargo/config.toml`) for
//! `cargo run --quiet --package xtask --`.

mod bench;
mod fuzz;
mod setup;
mod tasks;
mod util;
mod vm;

use clap::{Parser, Subcommand};

#[derive(Parser)]
#[command(
    name = "cargo xtask",
    bin_name = "cargo xtask",
    about = "Developer tasks for lockscope (build, test, demo, machine setup)",
    long_about = "Developer tasks for lockscope, an eBPF lock-contention profiler.\n\n\
        lockscope has two halves: `lockscope-ebpf` (no_std probes, built for \
        bpfel-unknown-none with the nightly toolchain and linked by bpf-linker) and \
        `lockscope` (userspace; its build.rs compiles and embeds the probes). \
        Every command below first runs `setup`, so a fresh Debian machine only \
        needs rustup and `cargo xtask test`.",
    after_help = "Examples:\n  \
        cargo xtask setup            # install what is missing, nothing else\n  \
        cargo xtask build --release  # build target/release/lockscope\n  \
        cargo xtask demo             # profile a built-in workload (needs root)\n  \
        cargo xtask test             # fmt, clippy, eBPF clippy, then all tests\n  \
        cargo xtask test --quick -- mmap   # only tests whose name contains `mmap`\n  \
        cargo xtask bench            # overhead vs perf and bpftrace -> BENCHMARKS.md"
)]
struct Cli {
    #[command(subcommand)]
    command: Cmd,
}

#[derive(Subcommand)]
enum Cmd {
    /// Install what this machine lacks (idempotent; near-instant when done).
    #[command(long_about = "Install, only when missing:\n  \
        - the nightly toolchain with rust-src and clippy (for the eBPF crate),\n    \
          and clippy/rustfmt for the default toolchain;\n  \
        - Debian packages (llvm-22-dev libclang-22-dev linux-perf bpftool tmux\n    \
          util-linux procps) via apt-get;\n  \
        - bpf-linker, built against LLVM 22 with `cargo install`;\n  \
        - tracefs mounted at /sys/kernel/tracing (root only).\n\n\
        Prints one line per thing installed, or `setup: everything present`. \
        apt-get and mount need root; when not root, apt-get goes through sudo.")]
    Setup,

    /// Set up, then build lockscope (which builds and embeds the eBPF probes).
    Build {
        /// Build with the release profile (target/release/lockscope).
        #[arg(long)]
        release: bool,
    },

    /// Set up, build in release, then profile a built-in lock-heavy workload.
    #[command(long_about = "Set up, build lockscope in release mode, then run\n\n  \
        lockscope record -- lockscope workload mmap-churn --seconds 5\n\n\
        and print its contention report. Loading eBPF programs needs root: when not \
        root, the profiler is started through sudo. Honours CARGO_TARGET_DIR.")]
    Demo,

    /// Set up, then run fmt, clippy (host and eBPF) and all tests (as root).
    #[command(long_about = "Set up, then run, stopping at the first failure:\n  \
        1. cargo fmt --all -- --check\n  \
        2. cargo clippy --all-targets -- -D warnings   (default members)\n  \
        3. cargo +nightly clippy -p lockscope-ebpf --target bpfel-unknown-none \
           -Z build-std=core -- -D warnings\n  \
        4. cargo test --release [ARGS]   (default members; needs root)\n  \
        5. cargo xtask vm-test            (deep tier on 6.1, 6.12, 6.12-rt; --no-vm skips)\n  \
        6. cargo xtask bench --quick      (the benchmark runs end to end; --no-bench skips)\n  \
        7. cargo xtask fuzz --seconds 15  (each fuzz target briefly; --no-fuzz skips)\n\n\
        The integration tests in lockscope/tests/ load eBPF programs, so the test \
        binaries must run as root: when not root they run through `sudo -E` (set as \
        cargo's target runner), so building still happens as you. Exits with the \
        failing step's exit code.")]
    Test {
        /// Skip fmt and clippy; only run the tests.
        #[arg(long)]
        quick: bool,

        /// Skip step 5, `vm-test` on every guest kernel (the deep tier under QEMU).
        #[arg(long)]
        no_vm: bool,

        /// Skip step 6, `bench --quick` (the benchmark harness end to end, ~3 minutes).
        #[arg(long)]
        no_bench: bool,

        /// Skip step 7, `fuzz --seconds 15` (builds the fuzz targets with ASan first).
        #[arg(long)]
        no_fuzz: bool,

        /// Extra arguments for `cargo test`, after `--` (e.g. a test name filter;
        /// use `-- -- --nocapture` to reach the test binaries).
        #[arg(last = true, value_name = "ARGS")]
        test_args: Vec<String>,
    },

    /// Boot other kernels under QEMU and check the deep probe tier there.
    #[command(
        long_about = "Boot Debian kernels under `qemu-system-x86_64 -accel tcg,thread=single` \
        (KVM guests hang on these machines) with an initramfs built here: busybox, the release \
        lockscope binary and its shared libraries, and an /init that mounts proc, sys, \
        tracefs, debugfs and bpffs, runs `lockscope doctor` and records the built-in \
        mmap-churn and mmap-handoff workloads. The host then checks the recordings: the \
        deep tier is active for the rwsem probes, the mmap_lock shows reader steals, \
        optimistic-spin write locks, queued reads and writes and handoffs, and (PREEMPT_RT) \
        that events which do not exist there are reported as n/a.\n\n\
        Installs qemu-system-x86, busybox-static and the kernel packages when missing. \
        Serial logs are kept in target/vm/. Fails on any failed check or a guest that \
        does not finish within 15 minutes (qemu is killed). A guest that dies prints the \
        step it died in and its kernel's last lines; one killed by an `int3` Oops (the \
        emulator's code-patching race) is booted once more, and the second boot decides."
    )]
    VmTest {
        /// Which kernel: 6.1 (linux-image-amd64), 6.12 (linux-image-6.12-amd64),
        /// 6.12-rt (linux-image-6.12-rt-amd64), or all.
        #[arg(long, value_name = "KERNEL", default_value = "all")]
        kernel: String,
    },

    /// Measure lockscope's overhead against perf and bpftrace, its cost per event,
    /// capacity and daemon cost; write BENCHMARKS.md and bench-results.json.
    #[command(
        long_about = "Measure lockscope against the tools people use today, as root:\n\n  \
        1. Overhead: rounds of the built-in workloads (mmap-fault, mmap-churn, \
           futex-mutex, futex-mutex --pi, an uncontended pthread loop and a loop of system \
           calls as bystanders), each round running every workload untraced; under \
           `lockscope record -a`; beside empty programs on the futex syscall tracepoints; \
           as the command of `lockscope record --`; under `lockscope serve` (scraped every \
           second); under `perf lock record -a`; under a bpftrace histogram per lock; and \
           untraced again. Each traced run is judged against the mean of its round's two \
           untraced runs. Per tool and workload: the workload's own ops/s, contention \
           events/s seen, the tool's CPU time and peak RSS, lost events.\n  \
        2. Cost per event: kernel BPF run statistics of lockscope's programs against an \
           empty program and a minimal bpftrace peer on the same tracepoints.\n  \
        3. Capacity: more threads and shorter critical sections until loss or saturation; \
           loss checked against the workload's own futex call counts.\n  \
        4. Daemon cost: CPU % and RSS of `lockscope serve` (also with 10,000 locks).\n  \
        5. cyclictest bare and under `record -a --latency-threshold`; start and stop times \
           (alone and beside `stress-ng --ptrace 4`); memcached under memcslap bare, beside \
           a recording and traced.\n\n\
        Writes BENCHMARKS.md and bench-results.json at the repository root (--quick: in \
        target/bench/, 1 short run each, about 3 minutes; `cargo xtask test` runs it). \
        --soak runs only the soak: `lockscope serve` under mmap-churn for --minutes, RSS \
        at start (after warm-up) and end, merged into the same files. Fails if a tool is \
        missing or a run fails; missed targets are reported, not failures."
    )]
    Bench {
        /// One short run of each; results go to target/bench/ (what CI runs).
        #[arg(long)]
        quick: bool,
        /// Only the soak: `lockscope serve` under mmap-churn for --minutes.
        #[arg(long)]
        soak: bool,
        /// Soak: start short-lived processes one after another beside the workload
        /// (each a new mmap_lock, so the set of locks seen keeps growing).
        #[arg(long, requires = "soak")]
        churn: bool,
        /// Soak length in minutes.
        #[arg(long, value_name = "M", default_value_t = 10.0, requires = "soak")]
        minutes: f64,
        /// Runs per tool and workload [default: 5, --quick: 1].
        #[arg(long, value_name = "N")]
        runs: Option<usize>,
        /// Measure nothing: re-judge the targets and rewrite BENCHMARKS.md from
        /// bench-results.json.
        #[arg(long, conflicts_with_all = ["soak", "runs"])]
        render: bool,
    },

    /// Bench helper: empty programs on the raw sys_enter/sys_exit tracepoints while CMD
    /// runs (the floor of the futex probes' cost on x86_64).
    #[command(hide = true)]
    RawFloor {
        #[arg(last = true, required = true)]
        cmd: Vec<String>,
    },

    /// Fuzz the recording reader and the `top --connect` snapshot path (cargo-fuzz).
    #[command(
        long_about = "Run each cargo-fuzz target in fuzz/ (recording: a recording \
        file parsed, checked and rendered in every format; snapshot: a serve snapshot fed \
        to the live view and drawn in every view) for --seconds, from the seeds in \
        fuzz/seeds/. Installs cargo-fuzz when missing; needs the nightly toolchain \
        (installed by setup). A crash fails with its input left in fuzz/artifacts/."
    )]
    Fuzz {
        /// How long to run each target.
        #[arg(long, value_name = "S", default_value_t = 60)]
        seconds: u64,
    },
}

fn main() {
    let cli = Cli::parse();
    let result = match cli.command {
        Cmd::Setup => setup::setup(),
        Cmd::Build { release } => tasks::build(release),
        Cmd::Demo => tasks::demo(),
        Cmd::Test {
            quick,
            no_vm,
            no_bench,
            no_fuzz,
            test_args,
        } => tasks::test(quick, &test_args)
            .and_then(|()| if no_vm { Ok(()) } else { vm::vm_test(None) })
            .and_then(|()| {
                if no_bench {
                    Ok(())
                } else {
                    bench::bench(bench::BenchOptions {
                        quick: true,
                        soak: false,
                        minutes: 10.0,
                        churn: false,
                        runs: None,
                        render: false,
                    })
                }
            })
            .and_then(|()| if no_fuzz { Ok(()) } else { fuzz::fuzz(15) }),
        Cmd::RawFloor { cmd } => bench::raw_floor(&cmd),
        Cmd::Fuzz { seconds } => fuzz::fuzz(seconds),
        Cmd::VmTest { kernel } => vm::vm_test(Some(&kernel)),
        Cmd::Bench {
            quick,
            soak,
            minutes,
            churn,
            runs,
            render,
        } => bench::bench(bench::BenchOptions {
            quick,
            soak,
            minutes,
            churn,
            runs,
            render,
        }),
    };
    if let Err(err) = result {
        eprintln!("error: {err:#}");
        let code = err
            .chain()
            .find_map(|e| e.downcast_ref::<util::CommandFailed>())
            .map(|f| f.code)
            .filter(|&c| c != 0)
            .unwrap_or(1);
        std::process::exit(code);
    }
}
