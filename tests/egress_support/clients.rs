//! The real clients, each as one `/bin/sh -c` script that is the SAME with
//! and without capsule: the credential comes from an environment variable
//! (the real token when run directly, capsule's placeholder inside a run),
//! the CA bundle and the proxy only from the environment the script is given
//! (SSL_CERT_FILE, REQUESTS_CA_BUNDLE, CURL_CA_BUNDLE, NODE_EXTRA_CA_CERTS,
//! GIT_SSL_CAINFO, PIP_CERT, HTTPS_PROXY): no script configures TLS itself,
//! and none disables verification.

use std::path::Path;
use std::process::{Command, Stdio};

use super::{PYTHON, TEST_PATH};

/// curl GET URL, `Authorization: Bearer $VAR` when VAR is given.
pub fn curl(url: &str, var: Option<&str>) -> String {
    let h = var
        .map(|v| format!(" -H \"Authorization: Bearer ${v}\""))
        .unwrap_or_default();
    format!("curl -sS --fail-with-body --max-time 30{h} '{url}'")
}

/// Python requests GET URL with `Authorization: Bearer $VAR`.
pub fn python_requests(url: &str, var: &str) -> String {
    format!(
        "{PYTHON} -c 'import os, sys, requests\n\
         r = requests.get(sys.argv[1], headers={{\"Authorization\": \"Bearer \" + os.environ[sys.argv[2]]}}, timeout=30)\n\
         print(r.text.strip()); sys.exit(0 if r.status_code == 200 else 1)' '{url}' {var}"
    )
}

/// Python urllib GET URL with Basic `x-access-token:$VAR`.
pub fn python_urllib(url: &str, var: &str) -> String {
    format!(
        "{PYTHON} -c 'import base64, os, sys, urllib.request\n\
         cred = base64.b64encode((\"x-access-token:\" + os.environ[sys.argv[2]]).encode()).decode()\n\
         req = urllib.request.Request(sys.argv[1], headers={{\"Authorization\": \"Basic \" + cred}})\n\
         print(urllib.request.urlopen(req, timeout=30).read().decode().strip())' '{url}' {var}"
    )
}

/// node's https module; through HTTPS_PROXY with a CONNECT tunnel made by
/// hand when it is set (node's https ignores the proxy variables).
const NODE_HTTPS_JS: &str = r#"
const http = require('http'), https = require('https'), tls = require('tls');
const u = new URL(process.argv[2]);
const headers = {Authorization: 'Bearer ' + process.env[process.argv[3]]};
function go(extra) {
  const req = https.request({host: u.hostname, port: u.port, path: u.pathname + u.search, headers,
                             servername: u.hostname, ...extra}, res => {
    let b = ''; res.on('data', d => b += d);
    res.on('end', () => { console.log(b.trim()); process.exit(res.statusCode === 200 ? 0 : 1); });
  });
  req.on('error', e => { console.error('node https: ' + e.message); process.exit(2); });
  req.end();
}
const p = process.env.HTTPS_PROXY || process.env.https_proxy;
if (!p) { go({}); } else {
  const pu = new URL(p);
  const c = http.request({host: pu.hostname, port: pu.port, method: 'CONNECT', path: u.host});
  c.on('connect', (res, socket) => {
    if (res.statusCode !== 200) { console.error('CONNECT ' + res.statusCode); process.exit(3); }
    go({createConnection: () => tls.connect({socket, servername: u.hostname})});
  });
  c.on('error', e => { console.error('CONNECT: ' + e.message); process.exit(2); });
  c.end();
}
"#;

/// Write the node https client into WORK; its command line.
pub fn node_https(url: &str, var: &str, work: &Path) -> String {
    super::write_file(&work.join("https-client.js"), NODE_HTTPS_JS);
    format!("node '{}/https-client.js' '{url}' {var}", work.display())
}

/// node fetch (undici's, from NODE_PATH) through undici's ProxyAgent when
/// HTTPS_PROXY is set: node 18/20's global fetch ignores the proxy variables.
const NODE_FETCH_JS: &str = r#"
const {fetch, ProxyAgent} = require('undici');
const p = process.env.HTTPS_PROXY || process.env.https_proxy;
fetch(process.argv[2], {headers: {Authorization: 'Bearer ' + process.env[process.argv[3]]},
                        dispatcher: p ? new ProxyAgent(p) : undefined})
  .then(async r => { console.log((await r.text()).trim()); process.exit(r.status === 200 ? 0 : 1); })
  .catch(e => { console.error('fetch: ' + String(e.cause || e)); process.exit(2); });
"#;

/// Write the node fetch client into WORK; its command line (NODE_PATH must
/// name the node_modules holding undici).
pub fn node_fetch(url: &str, var: &str, work: &Path) -> String {
    super::write_file(&work.join("fetch-client.js"), NODE_FETCH_JS);
    format!("node '{}/fetch-client.js' '{url}' {var}", work.display())
}

/// `git clone`, a commit, `git push` (the credential as an extra header).
pub fn git_roundtrip(url: &str, var: &str, work: &Path, subject: &str) -> String {
    let w = work.display();
    format!(
        "set -e\ncd '{w}'\n\
         git -c http.extraHeader=\"Authorization: Bearer ${var}\" clone -q '{url}' clone\n\
         cd clone\ncat README\necho '{subject}' > pushed.txt\ngit add pushed.txt\n\
         git -c user.name=run -c user.email=run@capsule.invalid commit -qm '{subject}'\n\
         git -c http.extraHeader=\"Authorization: Bearer ${var}\" push -q origin main\n\
         echo PUSHED\n"
    )
}

/// `pip install` of the test wheel from the private index (Basic in the URL).
pub fn pip_install(port: u16, var: &str, work: &Path) -> String {
    let w = work.display();
    format!(
        "set -e\n{PYTHON} -m pip install --disable-pip-version-check --no-cache-dir --quiet \
         --no-input --target '{w}/site' --index-url \"https://__token__:${var}@localhost:{port}/simple/\" \
         '{pkg}=={ver}'\n\
         PYTHONPATH='{w}/site' {PYTHON} -c 'import capsule_egress_demo as m; print(m.VALUE)'\n",
        pkg = super::PYPI_PACKAGE,
        ver = super::PYPI_VERSION,
    )
}

/// `npm install` of the seed package, then `npm publish` of PUBLISH@1.0.0,
/// the token as `${VAR}` in $HOME/.npmrc (npm expands it).
pub fn npm_roundtrip(port: u16, var: &str, work: &Path, publish: &str) -> String {
    let w = work.display();
    format!(
        "set -e\nmkdir -p \"$HOME\" '{w}/proj' '{w}/pub'\n\
         printf 'registry=https://localhost:{port}/\\n//localhost:{port}/:_authToken=${{{var}}}\\n' > \"$HOME/.npmrc\"\n\
         cd '{w}/proj'\necho '{{\"name\":\"proj\",\"version\":\"1.0.0\"}}' > package.json\n\
         npm install --no-audit --no-fund --loglevel=error '{seed}@1.0.0'\n\
         node -e 'console.log(\"seed says \" + require(\"{seed}\"))'\n\
         cd '{w}/pub'\necho '{{\"name\":\"{publish}\",\"version\":\"1.0.0\"}}' > package.json\n\
         echo 'module.exports = 1;' > index.js\n\
         npm publish --loglevel=error\necho PUBLISHED\n",
        seed = super::servers::NPM_SEED,
    )
}

/// What a script run gave.
pub struct Out {
    pub code: Option<i32>,
    pub stdout: String,
    pub stderr: String,
}

impl Out {
    pub fn describe(&self) -> String {
        format!(
            "exit {:?}\nstdout: {}\nstderr: {}",
            self.code, self.stdout, self.stderr
        )
    }
}

/// Run SCRIPT directly (no capsule) with exactly ENV (plus PATH), from CWD.
pub fn direct(script: &str, env: &[(String, String)], cwd: &Path) -> Out {
    let out = Command::new("/bin/sh")
        .args(["-c", script])
        .env_clear()
        .env("PATH", TEST_PATH)
        .env("LANG", "C.UTF-8")
        .envs(env.iter().map(|(k, v)| (k, v)))
        .current_dir(cwd)
        .stdin(Stdio::null())
        .output()
        .expect("run /bin/sh");
    Out {
        code: out.status.code(),
        stdout: String::from_utf8_lossy(&out.stdout).into_owned(),
        stderr: String::from_utf8_lossy(&out.stderr).into_owned(),
    }
}

/// The environment a direct run gets to trust CA: the variables capsule
/// sets inside a run (naming its bundle), here naming the test CA.
/// NPM_CONFIG_CAFILE: npm gives its own `ca` to every TLS connection, so
/// node's NODE_EXTRA_CA_CERTS does not reach it (SELF_SIGNED_CERT_IN_CHAIN).
pub fn ca_env(ca: &Path) -> Vec<(String, String)> {
    [
        "SSL_CERT_FILE",
        "REQUESTS_CA_BUNDLE",
        "CURL_CA_BUNDLE",
        "NODE_EXTRA_CA_CERTS",
        "GIT_SSL_CAINFO",
        "PIP_CERT",
        "NPM_CONFIG_CAFILE",
    ]
    .iter()
    .map(|k| (k.to_string(), ca.display().to_string()))
    .collect()
}
