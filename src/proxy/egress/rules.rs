//! Paths as rules see them, and the globs rules are written in.
//!
//! A request's path is normalised once, before any rule or credential binding looks
//! at it: percent-encoded unreserved characters (`A-Z a-z 0-9 - . _ ~`) are decoded,
//! other escapes are kept with upper-case hex. Anything an origin might read in more
//! than one way is refused, never guessed at: `.` and `..` segments (also encoded,
//! `%2e%2e`), empty segments (`//`), `;` parameters, an encoded `/` or `\` (`%2F`,
//! `%5C`), a literal `\`, a malformed escape, or a target that is not a path.
//!
//! One exception: where no `paths` rule applies to the host (no map entry with
//! `paths` and no credential with `paths` names it), an encoded `/` decides
//! nothing, so it is kept as `%2F` inside its segment ([`normalise_path_with`]):
//! npm names scoped packages `/@scope%2fname`.
//!
//! Globs: `/` separated segments; a segment `**` matches any number of segments (zero
//! too), `*` inside a segment matches any run of characters within one non-empty
//! segment (`*` alone: exactly one segment).

/// Why a path is refused.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum PathRefusal {
    NotAPath,
    DotSegment,
    EmptySegment,
    Parameters,
    EncodedSlash,
    Backslash,
    BadEscape,
}

impl PathRefusal {
    /// A sentence for the refusal's hint.
    pub fn describe(self) -> &'static str {
        match self {
            PathRefusal::NotAPath => "the request target is not a path starting with '/'",
            PathRefusal::DotSegment => "the path has a '.' or '..' segment (perhaps percent-encoded); send the resolved path",
            PathRefusal::EmptySegment => "the path has an empty segment ('//'); send it without",
            PathRefusal::Parameters => "the path has ';' parameters, which origins read differently; capsule refuses them",
            PathRefusal::EncodedSlash => "the path has an encoded '/' or '\\' (%2F, %5C), which origins read differently",
            PathRefusal::Backslash => "the path has a '\\', which some origins read as '/'",
            PathRefusal::BadEscape => "the path has a malformed percent escape",
        }
    }
}

fn hex(b: u8) -> Option<u8> {
    (b as char).to_digit(16).map(|d| d as u8)
}

fn unreserved(b: u8) -> bool {
    b.is_ascii_alphanumeric() || matches!(b, b'-' | b'.' | b'_' | b'~')
}

/// Decode escapes of unreserved characters, upper-case the others' hex, refuse the
/// ambiguous ones (`%2F` kept, as `%2F`, when `slash_ok`).
fn decode_unreserved(path: &str, slash_ok: bool) -> Result<String, PathRefusal> {
    let b = path.as_bytes();
    let mut out = String::with_capacity(b.len());
    let mut i = 0;
    while i < b.len() {
        match b[i] {
            b'%' => {
                let (Some(h), Some(l)) = (
                    b.get(i + 1).copied().and_then(hex),
                    b.get(i + 2).copied().and_then(hex),
                ) else {
                    return Err(PathRefusal::BadEscape);
                };
                let c = h * 16 + l;
                if (c == b'/' && !slash_ok) || c == b'\\' {
                    return Err(PathRefusal::EncodedSlash);
                }
                if unreserved(c) {
                    out.push(c as char);
                } else {
                    out.push_str(&format!("%{c:02X}"));
                }
                i += 3;
            }
            b'\\' => return Err(PathRefusal::Backslash),
            b';' => return Err(PathRefusal::Parameters),
            c if c.is_ascii_graphic() => {
                out.push(c as char);
                i += 1;
            }
            _ => return Err(PathRefusal::NotAPath),
        }
    }
    Ok(out)
}

/// The path (without its query) as rules see it; see the module's comment.
pub fn normalise_path(path: &str) -> Result<String, PathRefusal> {
    normalise_path_with(path, false)
}

/// [`normalise_path`], an encoded `/` kept inside its segment when `slash_ok`
/// (no path rule applies: it decides nothing).
pub fn normalise_path_with(path: &str, slash_ok: bool) -> Result<String, PathRefusal> {
    if !path.starts_with('/') {
        return Err(PathRefusal::NotAPath);
    }
    let decoded = decode_unreserved(path, slash_ok)?;
    let segments: Vec<&str> = decoded[1..].split('/').collect();
    let last = segments.len() - 1;
    for (i, seg) in segments.iter().enumerate() {
        match *seg {
            "." | ".." => return Err(PathRefusal::DotSegment),
            // A trailing slash (and `/` itself) leaves one empty last segment.
            "" if i != last => return Err(PathRefusal::EmptySegment),
            _ => {}
        }
    }
    Ok(decoded)
}

/// Does `segment` match `pattern`, where `*` matches any run of characters?
fn segment_matches(pattern: &str, segment: &str) -> bool {
    if segment.is_empty() {
        return pattern.is_empty();
    }
    let (p, s) = (pattern.as_bytes(), segment.as_bytes());
    // dp[j]: pattern[..i] matches segment[..j].
    let mut dp = vec![false; s.len() + 1];
    dp[0] = true;
    for &pc in p {
        let mut next = vec![false; s.len() + 1];
        if pc == b'*' {
            let mut any = false;
            for j in 0..=s.len() {
                any |= dp[j];
                next[j] = any;
            }
        } else {
            for j in 1..=s.len() {
                next[j] = dp[j - 1] && s[j - 1] == pc;
            }
        }
        dp = next;
    }
    dp[s.len()]
}

/// Does the normalised `path` match the glob `pattern`?
pub fn glob_matches(pattern: &str, path: &str) -> bool {
    let (Some(pattern), Some(path)) = (pattern.strip_prefix('/'), path.strip_prefix('/')) else {
        return false;
    };
    let p: Vec<&str> = pattern.split('/').collect();
    let s: Vec<&str> = path.split('/').collect();
    // dp[j]: p[..i] matches s[..j]; linear in both, however many `**`.
    let mut dp = vec![false; s.len() + 1];
    dp[0] = true;
    for seg in &p {
        let mut next = vec![false; s.len() + 1];
        if *seg == "**" {
            let mut any = false;
            for j in 0..=s.len() {
                any |= dp[j];
                next[j] = any;
            }
        } else {
            for j in 1..=s.len() {
                next[j] = dp[j - 1] && segment_matches(seg, s[j - 1]);
            }
        }
        dp = next;
    }
    dp[s.len()]
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn normalisation_table() {
        use PathRefusal::*;
        let cases: &[(&str, Result<&str, PathRefusal>)] = &[
            ("/", Ok("/")),
            ("/repos/acme/widget", Ok("/repos/acme/widget")),
            ("/a/b/", Ok("/a/b/")),
            ("/%61%62c", Ok("/abc")),
            ("/%7e%7E", Ok("/~~")),
            ("/a%20b", Ok("/a%20b")),
            ("/a%2fb", Err(EncodedSlash)),
            ("/a%2Fb", Err(EncodedSlash)),
            ("/a%5cb", Err(EncodedSlash)),
            ("/a\\b", Err(Backslash)),
            ("/a/../b", Err(DotSegment)),
            ("/a/./b", Err(DotSegment)),
            ("/a/%2e%2e/b", Err(DotSegment)),
            ("/a/%2E/b", Err(DotSegment)),
            ("/a/.%2e", Err(DotSegment)),
            ("/..", Err(DotSegment)),
            ("/a//b", Err(EmptySegment)),
            ("//a", Err(EmptySegment)),
            ("/a;b=c/d", Err(Parameters)),
            ("/a%3Bb", Ok("/a%3Bb")),
            ("/a%zz", Err(BadEscape)),
            ("/a%2", Err(BadEscape)),
            ("*", Err(NotAPath)),
            ("a/b", Err(NotAPath)),
            ("", Err(NotAPath)),
            // Case is kept: paths are case-sensitive.
            ("/Repos/ACME", Ok("/Repos/ACME")),
            ("/a.b/c..d/...", Ok("/a.b/c..d/...")),
        ];
        // Kept where no path rule applies (npm's scoped packages); %5C never.
        assert_eq!(
            normalise_path_with("/@acme%2fwidget", true).as_deref(),
            Ok("/@acme%2Fwidget")
        );
        assert_eq!(normalise_path_with("/a%5cb", true), Err(EncodedSlash));
        assert_eq!(
            normalise_path_with("/a%2F..%2Fb", true).as_deref(),
            Ok("/a%2F..%2Fb")
        );
        for (input, want) in cases {
            let got = normalise_path(input);
            assert_eq!(got.as_deref(), want.as_ref().map(|s| *s), "{input:?}");
        }
    }

    #[test]
    fn globs() {
        let yes = [
            ("/repos/acme/widget/**", "/repos/acme/widget"),
            ("/repos/acme/widget/**", "/repos/acme/widget/issues/1"),
            ("/repos/acme/widget/**", "/repos/acme/widget/"),
            ("/repos/*/widget", "/repos/acme/widget"),
            ("/repos/a*e/*", "/repos/acme/x"),
            ("/**", "/"),
            ("/**", "/any/thing"),
            ("/**/raw", "/a/b/raw"),
            ("/", "/"),
            ("/v1/*.json", "/v1/index.json"),
        ];
        let no = [
            ("/repos/acme/widget/**", "/repos/acme/widgets"),
            ("/repos/acme/widget/**", "/repos/acme"),
            ("/repos/*/widget", "/repos/a/b/widget"),
            ("/repos/*", "/repos/"),
            ("/repos/*", "/repos"),
            ("/a", "/a/"),
            ("/A", "/a"),
            ("/**/raw", "/a/b/raw/x"),
            ("relative", "/relative"),
        ];
        for (p, s) in yes {
            assert!(glob_matches(p, s), "{p} should match {s}");
        }
        for (p, s) in no {
            assert!(!glob_matches(p, s), "{p} should not match {s}");
        }
    }

    #[test]
    fn many_double_stars_stay_linear() {
        let pattern = "/**/a/**/a/**/a/**/a/**/b";
        let path = format!("/{}", vec!["a"; 2000].join("/"));
        assert!(!glob_matches(pattern, &path));
    }
}
