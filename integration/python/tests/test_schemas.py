"""The JSON Schemas of what capsule prints (issue 45): `capsule schema
result` and `capsule schema audit` validate real results and audit records of
runs that end every way (exited, failed, timeout, refused, --explain, a proxy
refusal), checked by an independent validator (the `jsonschema` package), and
every field a real run prints is declared in the schema, nested ones too."""

from __future__ import annotations

import json
import subprocess

import pytest

jsonschema = pytest.importorskip(
    "jsonschema", reason="no jsonschema for this Python (Debian: apt-get install python3-jsonschema)"
)


def _schema(capsule_bin: str, which: str) -> dict:
    done = subprocess.run([capsule_bin, "schema", which], capture_output=True, text=True, timeout=30)
    assert done.returncode == 0, done.stderr
    return json.loads(done.stdout)


def _undeclared(value, schema, root: dict, path: str = "") -> list[str]:
    """Keys of `value` (objects, recursively through $ref) that `schema` does not declare."""
    if not isinstance(schema, dict):
        return []
    if "$ref" in schema:
        schema = root["$defs"][schema["$ref"].rsplit("/", 1)[1]]
    for alt in schema.get("anyOf", []) + schema.get("oneOf", []):
        if isinstance(alt, dict) and "$ref" in alt:
            return _undeclared(value, alt, root, path)
    if not isinstance(value, dict) or "properties" not in schema:
        return []
    out = []
    for key, v in value.items():
        sub = schema["properties"].get(key)
        if sub is None:
            out.append(path + key)
            continue
        out += _undeclared(v, sub, root, path + key + ".")
    return out


RUNS = [
    (["--", "/bin/true"], 0),
    (["--", "/bin/sh", "-c", "echo out; echo err >&2; exit 3"], 3),
    (["--timeout", "0.5", "--", "/bin/sleep", "5"], 124),
    (["--explain", "--", "/bin/sh", "-c", "cat /root/x 2>/dev/null; exit 0"], 0),
    (["--net", "proxy", "--allow-host", "example.invalid", "--", "/bin/true"], 0),
    (["--allow-read", "/nonexistent-capsule-schema-test", "--", "/bin/true"], 125),
]


@pytest.mark.parametrize("args,code", RUNS, ids=[" ".join(a) for a, _ in RUNS])
def test_real_results_and_audit_records_match_their_schemas(capsule_bin, tmp_path, args, code):
    result_schema = _schema(capsule_bin, "result")
    audit_schema = _schema(capsule_bin, "audit")
    jsonschema.Draft202012Validator.check_schema(result_schema)
    jsonschema.Draft202012Validator.check_schema(audit_schema)
    log = tmp_path / "audit.jsonl"
    done = subprocess.run(
        [capsule_bin, "exec", "--json", "--audit-log", str(log), *args],
        capture_output=True,
        text=True,
        timeout=60,
        cwd=tmp_path,
    )
    assert done.returncode == code, done.stderr
    result = json.loads(done.stdout.strip().splitlines()[-1])
    jsonschema.validate(result, result_schema, cls=jsonschema.Draft202012Validator)
    assert not _undeclared(result, result_schema, result_schema), _undeclared(result, result_schema, result_schema)
    lines = log.read_text().splitlines()
    assert len(lines) == 1, lines
    record = json.loads(lines[0])
    jsonschema.validate(record, audit_schema, cls=jsonschema.Draft202012Validator)
    assert not _undeclared(record, audit_schema, audit_schema), _undeclared(record, audit_schema, audit_schema)


def test_a_result_that_breaks_the_contract_is_caught(capsule_bin):
    """The schema is no formality: a wrong type, a missing field, an unknown termination fail."""
    schema = _schema(capsule_bin, "result")
    done = subprocess.run([capsule_bin, "exec", "--json", "--no-audit", "--", "/bin/true"],
                          capture_output=True, text=True, timeout=60)
    good = json.loads(done.stdout)
    for bad in (
        {**good, "exit_code": "0"},
        {k: v for k, v in good.items() if k != "run_id"},
        {**good, "termination_reason": "vanished"},
        {**good, "schema": "capsule.result/2"},
    ):
        with pytest.raises(jsonschema.ValidationError):
            jsonschema.validate(bad, schema, cls=jsonschema.Draft202012Validator)
