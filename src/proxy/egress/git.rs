//! Git smart-HTTP rules (issue #40, contract section 8): a host whose entry has
//! `git:` rules passes only `GET <repo>/info/refs?service=git-upload-pack|git-receive-pack`,
//! `POST <repo>/git-upload-pack` and `POST <repo>/git-receive-pack`, for the
//! repositories named; a push is judged on its command list (the pkt-lines up
//! to the first flush, read before anything is forwarded) and refused whole
//! when any command is outside the rules, with git's own report-status so that
//! `git push` prints `! [remote rejected] REF (capsule: ...)`.
//!
//! Repositories are the path before the git suffix, without the leading `/`
//! and one optional `.git`, compared case-sensitively. A force push to an
//! allowed branch is the server's to judge (the proxy sees no history).

use bytes::{Bytes, BytesMut};
use http_body_util::BodyExt;
use hyper::body::{Frame, Incoming};
use hyper::header::{HeaderValue, CACHE_CONTROL, CONTENT_TYPE};
use hyper::Response;

use super::rules::glob_matches;
use crate::proxy::refusal::{bad_request, full, BoxError, ProxyBody};

/// The longest command list read before a push is judged.
pub const MAX_COMMANDS: usize = 1 << 20;

/// How much of a refused push's pack is read (and dropped) before answering,
/// so that the client reads the answer rather than a reset.
const MAX_DRAIN: usize = 64 << 20;

/// `git:` of one `allow_hosts` map entry.
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct GitRule {
    /// Repository globs that may be fetched.
    pub fetch: Vec<String>,
    /// What may be pushed; `None`: nothing.
    pub push: Option<GitPushRule>,
}

/// `git.push`.
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct GitPushRule {
    pub repos: Vec<String>,
    /// Globs of names under `refs/heads/`.
    pub branches: Vec<String>,
    /// Globs of names under `refs/tags/`.
    pub tags: Vec<String>,
    pub delete: bool,
}

/// The git service a request is for.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Service {
    UploadPack,
    ReceivePack,
}

/// One smart-HTTP request, recognised.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct GitRequest {
    /// `acme/widget` (no leading `/`, no `.git`).
    pub repo: String,
    pub service: Service,
    /// `GET info/refs` (the advertisement), else the `POST`.
    pub advertisement: bool,
}

/// Recognise a smart-HTTP request from its method, normalised path and query.
pub fn classify(method: &str, path: &str, query: Option<&str>) -> Option<GitRequest> {
    let (repo, service, advertisement) = if let Some(repo) = path.strip_suffix("/info/refs") {
        if method != "GET" {
            return None;
        }
        let service = match query? {
            "service=git-upload-pack" => Service::UploadPack,
            "service=git-receive-pack" => Service::ReceivePack,
            _ => return None,
        };
        (repo, service, true)
    } else {
        if method != "POST" || query.is_some() {
            return None;
        }
        if let Some(repo) = path.strip_suffix("/git-upload-pack") {
            (repo, Service::UploadPack, false)
        } else {
            (
                path.strip_suffix("/git-receive-pack")?,
                Service::ReceivePack,
                false,
            )
        }
    };
    let repo = repo.strip_prefix('/')?;
    let repo = repo.strip_suffix(".git").unwrap_or(repo);
    if repo.is_empty() || repo.ends_with('/') {
        return None;
    }
    Some(GitRequest {
        repo: repo.to_string(),
        service,
        advertisement,
    })
}

fn any_matches(patterns: &[String], name: &str) -> bool {
    patterns
        .iter()
        .any(|p| glob_matches(&format!("/{p}"), &format!("/{name}")))
}

/// Does `rule` (at `entry`, e.g. `network.allow_hosts[2]`) allow the request?
/// `Ok(true)`: a push whose commands must still be judged. `Err(hint)`: no.
pub fn check(
    rule: &GitRule,
    entry: &str,
    method: &str,
    path: &str,
    query: Option<&str>,
) -> Result<bool, String> {
    let Some(req) = classify(method, path, query) else {
        return Err(format!(
            "{entry}.git allows only git smart-HTTP requests (GET <repo>/info/refs?service=git-upload-pack|git-receive-pack, POST <repo>/git-upload-pack|git-receive-pack)"
        ));
    };
    match req.service {
        Service::UploadPack if any_matches(&rule.fetch, &req.repo) => Ok(false),
        Service::UploadPack => Err(format!(
            "{} is not in {entry}.git.fetch {:?}",
            req.repo, rule.fetch
        )),
        Service::ReceivePack => match &rule.push {
            Some(p) if any_matches(&p.repos, &req.repo) => Ok(!req.advertisement),
            Some(p) => Err(format!(
                "{} is not in {entry}.git.push.repos {:?}",
                req.repo, p.repos
            )),
            None => Err(format!("{entry}.git has no push")),
        },
    }
}

/// One receive-pack command.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Command {
    pub old: String,
    pub new: String,
    pub refname: String,
}

impl Command {
    pub fn is_delete(&self) -> bool {
        self.new.bytes().all(|b| b == b'0')
    }
}

/// The command list of a receive-pack request.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Commands {
    pub commands: Vec<Command>,
    /// The capabilities the client asked for (after the NUL).
    pub caps: Vec<String>,
    /// Bytes up to and including the flush.
    pub consumed: usize,
}

/// Why a command list is malformed (a 400).
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum PktError {
    #[error("a pkt-line length that is not 4 hex digits")]
    BadLength,
    #[error("a pkt-line length below 4 or above 65520")]
    LengthOutOfRange,
    #[error("a special packet (delim/response-end) in the command list")]
    Special,
    #[error("the body ended before the command list's flush")]
    Truncated,
    #[error("the command list is longer than capsule reads (1 MiB)")]
    TooLong,
    #[error("no command before the flush")]
    Empty,
    #[error("a command that is not `<old-id> <new-id> <ref>`")]
    BadCommand,
    #[error("a push certificate (push-cert), which capsule does not judge")]
    PushCert,
}

fn is_oid(s: &str) -> bool {
    (s.len() == 40 || s.len() == 64) && s.bytes().all(|b| matches!(b, b'0'..=b'9' | b'a'..=b'f'))
}

fn parse_line(payload: &[u8], out: &mut Commands) -> Result<(), PktError> {
    let payload = payload.strip_suffix(b"\n").unwrap_or(payload);
    let (cmd, caps) = match payload.iter().position(|&b| b == 0) {
        Some(i) => (&payload[..i], Some(&payload[i + 1..])),
        None => (payload, None),
    };
    let cmd = std::str::from_utf8(cmd).map_err(|_| PktError::BadCommand)?;
    if cmd.starts_with("push-cert") {
        return Err(PktError::PushCert);
    }
    if let Some(oid) = cmd.strip_prefix("shallow ") {
        if out.commands.is_empty() && caps.is_none() && is_oid(oid) {
            return Ok(());
        }
        return Err(PktError::BadCommand);
    }
    let mut it = cmd.splitn(3, ' ');
    let (Some(old), Some(new), Some(refname)) = (it.next(), it.next(), it.next()) else {
        return Err(PktError::BadCommand);
    };
    if !is_oid(old) || !is_oid(new) || old.len() != new.len() {
        return Err(PktError::BadCommand);
    }
    if refname.is_empty() || refname.bytes().any(|b| b <= b' ' || b == 0x7f) {
        return Err(PktError::BadCommand);
    }
    if let Some(caps) = caps {
        let caps = std::str::from_utf8(caps).map_err(|_| PktError::BadCommand)?;
        if caps.bytes().any(|b| b < b' ' || b == 0x7f) {
            return Err(PktError::BadCommand);
        }
        out.caps
            .extend(caps.split(' ').filter(|c| !c.is_empty()).map(String::from));
    }
    out.commands.push(Command {
        old: old.into(),
        new: new.into(),
        refname: refname.into(),
    });
    Ok(())
}

/// Parse the command list at the start of `buf`: `Ok(None)` when more bytes are
/// needed (`eof`: none will come, so that is [`PktError::Truncated`]).
pub fn parse_commands(buf: &[u8], eof: bool) -> Result<Option<Commands>, PktError> {
    let mut out = Commands {
        commands: Vec::new(),
        caps: Vec::new(),
        consumed: 0,
    };
    let mut at = 0;
    loop {
        if at > MAX_COMMANDS {
            return Err(PktError::TooLong);
        }
        let Some(head) = buf.get(at..at + 4) else {
            return if eof {
                Err(PktError::Truncated)
            } else {
                need_more(at)
            };
        };
        let len = std::str::from_utf8(head)
            .ok()
            .filter(|h| h.bytes().all(|b| b.is_ascii_hexdigit()))
            .and_then(|h| usize::from_str_radix(h, 16).ok())
            .ok_or(PktError::BadLength)?;
        match len {
            0 => {
                if out.commands.is_empty() {
                    return Err(PktError::Empty);
                }
                out.consumed = at + 4;
                return Ok(Some(out));
            }
            1 | 2 => return Err(PktError::Special),
            3 => return Err(PktError::LengthOutOfRange),
            n if n > 65520 => return Err(PktError::LengthOutOfRange),
            _ => {}
        }
        let Some(payload) = buf.get(at + 4..at + len) else {
            return if eof {
                Err(PktError::Truncated)
            } else {
                need_more(at + len)
            };
        };
        parse_line(payload, &mut out)?;
        at += len;
    }
}

fn need_more(upto: usize) -> Result<Option<Commands>, PktError> {
    if upto > MAX_COMMANDS + 4 {
        Err(PktError::TooLong)
    } else {
        Ok(None)
    }
}

/// Why `c` is refused by `push` (`None`: allowed).
fn refused_ref(c: &Command, push: &GitPushRule, entry: &str) -> Option<String> {
    let name = |list: &[String]| format!("{list:?}").replace('"', "");
    let (rest, patterns, key) = if let Some(b) = c.refname.strip_prefix("refs/heads/") {
        (b, &push.branches, "branches")
    } else if let Some(t) = c.refname.strip_prefix("refs/tags/") {
        (t, &push.tags, "tags")
    } else {
        return Some(format!(
            "{} is outside refs/heads/ and refs/tags/",
            c.refname
        ));
    };
    let clean = !rest.is_empty()
        && rest
            .split('/')
            .all(|s| !s.is_empty() && s != "." && s != "..");
    if !clean || !any_matches(patterns, rest) {
        return Some(format!(
            "{} is not in {entry}.git.push.{key} {}",
            c.refname,
            name(patterns)
        ));
    }
    if c.is_delete() && !push.delete {
        return Some(format!(
            "deleting {} needs {entry}.git.push.delete: true",
            c.refname
        ));
    }
    None
}

/// Judge a push's commands: `Err(reasons)`, one per command (`None` for one
/// allowed in itself), when any is refused.
pub fn judge(cmds: &Commands, push: &GitPushRule, entry: &str) -> Result<(), Vec<Option<String>>> {
    let reasons: Vec<Option<String>> = cmds
        .commands
        .iter()
        .map(|c| refused_ref(c, push, entry))
        .collect();
    if reasons.iter().all(Option::is_none) {
        Ok(())
    } else {
        Err(reasons)
    }
}

fn pkt(out: &mut Vec<u8>, payload: &[u8]) {
    out.extend_from_slice(format!("{:04x}", payload.len() + 4).as_bytes());
    out.extend_from_slice(payload);
}

/// git's report-status refusing every command (wrapped in side-band when asked
/// for), the body of a 200 `application/x-git-receive-pack-result`.
pub fn report_refusal(cmds: &Commands, reasons: &[Option<String>]) -> Vec<u8> {
    let first = reasons.iter().flatten().next().cloned().unwrap_or_default();
    let mut report = Vec::new();
    pkt(&mut report, b"unpack ok\n");
    for (c, r) in cmds.commands.iter().zip(reasons) {
        let why = match r {
            Some(r) => r.clone(),
            None => format!("the push is refused whole: {first}"),
        };
        let why: String = why.chars().filter(|c| !c.is_control()).take(900).collect();
        pkt(
            &mut report,
            format!("ng {} capsule: {why}\n", c.refname).as_bytes(),
        );
    }
    report.extend_from_slice(b"0000");
    let band = cmds
        .caps
        .iter()
        .any(|c| c == "side-band-64k" || c == "side-band");
    if !band {
        return report;
    }
    let max = if cmds.caps.iter().any(|c| c == "side-band-64k") {
        65515
    } else {
        995
    };
    let mut out = Vec::new();
    for chunk in report.chunks(max) {
        let mut p = Vec::with_capacity(chunk.len() + 1);
        p.push(1);
        p.extend_from_slice(chunk);
        pkt(&mut out, &p);
    }
    out.extend_from_slice(b"0000");
    out
}

/// What judging a push body gave.
pub enum Pushed {
    /// Allowed: the body to forward (the command bytes read, then the rest).
    Forward(ProxyBody),
    /// Refused (a git answer or a 400), and the first reason (for the record).
    Refused(Response<ProxyBody>, String),
}

/// Read a receive-pack body up to its command list's flush and judge it.
pub async fn judge_push(
    content_encoding: Option<&HeaderValue>,
    push: &GitPushRule,
    entry: &str,
    mut body: Incoming,
) -> Pushed {
    if content_encoding.is_some_and(|v| v.as_bytes() != b"identity") {
        return Pushed::Refused(
            bad_request("capsule judges a push by its commands and does not decode an encoded (gzip) receive-pack body"),
            "encoded receive-pack body".into(),
        );
    }
    let mut buf = BytesMut::new();
    let cmds = loop {
        let frame = match body.frame().await {
            Some(Ok(f)) => f,
            Some(Err(_)) => {
                return Pushed::Refused(bad_request("the push body failed"), "body".into())
            }
            None => match parse_commands(&buf, true) {
                Ok(Some(c)) => break c,
                Ok(None) | Err(_) => {
                    return malformed(PktError::Truncated);
                }
            },
        };
        if let Ok(data) = frame.into_data() {
            buf.extend_from_slice(&data);
        }
        match parse_commands(&buf, false) {
            Ok(Some(c)) => break c,
            Ok(None) => {}
            Err(e) => return malformed(e),
        }
    };
    if let Err(reasons) = judge(&cmds, push, entry) {
        let first = reasons.iter().flatten().next().cloned().unwrap_or_default();
        drain(body).await;
        let mut resp = Response::new(full(Bytes::from(report_refusal(&cmds, &reasons))));
        let h = resp.headers_mut();
        h.insert(
            CONTENT_TYPE,
            HeaderValue::from_static("application/x-git-receive-pack-result"),
        );
        h.insert(CACHE_CONTROL, HeaderValue::from_static("no-cache"));
        return Pushed::Refused(resp, first);
    }
    Pushed::Forward(
        Prefixed {
            head: Some(buf.freeze()),
            rest: body.map_err(BoxError::from).boxed(),
        }
        .boxed(),
    )
}

/// The bytes already read, then the rest of the body, unchanged.
struct Prefixed {
    head: Option<Bytes>,
    rest: ProxyBody,
}

impl hyper::body::Body for Prefixed {
    type Data = Bytes;
    type Error = BoxError;

    fn poll_frame(
        mut self: std::pin::Pin<&mut Self>,
        cx: &mut std::task::Context<'_>,
    ) -> std::task::Poll<Option<Result<Frame<Bytes>, BoxError>>> {
        if let Some(head) = self.head.take() {
            if !head.is_empty() {
                return std::task::Poll::Ready(Some(Ok(Frame::data(head))));
            }
        }
        std::pin::Pin::new(&mut self.rest).poll_frame(cx)
    }

    fn is_end_stream(&self) -> bool {
        self.head.is_none() && self.rest.is_end_stream()
    }

    fn size_hint(&self) -> hyper::body::SizeHint {
        let rest = self.rest.size_hint();
        let n = self.head.as_ref().map_or(0, |h| h.len() as u64);
        let mut hint = hyper::body::SizeHint::new();
        // The upper bound first: set_lower asserts lower <= upper.
        if let Some(u) = rest.upper() {
            hint.set_upper(u.saturating_add(n));
        }
        hint.set_lower(rest.lower().saturating_add(n));
        hint
    }
}

fn malformed(e: PktError) -> Pushed {
    let why = format!("malformed git-receive-pack body: {e}");
    Pushed::Refused(bad_request(&why), why)
}

/// Read and drop what is left of a refused push, within a bound of bytes and time.
async fn drain(mut body: Incoming) {
    let read = async {
        let mut n = 0usize;
        while let Some(Ok(f)) = body.frame().await {
            n += f.data_ref().map_or(0, Bytes::len);
            if n > MAX_DRAIN {
                break;
            }
        }
    };
    let _ = tokio::time::timeout(std::time::Duration::from_secs(30), read).await;
}

#[cfg(test)]
mod tests {
    use super::*;

    const Z: &str = "0000000000000000000000000000000000000000";
    const A: &str = "1111111111111111111111111111111111111111";

    fn line(s: &str) -> Vec<u8> {
        let mut v = Vec::new();
        pkt(&mut v, s.as_bytes());
        v
    }

    fn push() -> GitPushRule {
        GitPushRule {
            repos: vec!["acme/widget".into()],
            branches: vec!["agent/*".into()],
            tags: vec![],
            delete: false,
        }
    }

    #[test]
    fn classifies_smart_http_only() {
        let r = classify(
            "GET",
            "/acme/widget.git/info/refs",
            Some("service=git-upload-pack"),
        );
        assert_eq!(
            r,
            Some(GitRequest {
                repo: "acme/widget".into(),
                service: Service::UploadPack,
                advertisement: true
            })
        );
        assert!(classify("GET", "/acme/widget/git-receive-pack", None).is_none());
        assert!(classify("GET", "/acme/widget/info/refs", None).is_none());
        assert!(classify("GET", "/acme/widget/HEAD", None).is_none());
        assert!(classify("POST", "/git-receive-pack", None).is_none());
        assert!(classify("POST", "/a/git-receive-pack", Some("x=1")).is_none());
        let rule = GitRule {
            fetch: vec!["acme/*".into()],
            push: Some(push()),
        };
        let e = "network.allow_hosts[0]";
        assert_eq!(
            check(&rule, e, "POST", "/acme/other/git-upload-pack", None),
            Ok(false)
        );
        assert_eq!(
            check(&rule, e, "POST", "/acme/widget.git/git-receive-pack", None),
            Ok(true)
        );
        assert!(check(&rule, e, "POST", "/acme/other/git-receive-pack", None).is_err());
        assert!(check(&rule, e, "POST", "/Acme/widget/git-upload-pack", None).is_err());
        assert!(check(&rule, e, "POST", "/evil/x/git-upload-pack", None).is_err());
    }

    #[test]
    fn parses_commands_up_to_the_flush() {
        let mut b = line(&format!(
            "{Z} {A} refs/heads/agent/x\0report-status side-band-64k\n"
        ));
        b.extend(line(&format!("{A} {Z} refs/heads/old\n")));
        b.extend_from_slice(b"0000PACK\0\0\0\x02");
        let c = parse_commands(&b, false).unwrap().unwrap();
        assert_eq!(c.commands.len(), 2);
        assert_eq!(c.caps, ["report-status", "side-band-64k"]);
        assert_eq!(&b[c.consumed..c.consumed + 4], b"PACK");
        assert!(c.commands[1].is_delete());
        // Partial input asks for more; at the end it is truncated.
        assert_eq!(parse_commands(&b[..10], false), Ok(None));
        assert_eq!(parse_commands(&b[..10], true), Err(PktError::Truncated));
    }

    #[test]
    fn pkt_tricks_are_malformed() {
        // A length that lies long: the command never completes.
        let mut b = line(&format!("{Z} {A} refs/heads/agent/x\n"));
        b[..4].copy_from_slice(b"ffff");
        assert_eq!(parse_commands(&b, true), Err(PktError::LengthOutOfRange));
        b[..4].copy_from_slice(b"0fff");
        assert_eq!(parse_commands(&b, true), Err(PktError::Truncated));
        // A length that lies short cuts the ref: the rest is read as a length.
        let mut b = line(&format!("{Z} {A} refs/heads/agent/x\n"));
        b[..4].copy_from_slice(b"0060");
        assert!(parse_commands(&b, true).is_err());
        // Early flush: nothing before it.
        assert_eq!(parse_commands(b"0000", true), Err(PktError::Empty));
        // The pack before any flush.
        let mut b = line(&format!("{Z} {A} refs/heads/agent/x\n"));
        b.extend_from_slice(b"PACK\0\0\0\x02");
        assert_eq!(parse_commands(&b, true), Err(PktError::BadLength));
        assert_eq!(parse_commands(b"0001", true), Err(PktError::Special));
        assert_eq!(
            parse_commands(b"0003", true),
            Err(PktError::LengthOutOfRange)
        );
        // A second command smuggled in the capabilities.
        let b = line(&format!(
            "{Z} {A} refs/heads/agent/x\0report-status\n{Z} {A} refs/heads/main"
        ));
        assert_eq!(parse_commands(&b, true), Err(PktError::BadCommand));
        let b = line(&format!("{Z} {A} refs/heads/agent/x refs/heads/main\n"));
        assert_eq!(parse_commands(&b, true), Err(PktError::BadCommand));
        assert_eq!(
            parse_commands(&line("push-cert\0x\n"), true),
            Err(PktError::PushCert)
        );
    }

    #[test]
    fn a_command_after_the_pack_is_never_read() {
        let mut b = line(&format!("{Z} {A} refs/heads/agent/x\n"));
        b.extend_from_slice(b"0000PACK");
        b.extend(line(&format!("{A} {Z} refs/heads/main\n")));
        let c = parse_commands(&b, true).unwrap().unwrap();
        assert_eq!(c.commands.len(), 1);
        assert!(judge(&c, &push(), "e").is_ok());
    }

    #[test]
    fn oversize_is_refused() {
        let one = line(&format!("{A} {A} refs/heads/agent/{}\n", "x".repeat(60000)));
        let mut b = Vec::new();
        while b.len() <= MAX_COMMANDS + 8 {
            b.extend_from_slice(&one);
        }
        assert_eq!(parse_commands(&b, false), Err(PktError::TooLong));
    }

    #[test]
    fn prefixed_size_is_the_sum_without_panicking() {
        use hyper::body::Body;
        let b = Prefixed {
            head: Some(Bytes::from_static(b"abc")),
            rest: full(Bytes::from_static(b"de")),
        };
        assert_eq!(b.size_hint().exact(), Some(5));
        assert!(!b.is_end_stream());
    }

    #[test]
    fn judges_refs() {
        let cmd = |r: &str, new: &str| Commands {
            commands: vec![Command {
                old: A.into(),
                new: new.into(),
                refname: r.into(),
            }],
            caps: vec![],
            consumed: 0,
        };
        let p = push();
        assert!(judge(&cmd("refs/heads/agent/x", A), &p, "e").is_ok());
        for bad in [
            "refs/heads/main",
            "refs/tags/v1",
            "refs/notes/x",
            "refs/heads/agent/x/y",
            "refs/heads/agent/..",
        ] {
            let r = judge(&cmd(bad, A), &p, "e").unwrap_err();
            assert!(r[0].as_ref().unwrap().contains(bad), "{bad}: {r:?}");
        }
        let r = judge(&cmd("refs/heads/agent/x", Z), &p, "e").unwrap_err();
        assert!(r[0].as_ref().unwrap().contains("delete"));
    }

    #[test]
    fn refusal_is_report_status_in_side_band() {
        let mut c = Commands {
            commands: vec![Command {
                old: A.into(),
                new: A.into(),
                refname: "refs/heads/main".into(),
            }],
            caps: vec![],
            consumed: 0,
        };
        let reasons = vec![Some("no".to_string())];
        let plain = report_refusal(&c, &reasons);
        assert_eq!(
            plain,
            b"000eunpack ok\n0023ng refs/heads/main capsule: no\n0000".to_vec()
        );
        c.caps = vec!["side-band-64k".into()];
        let band = report_refusal(&c, &reasons);
        assert_eq!(&band[..5], b"003a\x01");
        assert_eq!(&band[5..band.len() - 4], &plain[..]);
        assert!(band.ends_with(b"0000"));
    }
}
