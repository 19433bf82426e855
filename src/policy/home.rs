//! Whose home `~` means: the invoking user's (`$HOME`, else the account's).

use std::path::{Path, PathBuf};

/// The invoking user's home: `$HOME` if set and absolute, else the passwd
/// entry of the real uid, else `/nonexistent` (so `~` grants fail as missing).
pub fn invoking_home() -> PathBuf {
    if let Some(h) = std::env::var_os("HOME") {
        let p = PathBuf::from(h);
        if p.is_absolute() {
            return p;
        }
    }
    account_home().unwrap_or_else(|| PathBuf::from("/nonexistent"))
}

/// The home directory of this process's account in the password database.
/// A static capsule may have no NSS to ask: then /etc/passwd itself. Asked
/// once per process (the account does not change; `capsule serve` asks
/// before its first step, which every step then inherits instead of asking
/// NSS again, two nscd connects and a read of /etc/passwd each).
pub fn account_home() -> Option<PathBuf> {
    static HOME: std::sync::OnceLock<Option<PathBuf>> = std::sync::OnceLock::new();
    HOME.get_or_init(lookup_account_home).clone()
}

fn lookup_account_home() -> Option<PathBuf> {
    let uid = nix::unistd::getuid();
    if let Ok(Some(u)) = nix::unistd::User::from_uid(uid) {
        if u.dir.is_absolute() {
            return Some(u.dir);
        }
    }
    let passwd = std::fs::read_to_string("/etc/passwd").ok()?;
    passwd_home(&passwd, uid.as_raw())
}

/// System directories some accounts name as their home (`bin`: `/bin`,
/// `daemon`: `/usr/sbin`, `games`: `/usr/games`): they hold the system's
/// programs, not an account's credential stores, and listing them for the
/// credential patterns (`.*_history`, `.yarnrc*`) read all of `/usr/bin` on
/// every run as root.
const SYSTEM_HOMES: &[&str] = &[
    "/usr", "/bin", "/sbin", "/lib", "/lib32", "/lib64", "/libx32",
];

/// The home of every account in the password database (`/etc/passwd`; a
/// directory service's accounts are not listed there), absolute, not `/`,
/// not beneath a system directory ([`SYSTEM_HOMES`]), and existing as a
/// directory.
pub fn all_account_homes() -> Vec<PathBuf> {
    let Ok(passwd) = std::fs::read_to_string("/etc/passwd") else {
        return Vec::new();
    };
    let mut out: Vec<PathBuf> = Vec::new();
    for l in passwd.lines() {
        let f: Vec<&str> = l.split(':').collect();
        if f.len() < 7 {
            continue;
        }
        let p = PathBuf::from(f[5]);
        let system = SYSTEM_HOMES.iter().any(|d| p.starts_with(d));
        if p.is_absolute() && p != Path::new("/") && !system && p.is_dir() && !out.contains(&p) {
            out.push(p);
        }
    }
    out
}

/// The home field of `uid`'s line in a passwd(5) text.
pub fn passwd_home(passwd: &str, uid: u32) -> Option<PathBuf> {
    passwd.lines().find_map(|l| {
        let f: Vec<&str> = l.split(':').collect();
        (f.len() >= 7 && f[2].parse::<u32>().ok() == Some(uid))
            .then(|| PathBuf::from(f[5]))
            .filter(|p| p.is_absolute())
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn home_is_absolute() {
        assert!(invoking_home().is_absolute());
        let text = "root:x:0:0:root:/root:/bin/bash\nbad line\nu:x:1000:1000::/home/u:/bin/sh\nr:x:7:7::rel:/bin/sh\n";
        assert_eq!(passwd_home(text, 0), Some(PathBuf::from("/root")));
        assert_eq!(passwd_home(text, 1000), Some(PathBuf::from("/home/u")));
        assert_eq!(passwd_home(text, 7), None);
        assert_eq!(passwd_home(text, 5), None);
    }
}
