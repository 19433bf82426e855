//! Red team, round 10: the tree kill without a pid namespace and the stdio
//! relay. Each test is an attack by the run (or by what the run can make
//! happen) on a bound capsule promises: the wall-clock limit ends the run and
//! capsule returns 124 within it, plus the grace and the sweep's bound.

mod common;

use common::*;
use std::time::{Duration, Instant};

/// Pids of every process whose command line contains `tok`.
fn with_token(tok: &str) -> Vec<i32> {
    let mut out = vec![];
    for e in std::fs::read_dir("/proc").expect("/proc").flatten() {
        if let Ok(pid) = e.file_name().to_string_lossy().parse::<i32>() {
            if pid_alive(pid, Some(tok)) {
                out.push(pid);
            }
        }
    }
    out
}

/// Kills every process carrying the token when dropped (rounds: a process
/// that forks and exits moves on to a new pid).
struct KillToken(String);

impl Drop for KillToken {
    fn drop(&mut self) {
        for _ in 0..100 {
            let left = with_token(&self.0);
            if left.is_empty() {
                return;
            }
            for p in left {
                // SAFETY: kill(2) on a process of this test's run (its token).
                unsafe {
                    libc::kill(p, libc::SIGKILL);
                }
            }
            std::thread::sleep(Duration::from_millis(20));
        }
    }
}

/// Many fork-and-exit chains at once, each generation living a fork's time,
/// for at most 40 s (argv[1] carries the test's token, so every generation
/// can be found and killed by the test).
const CHAINS_C: &str = r#"
#include <signal.h>
#include <stdlib.h>
#include <time.h>
#include <unistd.h>
int main(int argc, char **argv) {
    (void)argc; (void)argv;
    time_t end = time(NULL) + 40;
    signal(SIGTERM, SIG_IGN);
    for (int i = 1; i < 128; i++) if (fork() == 0) break;
    while (time(NULL) < end) {
        pid_t p = fork();
        if (p > 0) _exit(0);
        if (p < 0) usleep(1000);
    }
    return 0;
}
"#;

/// Without a pid namespace the walk of the run's tree listed each process's
/// children from /proc/PID/task/*/children and, when that failed for one
/// process (it had exited meanwhile, as every generation of a fork-and-exit
/// chain does), scanned all of /proc for its children instead: a scan of the
/// whole host per vanished process, on the event loop's thread. A run of 128
/// such chains kept the SIGTERM walk at the timeout going for as long as the
/// chains ran (here 40 s): no grace, no SIGKILL, no 124 at the wall-clock
/// limit. capsule must return within timeout + grace + the sweep's 5 s bound
/// (and say in `left_behind` what it could not end).
#[test]
fn without_namespaces_fork_chains_cannot_hold_the_timeout() {
    let mut sb = Sandbox::new();
    sb.set_env("CAPSULE_NO_NAMESPACES", "1");
    let Some(chains) = sb.compile_c("bin", "chains", CHAINS_C) else {
        return;
    };
    let tok = token("chains");
    let _kill = KillToken(tok.clone());
    let start = Instant::now();
    let run = sb.run(&[
        "exec",
        "--json",
        "--allow-exec",
        &sb.p("bin"),
        "--timeout",
        "2",
        "--",
        "/bin/sh",
        "-c",
        "\"$1\" \"$2\"; sleep 60",
        "sh",
        &chains.to_string_lossy(),
        &tok,
    ]);
    let took = start.elapsed();
    run.assert_code(124);
    assert!(
        took < Duration::from_secs(12),
        "ESCAPE: a 2 s run of fork-and-exit chains held capsule for {took:?} \
         (timeout 2 s + grace + sweep bound 5 s): {}",
        run.ctx()
    );
    // And never a result that says the tree is gone while it is not.
    std::thread::sleep(Duration::from_millis(200));
    let alive = with_token(&tok);
    let j = run.json();
    let named = j["left_behind"].as_array().is_some_and(|l| {
        l.iter()
            .any(|x| x.as_str().is_some_and(|s| s.starts_with("process ")))
    });
    assert!(
        alive.is_empty() || named,
        "ESCAPE: {} chain processes still run and the result does not say so: {}",
        alive.len(),
        run.ctx()
    );
}

/// The run fills capsule's stderr, a pipe whose reader is still there but
/// does not read (a harness that reads stdout to its end first, `2>&1 |` a
/// stalled consumer). capsule's own last line ("capsule: killed: timeout
/// ...") was written with a blocking wait for room, so capsule, its run long
/// dead and its audit record written, stayed blocked past every bound, for as
/// long as the reader did not read: its 124 never came. capsule's own
/// messages must fail soft on a pipe that stays full too.
fn a_stalled_stderr_reader_cannot_hold_capsule(no_namespaces: bool) {
    use std::os::fd::AsRawFd;
    use std::process::Stdio;
    if via_serve() {
        // The shim replays a serve step's stderr after the run: a stalled
        // reader holds the shim, never capsule's own descriptors.
        eprintln!("CAPSULE-SKIP capsule's own stderr; serve steps write into the server's pipes");
        return;
    }
    let mut sb = Sandbox::new();
    if no_namespaces {
        sb.set_env("CAPSULE_NO_NAMESPACES", "1");
    }
    // A pipe the test holds the read end of and never reads.
    let (rd, wr) = nix::unistd::pipe().expect("pipe");
    let mut child = sb
        .std_command([
            "exec",
            "--no-audit",
            "--timeout",
            "2",
            "--",
            "/bin/sh",
            "-c",
            "yes 'the run fills stderr' >&2",
        ])
        .stdin(Stdio::null())
        .stdout(Stdio::null())
        .stderr(Stdio::from(wr))
        .spawn()
        .expect("spawn capsule");
    let _guard = KillOnDrop {
        pid: child.id() as i32,
        token: None,
    };
    let start = Instant::now();
    let status = loop {
        if let Some(st) = child.try_wait().expect("wait") {
            break Some(st);
        }
        if start.elapsed() > Duration::from_secs(20) {
            break None;
        }
        std::thread::sleep(Duration::from_millis(50));
    };
    let _ = rd.as_raw_fd();
    assert!(
        status.is_some(),
        "HANG: capsule (timeout 2 s) had not returned after {:?}: its stderr's reader \
         does not read, and capsule's own message waits for room for ever",
        start.elapsed()
    );
    assert_eq!(
        status.unwrap().code(),
        Some(124),
        "took {:?}",
        start.elapsed()
    );
    assert!(
        start.elapsed() < Duration::from_secs(12),
        "capsule returned after {:?}",
        start.elapsed()
    );
    drop(rd);
}

#[test]
fn a_stalled_stderr_reader_cannot_hold_capsule_past_its_timeout() {
    a_stalled_stderr_reader_cannot_hold_capsule(no_namespaces_env());
}

#[test]
fn without_namespaces_a_stalled_stderr_reader_cannot_hold_capsule_past_its_timeout() {
    a_stalled_stderr_reader_cannot_hold_capsule(true);
}
