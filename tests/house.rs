//! The house rules of `src/`, checked on the source itself (issue 24):
//!
//! * layers call only downward: no import circle between files of the
//!   crate, and `src/sys/` (the raw-syscall layer, at the bottom) imports
//!   nothing from the rest of the crate;
//! * no function longer than [`MAX_FN_LINES`] lines, except generated tables
//!   and the entries of [`LONG_FN_ALLOWLIST`].
//!
//! The source is read from `CAPSULE_TEST_ROOT/src` (the staged copy of
//! another user's pass, when it holds the source) or else the checkout
//! (`CARGO_MANIFEST_DIR`). Where neither is readable (the unprivileged pass
//! stages no source) the checks say so and pass: the source is the same in
//! every pass, and the root pass reads it.

mod common;

use std::collections::{BTreeMap, BTreeSet};
use std::path::{Path, PathBuf};

/// The longest function allowed in `src/`, in lines (signature to closing brace).
const MAX_FN_LINES: usize = 100;

/// Files whose functions may be long: generated tables and test-table data.
const GENERATED: &[&str] = &[
    "sandbox/seccomp/precompiled_x86_64.rs",
    "sandbox/seccomp/precompiled_aarch64.rs",
    "sandbox/seccomp/syscalls_x86_64.rs",
    "sandbox/seccomp/syscalls_aarch64.rs",
];

/// Functions allowed to be longer than [`MAX_FN_LINES`] for now, as
/// `file:function` (file relative to `src/`; `*` for every function of a file).
const LONG_FN_ALLOWLIST: &[&str] = &[
    // Test-table data: one table of cases per test.
    "sandbox/landlock/tests.rs:read_write_exec_are_enforced",
    "sandbox/seccomp/equivalence.rs:compact_program_decides_like_the_three_filters",
    "sandbox/seccomp/signals.rs:the_network_part_per_variant_on_both_architectures",
];

fn src_dir() -> Option<PathBuf> {
    let mut roots = Vec::new();
    if let Some(r) = std::env::var_os("CAPSULE_TEST_ROOT") {
        roots.push(PathBuf::from(r));
    }
    roots.push(PathBuf::from(env!("CARGO_MANIFEST_DIR")));
    roots
        .into_iter()
        .map(|r| r.join("src"))
        .find(|s| std::fs::read_to_string(s.join("lib.rs")).is_ok())
}

/// Every `.rs` file under `dir`, relative to it, with its text.
fn sources(dir: &Path) -> BTreeMap<String, String> {
    fn walk(root: &Path, dir: &Path, out: &mut BTreeMap<String, String>) {
        let mut entries: Vec<_> = std::fs::read_dir(dir)
            .unwrap_or_else(|e| panic!("reading {}: {e}", dir.display()))
            .flatten()
            .map(|e| e.path())
            .collect();
        entries.sort();
        for p in entries {
            if p.is_dir() {
                walk(root, &p, out);
            } else if p.extension().is_some_and(|x| x == "rs") {
                let rel = p.strip_prefix(root).unwrap().to_string_lossy().into_owned();
                let text = std::fs::read_to_string(&p)
                    .unwrap_or_else(|e| panic!("reading {}: {e}", p.display()));
                out.insert(rel, text);
            }
        }
    }
    let mut out = BTreeMap::new();
    walk(dir, dir, &mut out);
    out
}

/// The text without comments, string and char literals (blanked with
/// spaces, newlines kept, so line numbers hold).
fn code_only(text: &str) -> String {
    let b: Vec<char> = text.chars().collect();
    let mut out = String::with_capacity(text.len());
    let mut i = 0;
    let blank = |c: char| if c == '\n' { '\n' } else { ' ' };
    while i < b.len() {
        let c = b[i];
        let next = b.get(i + 1).copied();
        if c == '/' && next == Some('/') {
            while i < b.len() && b[i] != '\n' {
                out.push(' ');
                i += 1;
            }
        } else if c == '/' && next == Some('*') {
            let mut depth = 0;
            while i < b.len() {
                if b[i] == '/' && b.get(i + 1) == Some(&'*') {
                    depth += 1;
                    out.push_str("  ");
                    i += 2;
                } else if b[i] == '*' && b.get(i + 1) == Some(&'/') {
                    depth -= 1;
                    out.push_str("  ");
                    i += 2;
                    if depth == 0 {
                        break;
                    }
                } else {
                    out.push(blank(b[i]));
                    i += 1;
                }
            }
        } else if c == 'r' && (next == Some('"') || next == Some('#')) && !ident_char(prev(&b, i)) {
            // A raw string: r"..." or r#"..."#.
            let mut j = i + 1;
            let mut hashes = 0;
            while b.get(j) == Some(&'#') {
                hashes += 1;
                j += 1;
            }
            if b.get(j) != Some(&'"') {
                out.push(c);
                i += 1;
                continue;
            }
            j += 1;
            loop {
                if j >= b.len() {
                    break;
                }
                if b[j] == '"' && (0..hashes).all(|k| b.get(j + 1 + k) == Some(&'#')) {
                    j += 1 + hashes;
                    break;
                }
                j += 1;
            }
            for &ch in &b[i..j.min(b.len())] {
                out.push(blank(ch));
            }
            i = j;
        } else if c == '"' {
            out.push(' ');
            i += 1;
            while i < b.len() && b[i] != '"' {
                if b[i] == '\\' {
                    out.push(' ');
                    i += 1;
                }
                if i < b.len() {
                    out.push(blank(b[i]));
                    i += 1;
                }
            }
            out.push(' ');
            i += 1;
        } else if c == '\'' {
            // A char literal ('x', '\n', '\u{..}') or a lifetime ('a).
            let close = if next == Some('\\') {
                (i + 2..b.len().min(i + 12)).find(|&j| b[j] == '\'')
            } else if b.get(i + 2) == Some(&'\'') {
                Some(i + 2)
            } else {
                None
            };
            match close {
                Some(j) => {
                    for _ in i..=j {
                        out.push(' ');
                    }
                    i = j + 1;
                }
                None => {
                    out.push(c);
                    i += 1;
                }
            }
        } else {
            out.push(c);
            i += 1;
        }
    }
    out
}

fn prev(b: &[char], i: usize) -> char {
    if i == 0 {
        ' '
    } else {
        b[i - 1]
    }
}

fn ident_char(c: char) -> bool {
    c.is_ascii_alphanumeric() || c == '_'
}

/// `code` without its `#[cfg(test)]` modules (test code may reach anywhere).
fn without_test_modules(code: &str) -> String {
    let mut out = String::with_capacity(code.len());
    let mut rest = code;
    while let Some(at) = rest.find("#[cfg(test)]") {
        let after = &rest[at + "#[cfg(test)]".len()..];
        let trimmed = after.trim_start();
        // `#[cfg(test)] #[path = ...] mod x;` or `mod x { ... }`
        let is_mod = trimmed.starts_with("mod ")
            || trimmed.starts_with("pub mod ")
            || trimmed.starts_with("pub(super) mod ")
            || trimmed.starts_with("pub(crate) mod ")
            || trimmed.starts_with("#[path");
        if !is_mod {
            out.push_str(&rest[..at + 1]);
            rest = &rest[at + 1..];
            continue;
        }
        out.push_str(&rest[..at]);
        let start = at + "#[cfg(test)]".len();
        let brace = rest[start..].find('{');
        let semi = rest[start..].find(';');
        let end = match (brace, semi) {
            (Some(bi), Some(si)) if si < bi => start + si + 1,
            (Some(bi), _) => {
                let mut depth = 0;
                let mut end = rest.len();
                for (k, ch) in rest[start + bi..].char_indices() {
                    match ch {
                        '{' => depth += 1,
                        '}' => {
                            depth -= 1;
                            if depth == 0 {
                                end = start + bi + k + 1;
                                break;
                            }
                        }
                        _ => {}
                    }
                }
                end
            }
            (None, Some(si)) => start + si + 1,
            (None, None) => rest.len(),
        };
        // Keep the line count.
        out.extend(rest[at..end].chars().filter(|&c| c == '\n'));
        rest = &rest[end..];
    }
    out.push_str(rest);
    out
}

/// The module path of each file (`guards/judge.rs` -> `["guards", "judge"]`),
/// `#[path]` files included under the name they are declared with.
fn module_paths(files: &BTreeMap<String, String>) -> BTreeMap<String, Vec<String>> {
    let mut out = BTreeMap::new();
    for rel in files.keys() {
        let mut segs: Vec<String> = rel
            .trim_end_matches(".rs")
            .split('/')
            .map(str::to_string)
            .collect();
        if segs.last().is_some_and(|s| s == "mod" || s == "lib") {
            segs.pop();
        }
        if rel == "main.rs" {
            continue;
        }
        out.insert(rel.clone(), segs);
    }
    // `#[path = "x.rs"] mod name;`: x.rs is `name` under the declaring file.
    for (rel, text) in files {
        let lines: Vec<&str> = text.lines().collect();
        for (i, l) in lines.iter().enumerate() {
            let Some(p) = l.trim().strip_prefix("#[path = \"") else {
                continue;
            };
            let target = p.trim_end_matches("\"]");
            let Some(decl) = lines[i + 1..].iter().find(|l| l.contains("mod ")) else {
                continue;
            };
            let name = decl
                .split("mod ")
                .nth(1)
                .unwrap()
                .trim_end_matches(';')
                .trim();
            let dir = Path::new(rel).parent().unwrap();
            let file = dir.join(target).to_string_lossy().into_owned();
            let mut segs = out.get(rel).cloned().unwrap_or_default();
            segs.push(name.to_string());
            out.insert(file, segs);
        }
    }
    out
}

/// Each `crate::`/`super::`/`self::`/child-module path in `code`, expanded
/// (`use a::{b, c::d}` gives `a::b` and `a::c::d`), as absolute segments.
fn paths_in(code: &str, me: &[String], children: &BTreeSet<String>) -> Vec<Vec<String>> {
    let mut out = Vec::new();
    let chars: Vec<char> = code.chars().collect();
    let mut i = 0;
    while i < chars.len() {
        if !ident_char(chars[i]) || (i > 0 && (ident_char(chars[i - 1]) || chars[i - 1] == ':')) {
            i += 1;
            continue;
        }
        // A path starts here: read `ident(::ident|::{...})*`.
        let (tree, end) = read_path(&chars, i);
        i = end.max(i + 1);
        for p in expand(&tree) {
            let first = p.first().map(String::as_str).unwrap_or("");
            let abs = match first {
                "crate" => p[1..].to_vec(),
                // `super` is the parent module, whether the file is x.rs or x/mod.rs.
                "super" => {
                    let ups = p.iter().take_while(|s| *s == "super").count();
                    let mut b = me[..me.len().saturating_sub(ups)].to_vec();
                    b.extend(p[ups..].iter().cloned());
                    b
                }
                "self" => {
                    let mut b = me.to_vec();
                    b.extend(p[1..].iter().cloned());
                    b
                }
                c if children.contains(c) && p.len() > 1 => {
                    let mut b = me.to_vec();
                    b.extend(p.iter().cloned());
                    b
                }
                _ => continue,
            };
            out.push(abs);
        }
    }
    out
}

/// A path as written, braces kept as nested lists.
#[derive(Debug)]
enum Tree {
    Seg(String, Vec<Tree>),
    Group(Vec<Tree>),
}

fn read_path(c: &[char], start: usize) -> (Vec<Tree>, usize) {
    let mut segs = Vec::new();
    let mut i = start;
    loop {
        let s = i;
        while i < c.len() && ident_char(c[i]) {
            i += 1;
        }
        if i == s {
            break;
        }
        segs.push(c[s..i].iter().collect::<String>());
        let j = skip_ws(c, i);
        if c.get(j) == Some(&':') && c.get(j + 1) == Some(&':') {
            i = skip_ws(c, j + 2);
            if c.get(i) == Some(&'{') {
                let (group, end) = read_group(c, i + 1);
                return (nest(segs, Some(group)), end);
            }
            if c.get(i) == Some(&'*') || c.get(i) == Some(&'<') {
                break;
            }
            continue;
        }
        break;
    }
    (nest(segs, None), i)
}

fn nest(segs: Vec<String>, group: Option<Tree>) -> Vec<Tree> {
    let mut tail: Vec<Tree> = group.into_iter().collect();
    for s in segs.into_iter().rev() {
        tail = vec![Tree::Seg(s, tail)];
    }
    tail
}

fn read_group(c: &[char], start: usize) -> (Tree, usize) {
    let mut items = Vec::new();
    let mut i = start;
    loop {
        i = skip_ws(c, i);
        match c.get(i) {
            None => break,
            Some('}') => {
                i += 1;
                break;
            }
            Some(',') => i += 1,
            Some('{') => {
                let (g, end) = read_group(c, i + 1);
                items.push(g);
                i = end;
            }
            Some(ch) if ident_char(*ch) => {
                let (t, end) = read_path(c, i);
                items.extend(t);
                i = end;
                // `as alias`
                let j = skip_ws(c, i);
                if c[j..].starts_with(&['a', 's', ' ']) {
                    let mut k = skip_ws(c, j + 2);
                    while k < c.len() && ident_char(c[k]) {
                        k += 1;
                    }
                    i = k;
                }
            }
            Some(_) => i += 1,
        }
    }
    (Tree::Group(items), i)
}

fn skip_ws(c: &[char], mut i: usize) -> usize {
    while i < c.len() && c[i].is_whitespace() {
        i += 1;
    }
    i
}

fn expand(trees: &[Tree]) -> Vec<Vec<String>> {
    let mut out = Vec::new();
    for t in trees {
        match t {
            Tree::Seg(s, rest) => {
                let tails = expand(rest);
                if tails.is_empty() {
                    out.push(vec![s.clone()]);
                }
                for mut tail in tails {
                    if tail.first().is_some_and(|f| f == "self") {
                        tail.remove(0);
                    }
                    let mut p = vec![s.clone()];
                    p.extend(tail);
                    out.push(p);
                }
            }
            Tree::Group(items) => {
                for i in items {
                    out.extend(expand(std::slice::from_ref(i)));
                }
            }
        }
    }
    out
}

/// The file-level import graph of `src/` (test modules left out).
fn import_graph(files: &BTreeMap<String, String>) -> BTreeMap<String, BTreeSet<String>> {
    let mods = module_paths(files);
    let by_path: BTreeMap<Vec<String>, String> =
        mods.iter().map(|(f, p)| (p.clone(), f.clone())).collect();
    let mut graph = BTreeMap::new();
    for (rel, text) in files {
        let Some(me) = mods.get(rel) else { continue };
        // Test-only files (`#[cfg(test)] #[path = "x_tests.rs"] mod tests;`).
        if rel.ends_with("_tests.rs") {
            continue;
        }
        // The file's child modules, declared with `mod x;`.
        let children: BTreeSet<String> = text
            .lines()
            .filter_map(|l| {
                let l = l.trim();
                let l = l
                    .strip_prefix("pub ")
                    .or_else(|| l.strip_prefix("pub(crate) "))
                    .unwrap_or(l);
                l.strip_prefix("mod ")
                    .and_then(|m| m.strip_suffix(';'))
                    .map(str::to_string)
            })
            .collect();
        let code = without_test_modules(&code_only(text));
        let mut edges = BTreeSet::new();
        for p in paths_in(&code, me, &children) {
            // The deepest file the path reaches.
            let mut target = None;
            for n in (0..=p.len()).rev() {
                if let Some(f) = by_path.get(&p[..n]) {
                    target = Some(f.clone());
                    break;
                }
            }
            if let Some(t) = target {
                // A file may use what its enclosing modules define (their
                // mod.rs is the module's own front): only sibling and
                // cross-module edges can make a circle.
                let ancestor = t == "lib.rs"
                    || t.strip_suffix("mod.rs")
                        .is_some_and(|dir| rel.starts_with(dir))
                    || files_declaring(&t, rel, &mods);
                if &t != rel && !ancestor {
                    edges.insert(t);
                }
            }
        }
        graph.insert(rel.clone(), edges);
    }
    graph
}

/// Whether `file` is a `#[path]` file declared by `decl` (a table of it: its part).
fn files_declaring(decl: &str, file: &str, mods: &BTreeMap<String, Vec<String>>) -> bool {
    match (mods.get(decl), mods.get(file)) {
        (Some(d), Some(f)) => f.len() == d.len() + 1 && f.starts_with(d),
        _ => false,
    }
}

/// The circles of `graph`: its strongly connected components of more than one file.
fn circles(graph: &BTreeMap<String, BTreeSet<String>>) -> Vec<Vec<String>> {
    // Tarjan, iteratively small enough for a few hundred files: recursion is fine.
    struct T<'a> {
        g: &'a BTreeMap<String, BTreeSet<String>>,
        index: BTreeMap<&'a str, usize>,
        low: BTreeMap<&'a str, usize>,
        stack: Vec<&'a str>,
        on: BTreeSet<&'a str>,
        next: usize,
        out: Vec<Vec<String>>,
    }
    fn visit<'a>(t: &mut T<'a>, v: &'a str) {
        t.index.insert(v, t.next);
        t.low.insert(v, t.next);
        t.next += 1;
        t.stack.push(v);
        t.on.insert(v);
        let g = t.g;
        for w in g.get(v).into_iter().flatten() {
            let w = w.as_str();
            if !g.contains_key(w) {
                continue;
            }
            if !t.index.contains_key(w) {
                visit(t, w);
                let lw = t.low[w];
                let lv = t.low.get_mut(v).unwrap();
                *lv = (*lv).min(lw);
            } else if t.on.contains(w) {
                let iw = t.index[w];
                let lv = t.low.get_mut(v).unwrap();
                *lv = (*lv).min(iw);
            }
        }
        if t.low[v] == t.index[v] {
            let mut comp = Vec::new();
            loop {
                let w = t.stack.pop().unwrap();
                t.on.remove(w);
                comp.push(w.to_string());
                if w == v {
                    break;
                }
            }
            if comp.len() > 1 {
                comp.sort();
                t.out.push(comp);
            }
        }
    }
    let mut t = T {
        g: graph,
        index: BTreeMap::new(),
        low: BTreeMap::new(),
        stack: Vec::new(),
        on: BTreeSet::new(),
        next: 0,
        out: Vec::new(),
    };
    for v in graph.keys() {
        if !t.index.contains_key(v.as_str()) {
            visit(&mut t, v);
        }
    }
    t.out
}

/// Functions of `code` (comments and literals blanked, rustfmt layout) with
/// their length in lines: (name, first line, lines).
fn functions(code: &str) -> Vec<(String, usize, usize)> {
    let lines: Vec<&str> = code.lines().collect();
    let mut out = Vec::new();
    for (i, l) in lines.iter().enumerate() {
        let t = l.trim_start();
        let indent = l.len() - t.len();
        let Some(at) = fn_keyword(t) else { continue };
        let name: String = t[at + 3..].chars().take_while(|&c| ident_char(c)).collect();
        if name.is_empty() {
            continue;
        }
        // The signature runs to the line ending in `{` (a body) or `;` (none).
        let mut j = i;
        let body = loop {
            let s = lines[j].trim_end();
            if s.ends_with('{') {
                break true;
            }
            if s.ends_with(';') || j + 1 >= lines.len() {
                break false;
            }
            j += 1;
        };
        if !body {
            continue;
        }
        // rustfmt closes the body at the fn's own indentation.
        let close = " ".repeat(indent) + "}";
        let end = (j..lines.len())
            .find(|&k| lines[k].trim_end() == close)
            .unwrap_or(lines.len() - 1);
        out.push((name, i + 1, end - i + 1));
    }
    out
}

/// Where `fn ` starts in a line that declares a function, if it does.
fn fn_keyword(t: &str) -> Option<usize> {
    let mut rest = t;
    let mut at = 0;
    for prefix in [
        "pub(crate) ",
        "pub(super) ",
        "pub(in crate::guards) ",
        "pub ",
        "const ",
        "async ",
        "unsafe ",
        "extern \"C\" ",
    ] {
        if let Some(r) = rest.strip_prefix(prefix) {
            at += prefix.len();
            rest = r;
        }
    }
    rest.starts_with("fn ").then_some(at)
}

fn allowed_long(file: &str, name: &str) -> bool {
    GENERATED.contains(&file)
        || LONG_FN_ALLOWLIST.iter().any(|a| {
            let (f, n) = a.split_once(':').unwrap_or((a, "*"));
            let file_ok = match f.strip_suffix('*') {
                Some(dir) => file.starts_with(dir),
                None => f == file,
            };
            file_ok && (n == "*" || n == name)
        })
}

#[test]
fn no_import_circle_between_files_and_sys_imports_nothing_above_it() {
    let Some(src) = src_dir() else {
        common::skip("no readable source tree here (the root pass checks it)");
        return;
    };
    let files = sources(&src);
    assert!(files.len() > 50, "too few files under {}", src.display());
    let graph = import_graph(&files);
    // The checker sees what it should: a known downward edge.
    assert!(
        graph["supervisor/mod.rs"].contains("plan/mod.rs"),
        "the import graph misses supervisor -> plan: {:?}",
        graph["supervisor/mod.rs"]
    );
    let mut problems = Vec::new();
    for c in circles(&graph) {
        let edges: Vec<String> = c
            .iter()
            .flat_map(|f| {
                graph[f]
                    .iter()
                    .filter(|t| c.contains(t))
                    .map(move |t| format!("{f} -> {t}"))
            })
            .collect();
        problems.push(format!("import circle: {}", edges.join(", ")));
    }
    for (file, edges) in &graph {
        if !file.starts_with("sys/") {
            continue;
        }
        for t in edges {
            if !t.starts_with("sys/") && t != "lib.rs" {
                problems.push(format!(
                    "src/{file} imports src/{t}: sys/ must import nothing above it"
                ));
            }
        }
    }
    assert!(problems.is_empty(), "\n{}", problems.join("\n"));
}

#[test]
fn no_function_in_src_is_longer_than_a_hundred_lines() {
    let Some(src) = src_dir() else {
        common::skip("no readable source tree here (the root pass checks it)");
        return;
    };
    let files = sources(&src);
    let mut long = Vec::new();
    let mut seen_allowed = BTreeSet::new();
    for (rel, text) in &files {
        for (name, line, len) in functions(&code_only(text)) {
            if len <= MAX_FN_LINES {
                continue;
            }
            if allowed_long(rel, &name) {
                seen_allowed.insert(format!("{rel}:{name}"));
                continue;
            }
            long.push(format!("src/{rel}:{line} fn {name}: {len} lines"));
        }
    }
    // An entry naming one function that is no longer long is stale: remove it.
    for a in LONG_FN_ALLOWLIST {
        if !a.ends_with('*') && !seen_allowed.contains(*a) {
            long.push(format!(
                "allowlist entry {a}: no such long function any more (remove the entry)"
            ));
        }
    }
    assert!(
        long.is_empty(),
        "functions longer than {MAX_FN_LINES} lines (split them into named steps):\n{}",
        long.join("\n")
    );
}

#[test]
fn the_checkers_see_what_they_must() {
    // A long function is found, with its length.
    let mut body = String::from("pub fn long(x: u32) -> u32 {\n");
    for _ in 0..120 {
        body.push_str("    let _ = x;\n");
    }
    body.push_str("    x\n}\n\nfn short() {}\n");
    let f = functions(&code_only(&body));
    assert_eq!(f[0], ("long".to_string(), 1, 123));
    // A circle through `super::` and `crate::` is found; comments and strings are not paths.
    let mut files = BTreeMap::new();
    files.insert("lib.rs".to_string(), "mod a;\n".to_string());
    files.insert(
        "a/mod.rs".to_string(),
        "pub mod x;\npub mod y;\n".to_string(),
    );
    files.insert(
        "a/x.rs".to_string(),
        "use super::y::Y;\n// crate::b\n".to_string(),
    );
    files.insert(
        "a/y.rs".to_string(),
        "fn f() { crate::a::x::g(); let s = \"crate::lib\"; }\n".to_string(),
    );
    let g = import_graph(&files);
    assert_eq!(g["a/x.rs"], BTreeSet::from(["a/y.rs".to_string()]));
    assert_eq!(g["a/y.rs"], BTreeSet::from(["a/x.rs".to_string()]));
    assert_eq!(
        circles(&g),
        vec![vec!["a/x.rs".to_string(), "a/y.rs".to_string()]]
    );
    // Brace groups expand; test modules are left out.
    files.insert(
        "a/y.rs".to_string(),
        "use crate::{a::{x, y::Y as Z}};\n#[cfg(test)]\nmod tests {\n    use super::super::x::T;\n}\n".to_string(),
    );
    files.insert("a/x.rs".to_string(), "pub fn g() {}\n".to_string());
    let g = import_graph(&files);
    assert_eq!(g["a/y.rs"], BTreeSet::from(["a/x.rs".to_string()]));
    assert!(circles(&g).is_empty());
}
