//! Layers inside a crate: the modules of each crate listed in [`CRATES`] import one another
//! without a circle, at every level.
//!
//! A crate's modules are rooms on floors: a module may use the modules beside it that sit below
//! it, never one that (through others) uses it back. The compiler keeps that rule between crates;
//! this test keeps it inside one. It reads every `crate::…`, `super::…` and `self::…` path in a
//! crate's source (comments and strings left out), resolves each to the module file it names
//! (the longest module prefix of the path), and builds one graph per level: among the children
//! of the crate root, among the children of each module that has some, and so on, each child
//! standing for itself and everything below it. A path into one's own ancestor is not an arrow
//! (a module reads the facade it belongs to), nor a path into one's own descendant (a facade
//! uses what it is made of); every other path is an arrow between the two siblings it joins.
//! A circle at any level fails the test, listed with the lines that make each of its arrows.
//!
//! `cargo test -p tools --test layers -- --nocapture` prints each crate's rooms and arrows.

use std::collections::{BTreeMap, BTreeSet};
use std::fmt::Write as _;
use std::path::{Path, PathBuf};

use regex::Regex;

/// The crates whose inside is checked: one line each.
const CRATES: &[&str] = &[
    "hermes",
    "suite-records",
    "fake-server",
    "fixtures",
    "judge",
    "explorer",
    "tools",
];

/// A module, as the path of names from its crate root.
type Module = Vec<String>;

/// One source file: the module it is, and its text with comments and literals blanked.
struct Source {
    file: PathBuf,
    module: Module,
    code: String,
}

/// An arrow between two sibling modules, with one line that makes it.
#[derive(Debug, Clone)]
struct Arrow {
    from: Module,
    to: Module,
    at: String,
}

fn workspace() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR"))
        .parent()
        .expect("tools sits in the workspace")
        .to_path_buf()
}

/// The crate roots of a package: its library, and each binary with the modules beside it.
fn roots(package: &Path) -> Vec<(PathBuf, PathBuf)> {
    let src = package.join("src");
    let mut roots = Vec::new();
    if src.join("lib.rs").exists() {
        roots.push((src.clone(), src.join("lib.rs")));
    }
    if let Ok(entries) = std::fs::read_dir(src.join("bin")) {
        for entry in entries.flatten() {
            let path = entry.path();
            if path.is_dir() && path.join("main.rs").exists() {
                roots.push((path.clone(), path.join("main.rs")));
            } else if path.extension().is_some_and(|ext| ext == "rs") {
                roots.push((path.clone(), path));
            }
        }
    }
    roots.sort();
    roots
}

/// Every `.rs` file under `dir` (a binary's own directory is another root's).
fn rust_files(dir: &Path, root_file: &Path, out: &mut Vec<PathBuf>) {
    if dir.is_file() {
        out.push(dir.to_path_buf());
        return;
    }
    let Ok(entries) = std::fs::read_dir(dir) else {
        return;
    };
    for entry in entries.flatten() {
        let path = entry.path();
        if path.is_dir() {
            if root_file.ends_with("lib.rs") && path == dir.join("bin") {
                continue;
            }
            rust_files(&path, root_file, out);
        } else if path.extension().is_some_and(|ext| ext == "rs") {
            out.push(path);
        }
    }
}

/// The module a file is, from its path under its root's directory.
fn module_of(base: &Path, root_file: &Path, file: &Path) -> Module {
    if file == root_file {
        return Vec::new();
    }
    let relative = file.strip_prefix(base).unwrap_or(file).with_extension("");
    let mut names: Module = relative
        .components()
        .map(|part| part.as_os_str().to_string_lossy().into_owned())
        .collect();
    if names.last().is_some_and(|name| name == "mod") {
        names.pop();
    }
    names
}

/// `text` with comments, string, byte-string and char literals replaced by spaces (newlines
/// kept, so offsets still give line numbers).
fn blank_comments_and_literals(text: &str) -> String {
    let bytes = text.as_bytes();
    let mut out = bytes.to_vec();
    let blank = |out: &mut Vec<u8>, from: usize, to: usize| {
        for byte in &mut out[from..to] {
            if *byte != b'\n' {
                *byte = b' ';
            }
        }
    };
    let mut i = 0;
    while i < bytes.len() {
        let rest = &bytes[i..];
        if rest.starts_with(b"//") {
            let end = rest
                .iter()
                .position(|b| *b == b'\n')
                .map_or(bytes.len(), |n| i + n);
            blank(&mut out, i, end);
            i = end;
        } else if rest.starts_with(b"/*") {
            let (mut depth, mut j) = (0usize, i);
            while j < bytes.len() {
                if bytes[j..].starts_with(b"/*") {
                    depth += 1;
                    j += 2;
                } else if bytes[j..].starts_with(b"*/") {
                    depth -= 1;
                    j += 2;
                    if depth == 0 {
                        break;
                    }
                } else {
                    j += 1;
                }
            }
            blank(&mut out, i, j);
            i = j;
        } else if let Some(end) = raw_string_end(bytes, i) {
            blank(&mut out, i, end);
            i = end;
        } else if rest[0] == b'"' {
            let mut j = i + 1;
            while j < bytes.len() && bytes[j] != b'"' {
                j += if bytes[j] == b'\\' { 2 } else { 1 };
            }
            let end = (j + 1).min(bytes.len());
            blank(&mut out, i, end);
            i = end;
        } else if rest[0] == b'\'' {
            // A char literal (`'a'`, `'\n'`, `'\u{1F600}'`), not a lifetime (`'a`).
            let close = match rest.get(1) {
                Some(b'\\') => rest[2..].iter().position(|b| *b == b'\'').map(|n| n + 2),
                Some(_) => std::str::from_utf8(&rest[1..rest.len().min(6)])
                    .ok()
                    .or_else(|| std::str::from_utf8(&rest[1..rest.len().min(2)]).ok())
                    .and_then(|s| s.chars().next())
                    .map(|c| 1 + c.len_utf8())
                    .filter(|n| rest.get(*n) == Some(&b'\'')),
                None => None,
            };
            match close {
                Some(n) => {
                    blank(&mut out, i, i + n + 1);
                    i += n + 1;
                }
                None => i += 1,
            }
        } else {
            i += 1;
        }
    }
    String::from_utf8_lossy(&out).into_owned()
}

/// Where a raw (byte) string starting at `i` ends, if one starts there.
fn raw_string_end(bytes: &[u8], i: usize) -> Option<usize> {
    let preceded_by_ident = i > 0 && (bytes[i - 1].is_ascii_alphanumeric() || bytes[i - 1] == b'_');
    if preceded_by_ident {
        return None;
    }
    let mut j = i;
    if bytes.get(j) == Some(&b'b') {
        j += 1;
    }
    if bytes.get(j) != Some(&b'r') {
        return None;
    }
    j += 1;
    let hashes = bytes[j..].iter().take_while(|b| **b == b'#').count();
    j += hashes;
    if bytes.get(j) != Some(&b'"') {
        return None;
    }
    let closing: Vec<u8> = std::iter::once(b'"')
        .chain(std::iter::repeat_n(b'#', hashes))
        .collect();
    let body = j + 1;
    let end = bytes[body..]
        .windows(closing.len())
        .position(|window| window == closing.as_slice())
        .map_or(bytes.len(), |n| body + n + closing.len());
    Some(end)
}

/// The inline modules (`mod name { … }`) open at each offset of `code`: their names, outermost
/// first.
fn inline_scopes(code: &str) -> Vec<(usize, usize, String)> {
    let opening = Regex::new(r"\bmod\s+(\w+)\s*\{").expect("a valid pattern");
    let bytes = code.as_bytes();
    opening
        .captures_iter(code)
        .map(|captures| {
            let whole = captures.get(0).expect("the match");
            let mut depth = 0usize;
            let mut end = bytes.len();
            for (offset, byte) in bytes.iter().enumerate().skip(whole.end() - 1) {
                match byte {
                    b'{' => depth += 1,
                    b'}' => {
                        depth -= 1;
                        if depth == 0 {
                            end = offset;
                            break;
                        }
                    }
                    _ => {}
                }
            }
            (whole.end(), end, captures[1].to_owned())
        })
        .collect()
}

/// Expands a use tree (`crate::{a, b::{c, d}}`) into its paths.
fn expand_use_tree(tree: &str) -> Vec<String> {
    let tree: String = tree.chars().filter(|c| !c.is_whitespace()).collect();
    let Some(open) = tree.find('{') else {
        return vec![tree];
    };
    let prefix = &tree[..open];
    let inner = tree[open + 1..]
        .strip_suffix('}')
        .unwrap_or(&tree[open + 1..]);
    let mut parts = Vec::new();
    let (mut depth, mut start) = (0usize, 0usize);
    for (offset, c) in inner.char_indices() {
        match c {
            '{' => depth += 1,
            '}' => depth = depth.saturating_sub(1),
            ',' if depth == 0 => {
                parts.push(&inner[start..offset]);
                start = offset + 1;
            }
            _ => {}
        }
    }
    parts.push(&inner[start..]);
    parts
        .into_iter()
        .filter(|part| !part.is_empty())
        .flat_map(|part| {
            let joined = if part == "self" {
                prefix.trim_end_matches("::").to_owned()
            } else {
                format!("{prefix}{part}")
            };
            expand_use_tree(&joined)
        })
        .collect()
}

/// Every path starting with `crate`, `super` or `self` in `code`, with its offset.
fn relative_paths(code: &str) -> Vec<(usize, String)> {
    let use_statement = Regex::new(r"\buse\s+([^;]*);").expect("a valid pattern");
    let path = Regex::new(r"\b(?:crate|super|self)(?:\s*::\s*\w+)+").expect("a valid pattern");
    let alias = Regex::new(r"\s+as\s+\w+").expect("a valid pattern");
    let mut found = Vec::new();
    let mut rest = code.to_owned();
    for captures in use_statement.captures_iter(code) {
        let whole = captures.get(0).expect("the match");
        let tree = alias.replace_all(&captures[1], "");
        for expanded in expand_use_tree(&tree) {
            found.push((whole.start(), expanded));
        }
        rest.replace_range(whole.range(), &" ".repeat(whole.len()));
    }
    for matched in path.find_iter(&rest) {
        let text: String = matched
            .as_str()
            .chars()
            .filter(|c| !c.is_whitespace())
            .collect();
        found.push((matched.start(), text));
    }
    found
}

/// The module `path` (as written in `from`, inside the inline modules `inline`) names: its
/// longest prefix that is a module of the crate.
fn resolve(
    path: &str,
    from: &Module,
    inline: &[String],
    modules: &BTreeSet<Module>,
) -> Option<Module> {
    let mut segments = path.split("::").map(str::trim).filter(|s| !s.is_empty());
    let mut here: Module = from.iter().cloned().chain(inline.iter().cloned()).collect();
    match segments.next()? {
        "crate" => here.clear(),
        "self" => {}
        "super" => {
            here.pop()?;
        }
        _ => return None,
    }
    for segment in segments {
        match segment {
            "super" => {
                here.pop()?;
            }
            "self" => {}
            name => here.push(name.to_owned()),
        }
    }
    (0..=here.len())
        .rev()
        .map(|len| here[..len].to_vec())
        .find(|prefix| modules.contains(prefix))
}

/// The sources of one crate root.
fn sources(base: &Path, root_file: &Path) -> Vec<Source> {
    let mut files = Vec::new();
    rust_files(base, root_file, &mut files);
    files.sort();
    files
        .into_iter()
        .map(|file| {
            let text = std::fs::read_to_string(&file).expect("a readable source file");
            Source {
                module: module_of(base, root_file, &file),
                code: blank_comments_and_literals(&text),
                file,
            }
        })
        .collect()
}

/// The arrows between siblings that the paths of `sources` make, by the module whose children
/// they join.
fn arrows(sources: &[Source], workspace: &Path) -> BTreeMap<Module, Vec<Arrow>> {
    let modules: BTreeSet<Module> = sources.iter().map(|source| source.module.clone()).collect();
    let mut by_level: BTreeMap<Module, Vec<Arrow>> = BTreeMap::new();
    for source in sources {
        let scopes = inline_scopes(&source.code);
        for (offset, path) in relative_paths(&source.code) {
            let inline: Vec<String> = scopes
                .iter()
                .filter(|(start, end, _)| *start <= offset && offset < *end)
                .map(|(_, _, name)| name.clone())
                .collect();
            let Some(target) = resolve(&path, &source.module, &inline, &modules) else {
                continue;
            };
            let from = &source.module;
            let common = from.iter().zip(&target).take_while(|(a, b)| a == b).count();
            if common == from.len() || common == target.len() {
                // Into an ancestor, a descendant or itself.
                continue;
            }
            let line = source.code[..offset].matches('\n').count() + 1;
            let file = source.file.strip_prefix(workspace).unwrap_or(&source.file);
            by_level
                .entry(from[..common].to_vec())
                .or_default()
                .push(Arrow {
                    from: from[..=common].to_vec(),
                    to: target[..=common].to_vec(),
                    at: format!("{}:{line} `{path}`", file.display()),
                });
        }
    }
    by_level
}

/// The strongly connected groups of more than one node (Tarjan's algorithm).
fn circles(arrows: &[Arrow]) -> Vec<Vec<Module>> {
    let nodes: BTreeSet<&Module> = arrows.iter().flat_map(|a| [&a.from, &a.to]).collect();
    let nodes: Vec<&Module> = nodes.into_iter().collect();
    let index_of = |module: &Module| nodes.iter().position(|node| *node == module).unwrap_or(0);
    let mut next: Vec<BTreeSet<usize>> = vec![BTreeSet::new(); nodes.len()];
    for arrow in arrows {
        next[index_of(&arrow.from)].insert(index_of(&arrow.to));
    }
    struct Tarjan<'g> {
        next: &'g [BTreeSet<usize>],
        index: Vec<Option<usize>>,
        low: Vec<usize>,
        stack: Vec<usize>,
        on_stack: Vec<bool>,
        counter: usize,
        groups: Vec<Vec<usize>>,
    }
    impl Tarjan<'_> {
        fn visit(&mut self, v: usize) {
            self.index[v] = Some(self.counter);
            self.low[v] = self.counter;
            self.counter += 1;
            self.stack.push(v);
            self.on_stack[v] = true;
            for &w in self.next[v].iter() {
                match self.index[w] {
                    None => {
                        self.visit(w);
                        self.low[v] = self.low[v].min(self.low[w]);
                    }
                    Some(index) if self.on_stack[w] => self.low[v] = self.low[v].min(index),
                    Some(_) => {}
                }
            }
            if Some(self.low[v]) == self.index[v] {
                let mut group = Vec::new();
                while let Some(w) = self.stack.pop() {
                    self.on_stack[w] = false;
                    group.push(w);
                    if w == v {
                        break;
                    }
                }
                if group.len() > 1 {
                    group.sort_unstable();
                    self.groups.push(group);
                }
            }
        }
    }
    let mut tarjan = Tarjan {
        next: &next,
        index: vec![None; nodes.len()],
        low: vec![0; nodes.len()],
        stack: Vec::new(),
        on_stack: vec![false; nodes.len()],
        counter: 0,
        groups: Vec::new(),
    };
    for v in 0..nodes.len() {
        if tarjan.index[v].is_none() {
            tarjan.visit(v);
        }
    }
    tarjan
        .groups
        .into_iter()
        .map(|group| group.into_iter().map(|i| nodes[i].clone()).collect())
        .collect()
}

fn name(module: &Module) -> String {
    if module.is_empty() {
        "the crate root".to_owned()
    } else {
        module.join("::")
    }
}

/// What one crate's check found: a summary line and every circle, described.
fn check(package: &str) -> (String, Vec<String>) {
    let workspace = workspace();
    let mut modules = 0;
    let mut arrow_count = 0;
    let mut circling = 0;
    let mut found = Vec::new();
    for (base, root_file) in roots(&workspace.join(package)) {
        let sources = sources(&base, &root_file);
        modules += sources.len();
        let root = root_file
            .strip_prefix(&workspace)
            .unwrap_or(&root_file)
            .display()
            .to_string();
        for (level, arrows) in arrows(&sources, &workspace) {
            let distinct: BTreeSet<(&Module, &Module)> =
                arrows.iter().map(|a| (&a.from, &a.to)).collect();
            arrow_count += distinct.len();
            for circle in circles(&arrows) {
                let mut text = format!(
                    "{package} ({root}): a circle among the modules of {}: {}\n",
                    name(&level),
                    circle.iter().map(name).collect::<Vec<_>>().join(", ")
                );
                let mut shown = BTreeSet::new();
                for arrow in &arrows {
                    if circle.contains(&arrow.from)
                        && circle.contains(&arrow.to)
                        && shown.insert((arrow.from.clone(), arrow.to.clone()))
                    {
                        let _ = writeln!(
                            text,
                            "  {} -> {}  ({})",
                            name(&arrow.from),
                            name(&arrow.to),
                            arrow.at
                        );
                    }
                }
                circling += shown.len();
                found.push(text);
            }
        }
    }
    let summary = format!(
        "{package}: {modules} module files, {arrow_count} arrows between siblings, {} circles \
         ({circling} arrows in them)",
        found.len()
    );
    (summary, found)
}

#[test]
fn no_module_imports_one_that_imports_it_back() {
    let mut all = Vec::new();
    for package in CRATES {
        assert!(
            workspace().join(package).join("src").is_dir(),
            "{package} is listed in CRATES but has no src/"
        );
        let (summary, found) = check(package);
        eprintln!("{summary}");
        for circle in &found {
            eprintln!("{circle}");
        }
        all.extend(found);
    }
    assert!(
        all.is_empty(),
        "{} circle(s) of imports; break each by moving what both sides need below both:\n\n{}",
        all.len(),
        all.join("\n")
    );
}

#[test]
fn a_use_tree_expands_into_its_paths() {
    assert_eq!(
        expand_use_tree("crate::{a, b::{c, self}, d}"),
        ["crate::a", "crate::b::c", "crate::b", "crate::d"]
    );
    let code = blank_comments_and_literals(
        "// crate::comment\nlet s = \"crate::string\"; let c = '}'; use super::x as y;\nfn f<'a>() { crate::y::z(); }",
    );
    let paths: Vec<String> = relative_paths(&code).into_iter().map(|(_, p)| p).collect();
    assert_eq!(paths, ["super::x", "crate::y::z"]);
}

#[test]
fn a_circle_is_found_and_an_arrow_into_an_ancestor_is_not_one() {
    let modules: BTreeSet<Module> = [
        vec![],
        vec!["a".into()],
        vec!["a".into(), "x".into()],
        vec!["b".into()],
    ]
    .into_iter()
    .collect();
    let sources = [
        ("src/a.rs", vec!["a"], "use crate::b::Thing; mod x;"),
        ("src/a/x.rs", vec!["a", "x"], "use super::Facade;"),
        ("src/b.rs", vec!["b"], "fn f() { crate::a::x::g(); }"),
    ]
    .map(|(file, module, code)| Source {
        file: PathBuf::from(file),
        module: module.into_iter().map(str::to_owned).collect(),
        code: code.to_owned(),
    });
    assert_eq!(modules.len(), 4);
    let by_level = arrows(&sources, Path::new("/"));
    assert_eq!(by_level.len(), 1, "{by_level:?}");
    let circles = circles(&by_level[&Vec::new()]);
    assert_eq!(circles, [vec![vec!["a".to_owned()], vec!["b".to_owned()]]]);
}
