//! The README as a newcomer reads it: its first screen says what to type, the quick start
//! names the layer's key types by their paths, and every link of the README and of docs/
//! leads somewhere. Its Rust blocks compile and run as doctests (`ReadmeDoctests` in
//! src/lib.rs), which is what keeps those paths true.

use std::fs;
use std::path::{Path, PathBuf};

/// What a terminal or a repository's front page shows before the reader scrolls.
const FIRST_SCREEN: usize = 40;

fn root() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR"))
}

fn read(path: &Path) -> String {
    fs::read_to_string(path).unwrap_or_else(|e| panic!("{}: {e}", path.display()))
}

fn readme() -> String {
    read(&root().join("README.md"))
}

/// The Rust code blocks of a Markdown text, each as its lines, with the line its fence opens on.
fn rust_blocks(text: &str) -> Vec<(usize, Vec<&str>)> {
    let mut blocks = Vec::new();
    let mut open: Option<(usize, Vec<&str>)> = None;
    for (n, line) in text.lines().enumerate() {
        match open.as_mut() {
            None if line.starts_with("```rust") => open = Some((n, Vec::new())),
            Some(_) if line.starts_with("```") => blocks.extend(open.take()),
            Some((_, lines)) => lines.push(line),
            None => {}
        }
    }
    blocks
}

#[test]
fn the_readmes_first_screen_has_the_set_up_commands_and_a_limiter_to_copy() {
    let readme = readme();
    let screen: Vec<&str> = readme.lines().take(FIRST_SCREEN).collect();
    for command in [
        "cargo run --release --example demo",
        "cargo test --workspace --all-features",
    ] {
        assert!(
            screen.iter().any(|l| l.starts_with(command)),
            "`{command}` is not on the first {FIRST_SCREEN} lines of the README"
        );
    }
    let first_screen = screen.join("\n");
    let limiter = rust_blocks(&first_screen).into_iter().find(|(_, lines)| {
        let code = lines.join("\n");
        [
            "Limiter::builder()",
            ".max_inflight(",
            ".max_rate(",
            "try_acquire(",
        ]
        .iter()
        .all(|call| code.contains(call))
    });
    assert!(
        limiter.is_some(),
        "no whole Rust block building a Limiter with max_inflight and max_rate on the first \
         {FIRST_SCREEN} lines of the README"
    );
}

/// `ClientKey` is in `floodgate::layer` and `ClientAddr` in `floodgate::fields::client`: the
/// quick start, not page eight, must show those paths in `use` lines (which the doctests then
/// check).
#[test]
fn the_quick_start_imports_client_key_and_client_addr_by_their_paths() {
    const QUICK_START: usize = 100;
    let readme = readme();
    let uses: Vec<&str> = rust_blocks(&readme)
        .into_iter()
        .filter(|(opens, _)| *opens < QUICK_START)
        .flat_map(|(_, lines)| lines)
        .filter(|line| line.starts_with("use floodgate"))
        .collect();
    assert!(
        uses.contains(&"use floodgate::fields::client::ClientAddr;"),
        "no `use floodgate::fields::client::ClientAddr;` in the README's first {QUICK_START} \
         lines: {uses:?}"
    );
    assert!(
        uses.iter()
            .any(|u| u.starts_with("use floodgate::layer::") && u.contains("ClientKey")),
        "no `use floodgate::layer::...ClientKey` in the README's first {QUICK_START} lines: \
         {uses:?}"
    );
}

/// GitHub's anchor for a heading: lower case, spaces as hyphens, other punctuation dropped.
fn anchor(heading: &str) -> String {
    heading
        .trim()
        .to_lowercase()
        .chars()
        .filter_map(|c| match c {
            ' ' => Some('-'),
            c if c.is_alphanumeric() || c == '-' || c == '_' => Some(c),
            _ => None,
        })
        .collect()
}

/// The anchors of a Markdown file's headings (outside code blocks).
fn anchors(text: &str) -> Vec<String> {
    let mut in_code = false;
    let mut found = Vec::new();
    for line in text.lines() {
        if line.starts_with("```") {
            in_code = !in_code;
        } else if !in_code && line.starts_with('#') {
            found.push(anchor(line.trim_start_matches('#')));
        }
    }
    found
}

/// The targets of a Markdown text's inline links, `[text](target)`.
fn links(text: &str) -> Vec<&str> {
    text.match_indices("](")
        .filter_map(|(at, _)| {
            let rest = &text[at + 2..];
            rest.find(')').map(|end| &rest[..end])
        })
        .collect()
}

/// The Markdown files a reader is sent to: the README and docs/.
fn markdown_files() -> Vec<PathBuf> {
    let mut files = vec![root().join("README.md")];
    let docs = fs::read_dir(root().join("docs")).expect("docs/");
    for entry in docs {
        let path = entry.expect("a docs/ entry").path();
        if path.extension().is_some_and(|e| e == "md") {
            files.push(path);
        }
    }
    files.sort();
    files
}

#[test]
fn every_link_of_the_readme_and_docs_leads_to_a_file_and_heading_that_exist() {
    let mut broken = Vec::new();
    for file in markdown_files() {
        let text = read(&file);
        for link in links(&text) {
            if link.starts_with("http://") || link.starts_with("https://") {
                continue;
            }
            let (path, fragment) = link.split_once('#').unwrap_or((link, ""));
            let target = if path.is_empty() {
                file.clone()
            } else {
                file.parent().unwrap().join(path)
            };
            if !target.exists() {
                broken.push(format!("{}: {link}: no such file", file.display()));
            } else if !fragment.is_empty() && !anchors(&read(&target)).iter().any(|a| a == fragment)
            {
                broken.push(format!("{}: {link}: no such heading", file.display()));
            }
        }
    }
    assert!(broken.is_empty(), "broken links:\n{}", broken.join("\n"));
}

/// The README's map of docs/ names every guide in it.
#[test]
fn the_readme_links_every_guide_in_docs() {
    let readme = readme();
    let targets = links(&readme);
    for file in markdown_files()
        .iter()
        .filter(|f| f.parent() != Some(&root()))
    {
        let name = file.file_name().unwrap().to_str().unwrap();
        let link = format!("docs/{name}");
        assert!(
            targets
                .iter()
                .any(|t| t.split('#').next() == Some(link.as_str())),
            "the README does not link {link}"
        );
    }
}
