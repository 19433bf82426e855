//! The starter policies shipped under `policy/`, printed by
//! `capsule policy init [NAME]`.

/// (name, text) of each starter, in the order `names()` lists them.
const STARTERS: &[(&str, &str)] = &[
    (
        "python-agent",
        include_str!("../../policy/python-agent.yaml"),
    ),
    ("ci-build", include_str!("../../policy/ci-build.yaml")),
    (
        "read-only-review",
        include_str!("../../policy/read-only-review.yaml"),
    ),
];

/// The starter printed when no name is given.
pub const DEFAULT: &str = "python-agent";

/// Names of the shipped starters.
pub fn names() -> &'static [&'static str] {
    &["python-agent", "ci-build", "read-only-review"]
}

/// The YAML text of a starter, by name (a `.yaml` suffix is accepted).
pub fn get(name: &str) -> Option<&'static str> {
    let name = name.strip_suffix(".yaml").unwrap_or(name);
    STARTERS
        .iter()
        .find(|(n, _)| *n == name)
        .map(|(_, text)| *text)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::policy::{load_str, resolve, validate};
    use std::path::Path;

    #[test]
    fn names_and_get_agree() {
        assert_eq!(names().len(), STARTERS.len());
        for n in names() {
            assert!(get(n).is_some(), "{n}");
        }
        assert!(get(DEFAULT).is_some());
        assert_eq!(get("ci-build.yaml"), get("ci-build"));
        assert_eq!(get("nope"), None);
    }

    #[test]
    fn every_starter_parses_resolves_and_validates_here() {
        // The staged copy when the suite runs as another user (scripts/test
        // sets CAPSULE_TEST_ROOT), else the checkout.
        let base = std::env::var_os("CAPSULE_TEST_ROOT")
            .map(std::path::PathBuf::from)
            .unwrap_or_else(|| Path::new(env!("CARGO_MANIFEST_DIR")).to_path_buf())
            .join("policy");
        let home = resolve::invoking_home();
        for n in names() {
            let text = get(n).unwrap();
            let file = format!("{n}.yaml");
            let lp = load_str(text, &file, None, &base).unwrap_or_else(|e| panic!("{e}"));
            let fs = resolve::resolve_fs(&lp, &home).unwrap_or_else(|e| panic!("{e}"));
            validate::validate(&lp, &fs).unwrap_or_else(|e| panic!("{e}"));
            assert!(!fs.read.is_empty(), "{n} reads its directory");
            assert!(lp.line_of("filesystem.read[0]").is_some(), "{n}");
            // The file shipped on disk is the one compiled in.
            assert_eq!(std::fs::read_to_string(base.join(&file)).unwrap(), text);
        }
    }

    #[test]
    fn starter_lines_are_mapped() {
        let base = Path::new("/");
        let lp = load_str(get("ci-build").unwrap(), "ci-build.yaml", None, base).unwrap();
        assert_eq!(lp.line_of("network.allow_hosts[6]"), Some(37));
        assert_eq!(lp.line_of("limits.timeout_seconds"), Some(49));
        let lp = load_str(
            get("python-agent").unwrap(),
            "python-agent.yaml",
            None,
            base,
        )
        .unwrap();
        assert_eq!(lp.line_of("env.set.PYTHONDONTWRITEBYTECODE"), Some(38));
        assert_eq!(lp.line_of("limits.timeout_seconds"), Some(41));
    }
}
