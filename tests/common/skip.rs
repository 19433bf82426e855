//! The one way a test says it did not (all) run: a fixed marker on the real
//! stderr, which libtest does not capture, so `scripts/test` sees it in every
//! pass and counts it (`N passed, M failed, K skipped`, K by reason):
//!
//! ```text
//! CAPSULE-SKIP: <binary>::<test> -- <reason>       the test asserted nothing more
//! CAPSULE-SKIP-PART: <binary>::<test> -- <reason>  a part of it did not run
//! ```
//!
//! A reason is a fixed sentence (what is missing here), so that the same
//! skip groups under one reason across tests and passes.

use std::io::Write;

fn marker(kind: &str, reason: &str) {
    let bin = std::env::args()
        .next()
        .map(|a| {
            let name = std::path::Path::new(&a)
                .file_name()
                .map(|f| f.to_string_lossy().into_owned())
                .unwrap_or(a);
            // cargo's test binaries are NAME-HASH.
            match name.rsplit_once('-') {
                Some((n, h)) if h.len() == 16 && h.bytes().all(|b| b.is_ascii_hexdigit()) => {
                    n.to_string()
                }
                _ => name,
            }
        })
        .unwrap_or_default();
    let thread = std::thread::current();
    let test = thread.name().unwrap_or("?");
    let reason = reason.replace('\n', " ");
    let line = format!("{kind}: {bin}::{test} -- {reason}\n");
    // Straight to the descriptor: libtest captures print!/eprint! only.
    let _ = std::io::stderr().write_all(line.as_bytes());
    // And in the test's own captured output, for --nocapture and failures.
    println!("{kind}: {reason}");
}

/// The test skips (the caller returns right after): nothing more of it ran.
pub fn skip(reason: &str) {
    marker("CAPSULE-SKIP", reason);
}

/// A part of the test did not run here; the rest still asserts.
pub fn skip_part(reason: &str) {
    marker("CAPSULE-SKIP-PART", reason);
}
