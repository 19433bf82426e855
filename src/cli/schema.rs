//! `capsule schema policy|result|audit`: the JSON Schemas of what capsule
//! reads and writes, generated from the types that parse and print them.

use clap::{Args, ValueEnum};

#[derive(Debug, Clone, Copy, ValueEnum)]
pub enum Which {
    /// A policy file (the same as `capsule policy schema`, policy/schema.json).
    Policy,
    /// The `--json` result of a run (schemas/result.schema.json).
    Result,
    /// One line of the audit log (schemas/audit.schema.json).
    Audit,
}

#[derive(Debug, Args)]
pub struct SchemaArgs {
    /// Which document's schema.
    #[arg(value_enum)]
    which: Which,
}

/// The schema text of `which`.
pub fn text(which: Which) -> String {
    match which {
        Which::Policy => crate::policy::schema_json(),
        Which::Result => crate::result::schema_json(),
        Which::Audit => crate::audit::schema_json(),
    }
}

pub fn run(a: SchemaArgs) -> i32 {
    print!("{}", text(a.which));
    0
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The shipped schemas are exactly what `capsule schema` prints
    /// (`CAPSULE_UPDATE_SCHEMA=1 cargo test --lib shipped_schemas` rewrites them).
    #[test]
    fn shipped_schemas_are_current() {
        let root = std::env::var_os("CAPSULE_TEST_ROOT")
            .map(std::path::PathBuf::from)
            .unwrap_or_else(|| env!("CARGO_MANIFEST_DIR").into());
        for (which, rel) in [
            (Which::Result, "schemas/result.schema.json"),
            (Which::Audit, "schemas/audit.schema.json"),
        ] {
            let path = root.join(rel);
            if std::env::var_os("CAPSULE_UPDATE_SCHEMA").is_some() {
                std::fs::write(&path, text(which)).unwrap();
            }
            let shipped = std::fs::read_to_string(&path).unwrap_or_default();
            assert!(
                shipped == text(which),
                "{rel} is stale: regenerate it with `capsule schema {} > {rel}` \
                 (or `CAPSULE_UPDATE_SCHEMA=1 cargo test --lib shipped_schemas`)",
                format!("{which:?}").to_lowercase()
            );
        }
    }

    #[test]
    fn every_result_field_is_described_and_the_always_present_ones_required() {
        let v: serde_json::Value = serde_json::from_str(&text(Which::Result)).unwrap();
        let props = v["properties"].as_object().unwrap();
        let sample =
            crate::result::RunResult::new("r".into(), crate::result::Termination::Exited, 0);
        let out = serde_json::to_value(&sample).unwrap();
        for k in out.as_object().unwrap().keys() {
            assert!(props.contains_key(k), "{k} is not in the result schema");
        }
        let required: Vec<&str> = v["required"]
            .as_array()
            .unwrap()
            .iter()
            .filter_map(|x| x.as_str())
            .collect();
        for k in [
            "schema",
            "run_id",
            "termination_reason",
            "exit_code",
            "enforcement",
        ] {
            assert!(required.contains(&k), "{k} not required");
        }
        assert!(
            !required.contains(&"left_behind"),
            "left_behind is omitted when empty"
        );
    }
}
