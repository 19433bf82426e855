//! The shipped `policy/schema.json` is exactly what `capsule policy schema` prints.

#[test]
fn shipped_schema_is_current() {
    // The staged copy when the suite runs as another user (scripts/test sets
    // CAPSULE_TEST_ROOT), else the checkout.
    let root = std::env::var_os("CAPSULE_TEST_ROOT")
        .map(std::path::PathBuf::from)
        .unwrap_or_else(|| env!("CARGO_MANIFEST_DIR").into());
    let path = root.join("policy/schema.json");
    if std::env::var_os("CAPSULE_UPDATE_SCHEMA").is_some() {
        std::fs::write(&path, super::schema_json()).unwrap();
    }
    let shipped = std::fs::read_to_string(&path).unwrap();
    assert!(
        shipped == super::schema_json(),
        "policy/schema.json is stale: regenerate it with `cargo run -- policy schema > policy/schema.json` \
         (or `CAPSULE_UPDATE_SCHEMA=1 cargo test --lib schema`)"
    );
}

#[test]
fn schema_describes_the_policy() {
    let v: serde_json::Value = serde_json::from_str(&super::schema_json()).unwrap();
    assert_eq!(v["title"], "Policy");
    assert_eq!(v["required"], serde_json::json!(["version"]));
    assert_eq!(v["additionalProperties"], false);
    for key in [
        "filesystem",
        "network",
        "env",
        "limits",
        "tools",
        "llm_access",
    ] {
        assert!(v["properties"].get(key).is_some(), "{key}");
    }
}
