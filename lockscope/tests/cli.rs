//! Shell completions and the man page, generated from the one CLI definition. No root.

mod common;

use std::process::Command;

use common::*;

#[test]
fn bash_completes_subcommands_and_flags() {
    let script = run_ok(lockscope().args(["completions", "bash"])).stdout;
    let dir = scratch("cli-completions");
    let file = dir.join("lockscope.bash");
    std::fs::write(&file, script).unwrap();
    let complete = |words: &str, cword: usize| {
        let out = Command::new("bash")
            .arg("-c")
            .arg(format!(
                "source '{}'; COMP_WORDS=({words}); COMP_CWORD={cword}; \
                 _lockscope lockscope \"${{COMP_WORDS[COMP_CWORD]}}\" \"${{COMP_WORDS[COMP_CWORD-1]}}\"; \
                 printf '%s\\n' \"${{COMPREPLY[@]}}\"",
                file.display()
            ))
            .output()
            .unwrap();
        assert!(out.status.success(), "{out:?}");
        String::from_utf8_lossy(&out.stdout).into_owned()
    };
    let subs = complete("lockscope re", 1);
    assert!(subs.lines().any(|l| l == "record"), "{subs}");
    assert!(subs.lines().any(|l| l == "report"), "{subs}");
    let flags = complete("lockscope record --stack", 2);
    assert!(flags.lines().any(|l| l == "--stack-rate"), "{flags}");
    for shell in ["zsh", "fish"] {
        let out = run_ok(lockscope().args(["completions", shell]));
        assert!(
            String::from_utf8_lossy(&out.stdout).contains("record"),
            "{shell}"
        );
    }
}

#[test]
fn the_man_page_documents_every_subcommand() {
    let page = String::from_utf8(run_ok(lockscope().arg("man")).stdout).unwrap();
    assert!(page.contains(".TH lockscope 1"), "{page}");
    for sub in [
        "doctor",
        "record",
        "report",
        "top",
        "serve",
        "workload",
        "completions",
    ] {
        assert!(page.contains(sub), "{sub} missing from the man page");
    }
    assert!(page.contains("Exit status:"), "{page}");
}
