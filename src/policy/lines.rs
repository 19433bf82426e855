//! Best-effort map from key paths (`filesystem.write[1]`, `env.set.LANG`) to
//! their 1-based (line, column) in the policy text, so reports can say
//! "from policy line 7". It is a light scan, not a parser: the real parse has
//! already succeeded when this runs, and a key it misses just has no line.

use std::collections::BTreeMap;

/// (line, column), both 1-based.
pub type LineCol = (usize, usize);

/// Scan YAML (block style, with one-line flow collections) or JSON text.
pub fn scan(text: &str, json: bool) -> BTreeMap<String, LineCol> {
    let mut out = BTreeMap::new();
    if json {
        let chars: Vec<char> = text.chars().collect();
        let mut flow = Flow {
            chars: &chars,
            i: 0,
            line: 1,
            col: 1,
            out: &mut out,
        };
        flow.value("");
    } else {
        scan_yaml(text, &mut out);
    }
    out
}

/// Line of `key`, falling back to its closest recorded ancestor
/// (`a.b[2].c` → `a.b[2]` → `a.b` → `a`).
pub fn lookup(map: &BTreeMap<String, usize>, key: &str) -> Option<usize> {
    let mut k = key;
    loop {
        if let Some(l) = map.get(k) {
            return Some(*l);
        }
        let cut = k.rfind(['.', '['])?;
        k = &k[..cut];
    }
}

/// Like [`lookup`], for the (line, column) map.
pub fn lookup_col(map: &BTreeMap<String, LineCol>, key: &str) -> Option<LineCol> {
    let mut k = key;
    loop {
        if let Some(l) = map.get(k) {
            return Some(*l);
        }
        let cut = k.rfind(['.', '['])?;
        k = &k[..cut];
    }
}

fn join(parent: &str, key: &str) -> String {
    if parent.is_empty() {
        key.to_string()
    } else {
        format!("{parent}.{key}")
    }
}

enum Frame {
    /// `key:` whose value is a nested block.
    Key { indent: usize, path: String },
    /// `- ` item of a sequence.
    Item { indent: usize, path: String },
}

impl Frame {
    fn indent(&self) -> usize {
        match self {
            Frame::Key { indent, .. } | Frame::Item { indent, .. } => *indent,
        }
    }
    fn path(&self) -> &str {
        match self {
            Frame::Key { path, .. } | Frame::Item { path, .. } => path,
        }
    }
}

fn scan_yaml(text: &str, out: &mut BTreeMap<String, LineCol>) {
    let mut stack: Vec<Frame> = Vec::new();
    let mut seq_next: BTreeMap<String, usize> = BTreeMap::new();
    let mut block_scalar_indent: Option<usize> = None;
    for (n, raw) in text.lines().enumerate() {
        let line_no = n + 1;
        let indent = raw.len() - raw.trim_start_matches(' ').len();
        let content = strip_comment(&raw[indent..]).trim_end();
        if let Some(bi) = block_scalar_indent {
            if content.is_empty() || indent > bi {
                continue; // inside a `|` or `>` block scalar
            }
            block_scalar_indent = None;
        }
        if content.is_empty() || content == "---" || content == "..." || content.starts_with('%') {
            continue;
        }
        let mut indent = indent;
        let mut content = content;
        // Sequence items, possibly several on a line (`- - x`) or holding a mapping.
        while content == "-" || content.starts_with("- ") {
            while stack.last().is_some_and(|f| {
                f.indent() > indent || (f.indent() == indent && matches!(f, Frame::Item { .. }))
            }) {
                stack.pop();
            }
            let owner = stack
                .last()
                .map(|f| f.path().to_string())
                .unwrap_or_default();
            let idx = seq_next.entry(owner.clone()).or_insert(0);
            let path = format!("{owner}[{idx}]");
            *idx += 1;
            let rest = content[1..].trim_start();
            let offset = content.len() - rest.len();
            out.entry(path.clone())
                .or_insert((line_no, indent + offset + 1));
            stack.push(Frame::Item { indent, path });
            indent += offset;
            content = rest;
        }
        if content.is_empty() {
            continue;
        }
        let Some((key, value, value_off)) = split_key(content) else {
            // A plain scalar (sequence item value or continuation); flow collections of items.
            if let Some(top) = stack.last() {
                if content.starts_with('[') || content.starts_with('{') {
                    let path = top.path().to_string();
                    flow_line(content, line_no, indent, &path, out);
                }
            }
            continue;
        };
        while stack.last().is_some_and(|f| f.indent() >= indent) {
            stack.pop();
        }
        let parent = stack
            .last()
            .map(|f| f.path().to_string())
            .unwrap_or_default();
        let path = join(&parent, &key);
        out.entry(path.clone()).or_insert((line_no, indent + 1));
        let value = value.trim();
        if value.is_empty() || value.starts_with('&') && !value.contains(' ') {
            stack.push(Frame::Key { indent, path });
        } else if value.starts_with('|') || value.starts_with('>') {
            block_scalar_indent = Some(indent);
        } else if value.starts_with('[') || value.starts_with('{') {
            flow_line(value, line_no, indent + value_off, &path, out);
        }
    }
}

/// `key: value` → (key, value, byte offset of value). Keys may be quoted.
fn split_key(content: &str) -> Option<(String, &str, usize)> {
    let bytes = content.as_bytes();
    let (key, after) = match bytes.first()? {
        q @ (b'"' | b'\'') => {
            let end = content[1..].find(*q as char)? + 1;
            (content[1..end].to_string(), end + 1)
        }
        b'[' | b'{' => return None,
        _ => {
            let mut i = 0;
            loop {
                let c = *bytes.get(i)?;
                if c == b':' && matches!(bytes.get(i + 1), None | Some(b' ' | b'\t')) {
                    break;
                }
                i += 1;
            }
            (content[..i].trim_end().to_string(), i)
        }
    };
    let rest = content[after..].strip_prefix(':')?;
    let value_off = after + 1 + (rest.len() - rest.trim_start().len());
    Some((key, rest, value_off))
}

/// Drop a `# comment` that is not inside quotes.
fn strip_comment(s: &str) -> &str {
    let mut quote: Option<char> = None;
    let mut prev_space = true;
    for (i, c) in s.char_indices() {
        match quote {
            Some(q) if c == q => quote = None,
            Some(_) => {}
            None if c == '"' || c == '\'' => quote = Some(c),
            None if c == '#' && prev_space => return &s[..i],
            None => {}
        }
        prev_space = c == ' ' || c == '\t';
    }
    s
}

fn flow_line(s: &str, line: usize, col0: usize, path: &str, out: &mut BTreeMap<String, LineCol>) {
    let chars: Vec<char> = s.chars().collect();
    let mut flow = Flow {
        chars: &chars,
        i: 0,
        line,
        col: col0 + 1,
        out,
    };
    flow.value(path);
}

/// A tiny scanner for JSON and YAML flow collections (quoted or plain scalars).
struct Flow<'a> {
    chars: &'a [char],
    i: usize,
    line: usize,
    col: usize,
    out: &'a mut BTreeMap<String, LineCol>,
}

impl Flow<'_> {
    fn peek(&self) -> Option<char> {
        self.chars.get(self.i).copied()
    }
    fn bump(&mut self) -> Option<char> {
        let c = self.peek()?;
        self.i += 1;
        if c == '\n' {
            self.line += 1;
            self.col = 1;
        } else {
            self.col += 1;
        }
        Some(c)
    }
    fn ws(&mut self) {
        while self.peek().is_some_and(char::is_whitespace) {
            self.bump();
        }
    }
    fn here(&self) -> LineCol {
        (self.line, self.col)
    }

    /// Skip one value; record the keys and items inside it under `path`.
    fn value(&mut self, path: &str) {
        self.ws();
        match self.peek() {
            Some('{') => {
                self.bump();
                loop {
                    self.ws();
                    match self.peek() {
                        None => return,
                        Some('}') => {
                            self.bump();
                            return;
                        }
                        Some(',') => {
                            self.bump();
                            continue;
                        }
                        _ => {}
                    }
                    let at = self.here();
                    let key = self.scalar(&[':', ',', '}']);
                    let child = join(path, &key);
                    self.out.entry(child.clone()).or_insert(at);
                    self.ws();
                    if self.peek() == Some(':') {
                        self.bump();
                        self.value(&child);
                    }
                }
            }
            Some('[') => {
                self.bump();
                let mut idx = 0;
                loop {
                    self.ws();
                    match self.peek() {
                        None => return,
                        Some(']') => {
                            self.bump();
                            return;
                        }
                        Some(',') => {
                            self.bump();
                            continue;
                        }
                        _ => {}
                    }
                    let child = format!("{path}[{idx}]");
                    idx += 1;
                    let at = self.here();
                    self.out.entry(child.clone()).or_insert(at);
                    self.value(&child);
                }
            }
            Some(_) => {
                self.scalar(&[',', ']', '}']);
            }
            None => {}
        }
    }

    /// Read a quoted or plain scalar; return its (unescaped enough) text.
    fn scalar(&mut self, stops: &[char]) -> String {
        let mut s = String::new();
        match self.peek() {
            Some(q @ ('"' | '\'')) => {
                self.bump();
                while let Some(c) = self.bump() {
                    if c == q {
                        break;
                    }
                    if c == '\\' && q == '"' {
                        if let Some(e) = self.bump() {
                            s.push(e);
                        }
                        continue;
                    }
                    s.push(c);
                }
            }
            _ => {
                while let Some(c) = self.peek() {
                    if stops.contains(&c) || c == '\n' {
                        break;
                    }
                    s.push(c);
                    self.bump();
                }
                s = s.trim().to_string();
            }
        }
        s
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn yaml_block_and_flow() {
        let text = "\
version: 1
filesystem:
  read: [./data, \"./x\"]   # comment
  write:
    - ./out
    - path: ./opt
      optional: true
env:
  set: {A: \"1\", B: x}
tools:
  allow:
  - name: s
    command: [a, b]
  - name: t
    forward: true
";
        let m = scan(text, false);
        assert_eq!(m["version"], (1, 1));
        assert_eq!(m["filesystem.read"], (3, 3));
        assert_eq!(m["filesystem.read[0]"], (3, 10));
        assert_eq!(m["filesystem.read[1]"], (3, 18));
        assert_eq!(m["filesystem.write[0]"], (5, 7));
        assert_eq!(m["filesystem.write[1]"], (6, 7));
        assert_eq!(m["filesystem.write[1].optional"], (7, 7));
        assert_eq!(m["env.set.B"], (9, 17));
        assert_eq!(m["tools.allow[1]"], (14, 5));
        assert_eq!(m["tools.allow[1].forward"], (15, 5));
        assert_eq!(m["tools.allow[0].command[1]"], (13, 18));
        assert!(!m.contains_key("tools.max_calls"));
    }

    #[test]
    fn json() {
        let text = "{\n  \"version\": 1,\n  \"filesystem\": {\"read\": [\"a\",\n \"b\"]}\n}";
        let m = scan(text, true);
        assert_eq!(m["version"], (2, 3));
        assert_eq!(m["filesystem.read"], (3, 18));
        assert_eq!(m["filesystem.read[1]"], (4, 2));
    }

    #[test]
    fn lookup_falls_back_to_ancestors() {
        let mut m = BTreeMap::new();
        m.insert("filesystem.write".to_string(), 4);
        assert_eq!(lookup(&m, "filesystem.write[3]"), Some(4));
        assert_eq!(lookup(&m, "network.mode"), None);
    }
}
