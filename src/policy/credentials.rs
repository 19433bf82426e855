//! The one list of credential locations (contract section 2), and the one
//! list of the system's secrets under /etc.
//!
//! Each location stays unreadable beneath every grant — a policy grant, a
//! command-line grant, the command's own install prefix — unless a grant
//! names it exactly. Landlock enforces the carve-out (`sandbox::landlock::
//! carveout`); this module only says which paths, and why, for this home.
//! The /etc secrets ([`SYSTEM_SECRETS`]) are carved out the same way, and
//! inside the run's view they are covered by mounts instead
//! (`sandbox::view`), so that /etc can be granted whole there.
//!
//! A location is a path relative to the home directory, or a pattern whose
//! last component has one `*` (`.cargo/credentials*`, `.*_history`): the
//! pattern is matched against the entries of its directory while planning,
//! and only when some grant lies above that directory.

use std::path::{Path, PathBuf};

/// (location relative to the home directory, what it holds).
pub const LOCATIONS: &[(&str, &str)] = &[
    (".ssh", "SSH keys"),
    (".gnupg", "GnuPG keys"),
    (".aws", "AWS credentials"),
    (".azure", "Azure credentials"),
    (".config/gcloud", "Google Cloud credentials"),
    (".kube", "Kubernetes credentials"),
    (".docker", "Docker registry credentials"),
    (".netrc", "netrc passwords"),
    (".git-credentials", "git credential store"),
    (".config/git/credentials", "git credential store"),
    (".config/gh", "GitHub CLI token"),
    (".config/hub", "hub GitHub token"),
    (".npmrc", "npm registry token"),
    (".yarnrc*", "yarn registry token"),
    (".pypirc", "PyPI upload token"),
    (".cargo/credentials*", "cargo registry token"),
    (".gem/credentials", "RubyGems API key"),
    (".m2/settings*.xml", "Maven repository passwords"),
    (".gradle/gradle.properties", "Gradle repository credentials"),
    (".terraform.d/credentials*", "Terraform Cloud token"),
    (".terraformrc", "Terraform Cloud token"),
    (".vault-token", "HashiCorp Vault token"),
    (".password-store", "pass password store"),
    (".local/share/keyrings", "GNOME keyring"),
    (".config/op", "1Password CLI"),
    (
        ".config/containers/auth.json",
        "container registry credentials",
    ),
    (".s3cfg", "S3 credentials"),
    (".boto", "Google Cloud Storage/boto credentials"),
    (".oci", "Oracle Cloud credentials"),
    (".config/doctl", "DigitalOcean token"),
    (".config/rclone", "rclone remotes' credentials"),
    (".*_history", "shell or REPL history"),
    (".local/share/fish/fish_history", "shell history"),
    (".histfile", "shell history"),
    (
        ".config/capsule",
        "capsule's own config (provider key variables)",
    ),
    (".local/state/capsule", "capsule's own audit log"),
    (
        ".local/share/capsule",
        "capsule's volumes (other runs' data)",
    ),
];

/// Secrets of the system under /etc: (absolute path or pattern, what it
/// holds). Unreadable beneath every grant, even to root, unless a grant
/// names one exactly: carved out of the Landlock grants above them
/// (`plan::build`) and, inside the run's view, covered by an empty file or
/// directory (`sandbox::view`). Mode bits do not protect them: capsule's
/// root is root. A `*` matches any run of characters within one name.
pub const SYSTEM_SECRETS: &[(&str, &str)] = &[
    ("/etc/shadow", "password hashes"),
    ("/etc/shadow-", "password hashes (backup)"),
    ("/etc/gshadow", "group password hashes"),
    ("/etc/gshadow-", "group password hashes (backup)"),
    ("/etc/sudoers", "sudo rules"),
    ("/etc/sudoers.d", "sudo rules"),
    ("/etc/ssh/ssh_host_*_key", "SSH host private keys"),
    ("/etc/ssl/private", "TLS private keys"),
    ("/etc/pki/tls/private", "TLS private keys"),
    ("/etc/security/opasswd", "old password hashes"),
    ("/etc/krb5.keytab", "Kerberos host keys"),
    ("/etc/libvirt/secrets", "libvirt secrets"),
    (
        "/etc/NetworkManager/system-connections",
        "Wi-Fi and VPN passwords",
    ),
    ("/etc/wpa_supplicant", "Wi-Fi passwords"),
    ("/etc/ppp/chap-secrets", "PPP passwords"),
    ("/etc/ppp/pap-secrets", "PPP passwords"),
    ("/etc/ipsec.secrets", "IPsec keys"),
    ("/etc/letsencrypt/archive", "TLS private keys"),
    ("/etc/letsencrypt/keys", "TLS private keys"),
    ("/etc/openvpn/server", "OpenVPN keys"),
    ("/etc/openvpn/client", "OpenVPN keys"),
    ("/etc/wireguard", "WireGuard private keys"),
    ("/etc/cups/ssl", "CUPS TLS private key"),
    ("/etc/docker/key.json", "Docker daemon private key"),
    ("/etc/machine-id.secret", "machine secret"),
    ("/etc/rancher", "k3s/RKE2 cluster credentials"),
    ("/etc/kubernetes/pki", "Kubernetes cluster keys"),
    ("/etc/shadow.lock", "password database lock"),
    ("/etc/.pwd.lock", "password database lock"),
    ("/etc/krb5kdc", "Kerberos KDC master key and admin keytab"),
    ("/etc/pki/CA/private", "CA private keys"),
    ("/etc/pki/libvirt/private", "libvirt TLS private key"),
    ("/etc/letsencrypt/accounts", "ACME account keys"),
    ("/etc/dovecot/private", "Dovecot TLS private key"),
    ("/etc/mysql/debian.cnf", "MySQL maintenance password"),
    ("/etc/ldap.secret", "LDAP bind password"),
    ("/etc/libnss-ldap.secret", "LDAP bind password"),
    ("/etc/pam_ldap.secret", "LDAP bind password"),
    ("/etc/nslcd.conf", "LDAP bind password"),
    (
        "/etc/ldap/slapd.d",
        "LDAP server config with its admin password",
    ),
    (
        "/etc/openldap/slapd.d",
        "LDAP server config with its admin password",
    ),
    ("/etc/sssd/sssd.conf", "SSSD bind passwords"),
    ("/etc/sssd/conf.d", "SSSD bind passwords"),
    ("/etc/sasldb2", "Cyrus SASL passwords"),
    ("/etc/samba/smbpasswd", "Samba password hashes"),
    ("/etc/chrony/chrony.keys", "NTP authentication keys"),
    ("/etc/chrony.keys", "NTP authentication keys"),
    ("/etc/bind/*.key", "DNS TSIG/rndc keys"),
    ("/etc/rndc.key", "DNS rndc key"),
    ("/etc/ceph/*.keyring", "Ceph keys"),
    ("/etc/postfix/sasl_passwd*", "SMTP relay passwords"),
    ("/etc/exim4/passwd*", "SMTP passwords"),
    ("/etc/ssmtp/ssmtp.conf", "SMTP relay password"),
    ("/etc/msmtprc", "SMTP relay password"),
    ("/etc/fetchmailrc", "mail account passwords"),
    ("/etc/ipsec.d/private", "IPsec private keys"),
    ("/etc/swanctl/private", "IPsec private keys"),
    ("/etc/swanctl/rsa", "IPsec private keys"),
    ("/etc/swanctl/ecdsa", "IPsec private keys"),
    ("/etc/swanctl/pkcs8", "IPsec private keys"),
    ("/etc/swanctl/pkcs12", "IPsec private keys"),
    ("/etc/strongswan/ipsec.secrets", "IPsec keys"),
    ("/etc/strongswan/ipsec.d/private", "IPsec private keys"),
    ("/etc/strongswan/swanctl/private", "IPsec private keys"),
    ("/etc/openvpn/*.key", "OpenVPN keys"),
    ("/etc/openvpn/*.conf", "OpenVPN configs (inline keys)"),
    ("/etc/openvpn/*.ovpn", "OpenVPN configs (inline keys)"),
    (
        "/etc/systemd/network/*.netdev",
        "network devices (WireGuard private keys)",
    ),
    ("/etc/hostapd", "Wi-Fi access point passphrases"),
    ("/etc/iscsi/iscsid.conf", "iSCSI CHAP passwords"),
    ("/etc/iscsi/nodes", "iSCSI CHAP passwords"),
    ("/etc/davfs2/secrets", "WebDAV passwords"),
    ("/etc/docker/certs.d", "registry client keys"),
    (
        "/etc/containers/auth.json",
        "container registry credentials",
    ),
    ("/etc/kubernetes/*.conf", "Kubernetes client keys"),
    ("/etc/gitlab/gitlab-secrets.json", "GitLab secrets"),
    ("/etc/gitlab/initial_root_password", "GitLab root password"),
    ("/etc/nut/upsd.users", "UPS daemon passwords"),
];

/// [`SYSTEM_SECRETS`] as locations, patterns kept as patterns.
pub fn system_secrets() -> Vec<Location> {
    SYSTEM_SECRETS
        .iter()
        .map(|(p, what)| Location {
            path: PathBuf::from(p),
            what,
        })
        .collect()
}

/// Whether a path lies strictly beneath one of `grants`, component-wise as
/// `p.starts_with(g) && p != g` says, for the carve-out walks of planning.
/// Those ask it some ten thousand times per run (~100 locations × ~35 grants,
/// several times each); `Path::starts_with` parses both paths into
/// components at every call, which measured ~5% of a minimal `capsule exec`'s
/// CPU. Here every grant is put in normal form once (its components joined by
/// `/`, plus a trailing `/`), each asked path once per call, and the test is a
/// byte prefix: the same answer, as a normal form is the same exactly when the
/// components are.
pub fn strictly_beneath_any<'a>(
    grants: impl IntoIterator<Item = &'a Path>,
) -> Box<dyn Fn(&Path) -> bool> {
    let prefixes: Vec<Vec<u8>> = grants
        .into_iter()
        .map(|g| {
            let mut b = normal_form(g);
            if !b.is_empty() && b.last() != Some(&b'/') {
                b.push(b'/');
            }
            b
        })
        .collect();
    Box::new(move |p: &Path| {
        let n = normal_form(p);
        prefixes
            .iter()
            .any(|g| n.len() > g.len() && n.starts_with(g) || g.is_empty() && !n.is_empty())
    })
}

/// `p`'s components joined by `/` (the root is a leading `/`): `a//b/./c/` is `a/b/c`.
fn normal_form(p: &Path) -> Vec<u8> {
    use std::os::unix::ffi::OsStrExt;
    let mut out = Vec::with_capacity(p.as_os_str().len());
    for c in p.components() {
        if c != std::path::Component::RootDir && !out.is_empty() && out.last() != Some(&b'/') {
            out.push(b'/');
        }
        out.extend_from_slice(c.as_os_str().as_bytes());
    }
    out
}

/// One credential path to carve out, and why.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Location {
    pub path: PathBuf,
    pub what: &'static str,
}

/// Every location for `home`, with patterns kept as patterns, plus capsule's
/// own config and state directories under `$XDG_CONFIG_HOME`/`$XDG_STATE_HOME`
/// and `extra` (the run's audit log).
pub fn patterns(home: &Path, extra: &[(PathBuf, &'static str)]) -> Vec<Location> {
    // Grants are canonical: a home reached through a symlink (/home -> /var/home)
    // is listed under both names. The account's home from the password
    // database counts too when $HOME names another directory (sudo -E, a
    // CI job's HOME=/tmp/x): its credentials are the user's all the same.
    let mut homes = vec![home.to_path_buf()];
    if let Some(dir) = super::home::account_home() {
        if dir != home && dir != Path::new("/") {
            homes.push(dir);
        }
    }
    // As root, every account's home: root's reach goes into each of them
    // (the run's, without capabilities, wherever a mode lets anyone read),
    // so another account's `~/.ssh` is a credential store as much as the
    // invoking user's (issue 37: `learn` as root learnt one as a read grant
    // and read it in its next round; `exec` read it through a grant of
    // its parent).
    let mut others: Vec<PathBuf> = Vec::new();
    if nix::unistd::geteuid().is_root() {
        others = super::home::all_account_homes();
    }
    for list in [&mut homes, &mut others] {
        for h in list.clone() {
            if let Ok(c) = std::fs::canonicalize(&h) {
                if !list.contains(&c) {
                    list.push(c);
                }
            }
        }
    }
    others.retain(|h| !homes.contains(h));
    let mut v: Vec<Location> = homes
        .iter()
        .flat_map(|h| {
            LOCATIONS.iter().map(move |(rel, what)| Location {
                path: h.join(rel),
                what,
            })
        })
        .collect();
    // Another account's capsule directories are carved out where they
    // exist, but never made ([`make_own_dirs`] makes only the invoking
    // user's): capsule must not put root's directories in their homes.
    v.extend(others.iter().flat_map(|h| {
        LOCATIONS.iter().map(move |(rel, what)| Location {
            path: h.join(rel),
            what: if what.starts_with("capsule's") {
                "another account's capsule directory (its config, audit log or volumes)"
            } else {
                what
            },
        })
    }));
    for (var, sub, what) in [
        ("XDG_CONFIG_HOME", "capsule", "capsule's own config"),
        ("XDG_STATE_HOME", "capsule", "capsule's own audit log"),
        (
            "XDG_DATA_HOME",
            "capsule",
            "capsule's volumes (other runs' data)",
        ),
    ] {
        if let Some(dir) = std::env::var_os(var).map(PathBuf::from) {
            if dir.is_absolute() {
                v.push(Location {
                    path: dir.join(sub),
                    what,
                });
            }
        }
    }
    for (p, what) in extra {
        v.push(Location {
            path: p.clone(),
            what,
        });
    }
    // Component-wise duplicates (`/h/.ssh` and `/h//.ssh/`) go, as a set of
    // paths would drop them, but keyed by normal form: a `PathBuf` set
    // compares component by component at every probe, ~4% of a warm step's
    // CPU for these ~100 locations.
    let mut seen = std::collections::HashSet::new();
    v.retain(|l| seen.insert(normal_form(&l.path)));
    v
}

/// `patterns(home, extra)` from `patterns(home, &[])` made earlier in the
/// same plan: one password-database lookup and home canonicalisation per
/// plan instead of two.
pub fn with_extra(mut v: Vec<Location>, extra: &[(PathBuf, &'static str)]) -> Vec<Location> {
    for (p, what) in extra {
        if !v.iter().any(|l| l.path == *p) {
            v.push(Location {
                path: p.clone(),
                what,
            });
        }
    }
    v
}

/// capsule's own directories among `locations` (its config, state and
/// volumes, under each home and `$XDG_*_HOME`) that do not exist yet and lie
/// strictly beneath a place the run can write (`writable`): made now, mode
/// 0700, so that they exist to be carved out like every credential location.
/// A location that does not exist is not carved out (nothing is there), and
/// for these that would let the run create them: a `config.yaml` the run
/// wrote would tell the next run's parent where to send the provider key.
/// Returns each directory that could not be made, with the error.
pub fn make_own_dirs(
    locations: &[Location],
    writable: impl Fn(&Path) -> bool,
) -> Vec<(PathBuf, std::io::Error)> {
    use std::os::unix::fs::DirBuilderExt;
    let mut failed = Vec::new();
    for loc in locations {
        let own = loc.what.starts_with("capsule's")
            && loc.path.file_name() == Some(std::ffi::OsStr::new("capsule"));
        if !own || std::fs::symlink_metadata(&loc.path).is_ok() {
            continue;
        }
        // Where the run would create it: through the links of the part
        // that exists (a `~/.config` linked elsewhere is judged there).
        if !writable(&resolved(&loc.path)) {
            continue;
        }
        match std::fs::DirBuilder::new()
            .recursive(true)
            .mode(0o700)
            .create(&loc.path)
        {
            Ok(()) => {
                tracing::debug!(dir = %loc.path.display(), "made capsule's own directory to carve it out")
            }
            // A read-only file system: the run cannot create it either.
            Err(e) if e.raw_os_error() == Some(libc::EROFS) => {}
            Err(e) => failed.push((loc.path.clone(), e)),
        }
    }
    failed
}

/// `p` with its deepest existing ancestor resolved (links followed), the
/// missing rest appended as written.
fn resolved(p: &Path) -> PathBuf {
    let mut rest = Vec::new();
    let mut cur = p;
    loop {
        if let Ok(c) = std::fs::canonicalize(cur) {
            return rest.iter().rev().fold(c, |acc, n| acc.join(n));
        }
        match (cur.parent(), cur.file_name()) {
            (Some(parent), Some(name)) => {
                rest.push(name.to_os_string());
                cur = parent;
            }
            _ => return p.to_path_buf(),
        }
    }
}

/// The existing credential paths beneath (strictly) some path for which
/// `beneath` says yes. Patterns are matched against their directory's entries.
pub fn existing(locations: &[Location], beneath: impl Fn(&Path) -> bool) -> Vec<Location> {
    let mut out = Vec::new();
    let mut dirs = Listings::new(locations.iter().map(|l| l.path.as_path()));
    for loc in locations {
        let name = loc
            .path
            .file_name()
            .map(|n| n.to_string_lossy().into_owned());
        match name.as_deref().and_then(|n| n.split_once('*')) {
            None => {
                if beneath(&loc.path) && dirs.exists(&loc.path) {
                    out.push(loc.clone());
                }
            }
            Some((prefix, suffix)) => {
                let Some(dir) = loc.path.parent() else {
                    continue;
                };
                // The pattern's directory itself, or something above it, is granted.
                if !beneath(&dir.join("x")) {
                    continue;
                }
                let mut names = dirs.names_in(dir, |n| {
                    n.len() >= prefix.len() + suffix.len()
                        && n.starts_with(prefix)
                        && n.ends_with(suffix)
                });
                // The same order on every run (for `check` and the audit).
                names.sort();
                for n in names {
                    out.push(Location {
                        path: dir.join(n),
                        what: loc.what,
                    });
                }
            }
        }
    }
    out
}

/// The entries of the directories [`existing`] asks about most, each
/// listed once: most locations are absent (some 60 secrets of /etc on a
/// usual host), and one listing of their directory answers for all of them
/// where an `lstat` each cost a system call each (a warm step of `capsule
/// serve` plans afresh every time). A directory is listed only where
/// [`LISTED_FROM`] locations lie in it, only up to [`MAX_LISTED`] entries,
/// and only where it tells names apart by case ([`case_sensitive`]); a path beneath a listed directory whose listing lacks its next
/// component is absent too (`/etc/pki/tls/private` where there is no
/// `/etc/pki`). Every other path, and every name a listing has, is asked
/// with `lstat`, as before.
struct Listings {
    listed:
        std::collections::HashMap<PathBuf, Option<std::collections::HashSet<std::ffi::OsString>>>,
    asks: std::collections::HashMap<PathBuf, usize>,
}

/// Locations in one directory from which it is listed rather than asked
/// about one by one.
const LISTED_FROM: usize = 4;
/// The most entries of a listing (more: each path is asked).
const MAX_LISTED: usize = 1024;

impl Listings {
    fn new<'a>(paths: impl Iterator<Item = &'a Path>) -> Listings {
        let mut asks = std::collections::HashMap::new();
        for dir in paths.filter_map(Path::parent) {
            *asks.entry(dir.to_path_buf()).or_insert(0) += 1;
        }
        Listings {
            listed: std::collections::HashMap::new(),
            asks,
        }
    }

    /// Whether `path` exists (as `lstat` says).
    fn exists(&mut self, path: &Path) -> bool {
        if self.absent_by_listing(path) {
            return false;
        }
        std::fs::symlink_metadata(path).is_ok()
    }

    /// Whether a listing shows that `path` is not there: its directory's
    /// (listed now if enough locations lie there), or a listed ancestor's
    /// that lacks the next component.
    fn absent_by_listing(&mut self, path: &Path) -> bool {
        if let Some(dir) = path.parent() {
            self.list_if_asked(dir);
        }
        let mut below = path;
        for dir in path.ancestors().skip(1) {
            if let (Some(Some(names)), Some(name)) = (self.listed.get(dir), below.file_name()) {
                return !names.contains(name);
            }
            below = dir;
        }
        false
    }
}

impl Listings {
    /// List `dir` (once) if enough locations lie in it.
    fn list_if_asked(&mut self, dir: &Path) {
        if !self.listed.contains_key(dir) && self.asks.get(dir).is_some_and(|n| *n >= LISTED_FROM) {
            let names = list(dir);
            self.listed.insert(dir.to_path_buf(), names);
        }
    }

    /// The names in `dir` that `keep` takes, for a pattern: none where a
    /// listing shows `dir` absent, its own listing's where it has one,
    /// else read now.
    fn names_in(&mut self, dir: &Path, keep: impl Fn(&str) -> bool) -> Vec<String> {
        if self.absent_by_listing(dir) {
            return Vec::new();
        }
        self.list_if_asked(dir);
        let lossy = |n: &std::ffi::OsStr| n.to_string_lossy().into_owned();
        match self.listed.get(dir) {
            Some(Some(names)) => names.iter().map(|n| lossy(n)).filter(|n| keep(n)).collect(),
            _ => std::fs::read_dir(dir)
                .map(|entries| {
                    entries
                        .flatten()
                        .map(|e| lossy(&e.file_name()))
                        .filter(|n| keep(n))
                        .collect()
                })
                .unwrap_or_default(),
        }
    }
}

/// The names in `dir`; None where it cannot be listed (absent, unreadable),
/// has more than [`MAX_LISTED`] entries, or may be case-insensitive.
fn list(dir: &Path) -> Option<std::collections::HashSet<std::ffi::OsString>> {
    let mut names = std::collections::HashSet::new();
    for e in std::fs::read_dir(dir).ok()? {
        names.insert(e.ok()?.file_name());
        if names.len() > MAX_LISTED {
            return None;
        }
    }
    case_sensitive(dir, &names, |p| std::fs::symlink_metadata(p).map(drop)).then_some(names)
}

/// Whether `dir` (listing `names`) tells names apart by case. In a
/// case-insensitive directory (a casefolded ext4, f2fs or tmpfs one, vfat,
/// an SMB share) `lstat` finds `.ssh` where the listing says `.SSH`, so a
/// listing lacking a name does not show it absent there: one entry asked
/// for with its ASCII letters' case flipped must not be found. No entry to
/// ask with (none has a letter), or an answer other than "not there":
/// not known to be case-sensitive.
fn case_sensitive(
    dir: &Path,
    names: &std::collections::HashSet<std::ffi::OsString>,
    lstat: impl Fn(&Path) -> std::io::Result<()>,
) -> bool {
    use std::os::unix::ffi::{OsStrExt, OsStringExt};
    let flipped = names.iter().find_map(|n| {
        let f: Vec<u8> = n
            .as_bytes()
            .iter()
            .map(|b| match b {
                b'a'..=b'z' => b.to_ascii_uppercase(),
                b'A'..=b'Z' => b.to_ascii_lowercase(),
                _ => *b,
            })
            .collect();
        let f = std::ffi::OsString::from_vec(f);
        (f != *n && !names.contains(&f)).then_some(f)
    });
    flipped.is_some_and(|f| {
        lstat(&dir.join(f)).is_err_and(|e| e.kind() == std::io::ErrorKind::NotFound)
    })
}

/// Whether `path` is a credential location (exactly, or matching a pattern).
pub fn is_credential(locations: &[Location], path: &Path) -> bool {
    locations.iter().any(|l| {
        let name = l.path.file_name().map(|n| n.to_string_lossy().into_owned());
        match name.as_deref().and_then(|n| n.split_once('*')) {
            None => path == l.path,
            Some((prefix, suffix)) => {
                path.parent() == l.path.parent()
                    && path.file_name().is_some_and(|n| {
                        let n = n.to_string_lossy();
                        n.len() >= prefix.len() + suffix.len()
                            && n.starts_with(prefix)
                            && n.ends_with(suffix)
                    })
            }
        }
    })
}

/// Why a grant or mount source `path`, reached through the (trusted) link
/// `via`, is refused: it is, or lies in, a credential location or a system
/// secret that the path as written (`literal`) does not name. "A grant
/// names it exactly" is judged on the path as written, never on a followed
/// link.
pub fn linked_into_secret(
    path: &Path,
    via: Option<&Path>,
    literal: &Path,
    home: &Path,
) -> Option<String> {
    let via = via?;
    let creds = patterns(home, &[]);
    let secrets = system_secrets();
    let literal: PathBuf = literal.components().collect();
    if is_credential(&creds, &literal) || secrets.iter().any(|s| s.path == literal) {
        return None; // named as written (a home reached through /home -> /var/home)
    }
    let hit = path.ancestors().find_map(|a| {
        if is_credential(&creds, a) {
            Some(a.to_path_buf())
        } else {
            secrets.iter().find(|s| s.path == a).map(|s| s.path.clone())
        }
    })?;
    Some(format!(
        "reaches the credential or system secret {} through the symbolic link {}: a grant names such a place \
         only by its own path, never through a link (write {} itself if it is meant)",
        hit.display(),
        via.display(),
        path.display()
    ))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_accounts_own_home_is_carved_out_too_when_home_names_another() {
        let elsewhere = Path::new("/nonexistent/elsewhere-home");
        let v = patterns(elsewhere, &[]);
        assert!(v.iter().any(|l| l.path == elsewhere.join(".ssh")));
        let dir = crate::policy::home::account_home().expect("this account has a home");
        if dir != Path::new("/") {
            assert!(
                v.iter().any(|l| l.path == dir.join(".ssh")),
                "{} not carved out",
                dir.display()
            );
        }
    }

    #[test]
    fn the_contract_list_is_there() {
        let home = Path::new("/home/u");
        let v = patterns(home, &[(PathBuf::from("/var/log/a.jsonl"), "audit")]);
        for p in [
            ".ssh",
            ".gnupg",
            ".aws",
            ".azure",
            ".config/gcloud",
            ".kube",
            ".docker",
            ".netrc",
            ".git-credentials",
            ".config/git/credentials",
            ".config/gh",
            ".config/hub",
            ".npmrc",
            ".yarnrc*",
            ".pypirc",
            ".cargo/credentials*",
            ".gem/credentials",
            ".m2/settings*.xml",
            ".gradle/gradle.properties",
            ".terraform.d/credentials*",
            ".vault-token",
            ".password-store",
            ".local/share/keyrings",
            ".config/op",
            ".*_history",
            ".config/capsule",
            ".local/state/capsule",
        ] {
            assert!(v.iter().any(|l| l.path == home.join(p)), "{p}");
        }
        assert!(v.iter().any(|l| l.path == Path::new("/var/log/a.jsonl")));
        assert!(is_credential(&v, &home.join(".bash_history")));
        assert!(is_credential(&v, &home.join(".cargo/credentials.toml")));
        assert!(is_credential(&v, &home.join(".m2/settings-security.xml")));
        assert!(!is_credential(&v, &home.join(".m2/settings.txt")));
        assert!(!is_credential(&v, &home.join(".cargo/config.toml")));
    }

    #[test]
    fn the_issue_list_of_system_secrets_is_there() {
        let v = system_secrets();
        for p in [
            "/etc/shadow",
            "/etc/shadow-",
            "/etc/gshadow",
            "/etc/gshadow-",
            "/etc/sudoers",
            "/etc/sudoers.d",
            "/etc/ssl/private",
            "/etc/security/opasswd",
        ] {
            assert!(v.iter().any(|l| l.path == Path::new(p)), "{p}");
        }
        assert!(is_credential(
            &v,
            Path::new("/etc/ssh/ssh_host_ed25519_key")
        ));
        assert!(!is_credential(
            &v,
            Path::new("/etc/ssh/ssh_host_ed25519_key.pub")
        ));
        assert!(v.iter().all(|l| l.path.starts_with("/etc")));
    }

    /// What `existing` finds through its listings is what an `lstat` of
    /// each location finds: this host's /etc secrets, and a tree with
    /// present and absent names, nested absent directories, a dangling link
    /// and a directory listed beside one that is not.
    #[test]
    fn listings_find_what_lstat_finds() {
        let naive = |locs: &[Location]| -> Vec<PathBuf> {
            locs.iter()
                .filter(|l| std::fs::symlink_metadata(&l.path).is_ok())
                .map(|l| l.path.clone())
                .collect()
        };
        let paths = |v: Vec<Location>| v.into_iter().map(|l| l.path).collect::<Vec<_>>();
        let secrets = system_secrets();
        assert_eq!(paths(existing(&secrets, |_| true)), naive(&secrets));
        let t = tempfile::tempdir().unwrap();
        let r = t.path();
        std::fs::create_dir_all(r.join("a/b")).unwrap();
        std::fs::write(r.join("one"), "x").unwrap();
        std::fs::write(r.join("a/two"), "x").unwrap();
        std::os::unix::fs::symlink(r.join("nowhere"), r.join("dangling")).unwrap();
        let at = |names: &[&str]| -> Vec<Location> {
            names
                .iter()
                .map(|p| Location {
                    path: r.join(p),
                    what: "test",
                })
                .collect()
        };
        let locs = at(&[
            "one", "dangling", "absent", "gone", "a/two", "a/b", "a/none", "x/y/z", "a/b/c/d", "a",
        ]);
        let found = paths(existing(&locs, |_| true));
        assert_eq!(found, naive(&locs));
        assert_eq!(found.len(), 5, "{found:?}");
        // Patterns: in a listed directory (five locations lie in `r`), in
        // one that is not, in an absent one beneath a listed one.
        std::fs::write(r.join("k.key"), "x").unwrap();
        std::fs::write(r.join("a/m.key"), "x").unwrap();
        let pats = at(&["*.key", "o*", "a/*.key", "x/*.key", "p", "q", "s"]);
        let found = paths(existing(&pats, |_| true));
        let want: Vec<PathBuf> = ["k.key", "one", "a/m.key"]
            .iter()
            .map(|p| r.join(p))
            .collect();
        assert_eq!(found, want);
    }

    /// A directory that finds a name its listing spells in another case is
    /// not trusted to show a location absent (casefolded ext4, vfat, SMB):
    /// there `lstat` of `.ssh` finds `.SSH`.
    #[test]
    fn a_case_insensitive_directory_is_not_listed() {
        use std::collections::HashSet;
        let names: HashSet<std::ffi::OsString> = [".SSH", "x1"].iter().map(Into::into).collect();
        let dir = Path::new("/somewhere");
        let insensitive = |p: &Path| -> std::io::Result<()> {
            let n = p
                .file_name()
                .unwrap()
                .to_string_lossy()
                .to_ascii_lowercase();
            if names
                .iter()
                .any(|m| m.to_string_lossy().to_ascii_lowercase() == n)
            {
                Ok(())
            } else {
                Err(std::io::ErrorKind::NotFound.into())
            }
        };
        let sensitive = |p: &Path| -> std::io::Result<()> {
            if names.contains(p.file_name().unwrap()) {
                Ok(())
            } else {
                Err(std::io::ErrorKind::NotFound.into())
            }
        };
        assert!(!case_sensitive(dir, &names, insensitive));
        assert!(case_sensitive(dir, &names, sensitive));
        // Unknown: no entry has a letter, or the probe is refused.
        let digits: HashSet<std::ffi::OsString> = ["1", "2"].iter().map(Into::into).collect();
        assert!(!case_sensitive(dir, &digits, sensitive));
        assert!(!case_sensitive(dir, &names, |_| Err(
            std::io::ErrorKind::PermissionDenied.into()
        )));
        // This host's /etc is case-sensitive: listed.
        assert!(list(Path::new("/etc")).is_some());
    }

    #[test]
    fn patterns_expand_only_beneath_a_grant() {
        let t = tempfile::tempdir().unwrap();
        let home = t.path();
        for f in [".bash_history", ".python_history", ".bashrc", ".npmrc"] {
            std::fs::write(home.join(f), "x").unwrap();
        }
        std::fs::create_dir_all(home.join(".cargo/bin")).unwrap();
        std::fs::write(home.join(".cargo/credentials.toml"), "t").unwrap();
        std::fs::write(home.join(".cargo/credentials"), "t").unwrap();
        let locs = patterns(home, &[]);
        let found = existing(&locs, |p| p.starts_with(home) && p != home);
        let mut names: Vec<_> = found
            .iter()
            .map(|l| l.path.strip_prefix(home).unwrap().to_path_buf())
            .collect();
        names.sort();
        let want: Vec<PathBuf> = [
            ".bash_history",
            ".cargo/credentials",
            ".cargo/credentials.toml",
            ".npmrc",
            ".python_history",
        ]
        .iter()
        .map(PathBuf::from)
        .collect();
        assert_eq!(names, want);
        // Only ~/.cargo granted: only what lies beneath it.
        let cargo = home.join(".cargo");
        let found = existing(&locs, |p| p.starts_with(&cargo) && p != cargo);
        assert_eq!(found.len(), 2, "{found:?}");
        assert!(existing(&locs, |_| false).is_empty());
    }

    /// "Names it exactly" is judged on the path as written: reached through
    /// a link, a credential store or /etc secret is refused; named, it is not.
    #[test]
    fn a_link_never_names_a_secret_exactly() {
        let home = Path::new("/home/u");
        let ssh = home.join(".ssh");
        let link = Path::new("/srv/ws/data");
        let why = linked_into_secret(&ssh, Some(link), link, home).expect("refused");
        assert!(
            why.contains("/home/u/.ssh") && why.contains("/srv/ws/data"),
            "{why}"
        );
        assert!(linked_into_secret(&ssh.join("id_rsa"), Some(link), link, home).is_some());
        assert!(linked_into_secret(Path::new("/etc/shadow"), Some(link), link, home).is_some());
        // Named as written (a home reached through /home -> /var/home).
        assert_eq!(
            linked_into_secret(&ssh, Some(Path::new("/home")), &ssh, home),
            None
        );
        // No link followed, or not a secret: nothing to say.
        assert_eq!(linked_into_secret(&ssh, None, link, home), None);
        assert_eq!(
            linked_into_secret(Path::new("/srv/x"), Some(link), link, home),
            None
        );
    }

    #[test]
    fn strictly_beneath_any_is_starts_with_and_not_equal() {
        let grants: Vec<PathBuf> = ["/", "/usr", "/home/u/", "/a//b/./c", "rel/x", "/tmp/x.y"]
            .iter()
            .map(PathBuf::from)
            .collect();
        let asked = [
            "/",
            "/usr",
            "/usr/",
            "/usr/bin",
            "/usrx",
            "/us",
            "/home/u",
            "/home/u/.ssh",
            "/home/uu/.ssh",
            "/a/b/c",
            "/a/b/c/d",
            "/a/b//c/./d",
            "/a/b",
            "rel/x",
            "rel/x/y",
            "rel",
            "x",
            "/tmp/x.y/z",
            "/tmp/x.yz",
            "/a/../a/b/c/d",
            "",
            ".",
            "./rel/x/y",
        ];
        for one in 0..grants.len() {
            for set in [vec![grants[one].clone()], grants[one..].to_vec()] {
                let fast = super::strictly_beneath_any(set.iter().map(PathBuf::as_path));
                for p in asked.iter().map(Path::new) {
                    let slow = set.iter().any(|g| p.starts_with(g) && g != p);
                    assert_eq!(fast(p), slow, "{} under {set:?}", p.display());
                }
            }
        }
    }

    #[test]
    fn with_extra_is_patterns_with_extra() {
        let home = Path::new("/home/u");
        for extra in [
            vec![],
            vec![(PathBuf::from("/var/log/a.jsonl"), "audit")],
            vec![(home.join(".ssh"), "again"), (PathBuf::from("/x"), "x")],
            // The same paths in another form are the same paths.
            vec![
                (PathBuf::from("/home//u/.ssh/"), "again"),
                (PathBuf::from("/x/"), "x"),
                (PathBuf::from("/x"), "x again"),
            ],
        ] {
            assert_eq!(
                with_extra(patterns(home, &[]), &extra),
                patterns(home, &extra)
            );
        }
    }

    #[test]
    fn own_dirs_are_made_where_the_run_could_create_them() {
        let t = tempfile::tempdir().expect("tempdir");
        let root = std::fs::canonicalize(t.path()).expect("canonical");
        let home = root.join("home");
        let elsewhere = root.join("elsewhere");
        std::fs::create_dir_all(&home).expect("mkdir");
        std::fs::create_dir_all(&elsewhere).expect("mkdir");
        let loc = |rel: &str, what: &'static str| Location {
            path: home.join(rel),
            what,
        };
        let locs = [
            loc(".config/capsule", "capsule's own config"),
            loc(".ssh", "SSH keys"),
        ];
        let beneath_home = strictly_beneath_any([home.as_path()]);
        assert!(make_own_dirs(&locs, beneath_home).is_empty());
        assert!(home.join(".config/capsule").is_dir());
        assert!(!home.join(".ssh").exists(), "only capsule's own are made");
        // Linked out of the write grant: the run could not create it there.
        std::fs::remove_dir_all(home.join(".config")).expect("rm");
        std::os::unix::fs::symlink(&elsewhere, home.join(".config")).expect("ln");
        let beneath_home = strictly_beneath_any([home.as_path()]);
        assert!(make_own_dirs(&locs, beneath_home).is_empty());
        assert!(!elsewhere.join("capsule").exists());
    }
}
