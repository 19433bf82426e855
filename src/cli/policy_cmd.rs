//! `capsule policy schema` and `capsule policy init [NAME]`.

use clap::Subcommand;

use crate::policy::{schema_json, starter};

#[derive(Debug, Subcommand)]
pub enum PolicyCmd {
    /// Print the policy's JSON Schema (the same as policy/schema.json).
    Schema,
    /// Print a starter policy (default: python-agent). Names: python-agent, ci-build, read-only-review.
    Init {
        /// Which starter policy.
        #[arg(value_parser = starter_names())]
        name: Option<String>,
    },
}

/// The starters' names (a `.yaml` suffix accepted), so completions offer them.
fn starter_names() -> clap::builder::PossibleValuesParser {
    clap::builder::PossibleValuesParser::new(starter::names().iter().map(|n| {
        // Three short strings, once per process (clap wants 'static).
        let file: &'static str = Box::leak(format!("{n}.yaml").into_boxed_str());
        clap::builder::PossibleValue::new(*n).alias(file)
    }))
}

pub fn run(cmd: PolicyCmd) -> i32 {
    match cmd {
        PolicyCmd::Schema => {
            print!("{}", schema_json());
            0
        }
        PolicyCmd::Init { name } => {
            let name = name.unwrap_or_else(|| starter::DEFAULT.to_string());
            match starter::get(&name) {
                Some(text) => {
                    print!("{text}");
                    0
                }
                None => {
                    super::error_line(format!(
                        "no starter policy named '{name}' (choose one of: {})",
                        starter::names().join(", ")
                    ));
                    125
                }
            }
        }
    }
}
