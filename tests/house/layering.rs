//! The library's layering: every module imports only from its own layer or the layers below, as
//! the table in `src/lib.rs`'s crate docs says. A module missing from the table fails too.

use std::collections::BTreeMap;
use std::fs;
use std::path::Path;

/// Module path (`node::link`) → layer, from the `//! | L<n> | `a`, `b` | ... |` rows of lib.rs.
fn layers(lib: &str) -> BTreeMap<String, u32> {
    let mut table = BTreeMap::new();
    for row in lib.lines().filter_map(|l| l.strip_prefix("//! | L")) {
        let mut cells = row.split('|');
        let (Some(layer), Some(modules)) = (cells.next(), cells.next()) else {
            continue;
        };
        let layer: u32 = layer.trim().parse().unwrap();
        for module in modules.split(',') {
            table.insert(module.trim().trim_matches('`').to_owned(), layer);
        }
    }
    table
}

/// Every module file under `src/`, as (module path, source without its test module).
fn modules(dir: &Path, prefix: &str, out: &mut Vec<(String, String)>) {
    for entry in fs::read_dir(dir).unwrap() {
        let path = entry.unwrap().path();
        let name = path.file_stem().unwrap().to_str().unwrap().to_owned();
        if path.is_dir() {
            if name != "lua" {
                modules(&path, &format!("{prefix}{name}::"), out);
            }
            continue;
        }
        if path.extension().and_then(|e| e.to_str()) != Some("rs") {
            continue;
        }
        let module = match name.as_str() {
            "lib" => continue,
            "mod" => prefix.trim_end_matches("::").to_owned(),
            _ => format!("{prefix}{name}"),
        };
        let source = fs::read_to_string(&path).unwrap();
        let code = match source.find("#[cfg(test)]\nmod tests") {
            Some(tests) => source[..tests].to_owned(),
            None => source,
        };
        out.push((module, code));
    }
}

/// The modules `code` names through `crate::` paths (in `use` lines or inline), resolved to the
/// longest known module; `super::` is resolved against `module`.
fn imports(module: &str, code: &str, known: &BTreeMap<String, u32>) -> Vec<String> {
    let parent = module.rsplit_once("::").map_or("", |(p, _)| p);
    let mut found = Vec::new();
    for (marker, base) in [
        ("crate::", String::new()),
        ("super::", format!("{parent}::")),
    ] {
        for (at, _) in code.match_indices(marker) {
            let rest = &code[at + marker.len()..];
            // `crate::{a, b::{c}}` lists several paths; a plain path ends at the first other char.
            let paths: Vec<String> = match rest.strip_prefix('{') {
                Some(list) => {
                    let list = &list[..list.find(';').unwrap_or(list.len())];
                    list.split([',', '{'])
                        .map(|p| p.trim().trim_end_matches('}').to_owned())
                        .collect()
                }
                None => vec![rest
                    .chars()
                    .take_while(|c| c.is_alphanumeric() || *c == '_' || *c == ':')
                    .collect()],
            };
            for path in paths {
                let full = format!("{base}{path}").trim_start_matches("::").to_owned();
                let parts: Vec<&str> = full.split("::").collect();
                let resolved = (1..=parts.len())
                    .rev()
                    .map(|k| parts[..k].join("::"))
                    .find(|candidate| known.contains_key(candidate));
                if let Some(target) = resolved.filter(|t| t != module) {
                    found.push(target);
                }
            }
        }
    }
    found
}

#[test]
fn no_module_imports_from_a_layer_above_its_own() {
    let src = Path::new(env!("CARGO_MANIFEST_DIR")).join("src");
    let table = layers(&fs::read_to_string(src.join("lib.rs")).unwrap());
    assert!(table.len() > 10, "no layer table in lib.rs: {table:?}");
    let mut files = Vec::new();
    modules(&src, "", &mut files);
    let mut upward = Vec::new();
    for (module, code) in &files {
        let Some(&layer) = table.get(module) else {
            upward.push(format!("{module} is in no layer of the table"));
            continue;
        };
        for target in imports(module, code, &table) {
            // A child module may see its parent's items (`super::`): the parent is its owner.
            if module.starts_with(&format!("{target}::")) {
                continue;
            }
            if table[&target] > layer {
                upward.push(format!(
                    "{module} (L{layer}) imports {target} (L{})",
                    table[&target]
                ));
            }
        }
    }
    assert!(
        upward.is_empty(),
        "imports that run upward:\n{}",
        upward.join("\n")
    );
}

#[test]
fn the_checker_sees_an_upward_import() {
    let table = layers("//! | L0 | `quorum` | pure |\n//! | L3 | `redlock` | client |\n");
    let code = "use crate::redlock::{Redlock, Lease};\nfn f() {}";
    assert_eq!(imports("quorum", code, &table), ["redlock"]);
    // A module's own items do not count; nested lists are read path by path.
    let nested = "use crate::{quorum::Tally, redlock::Redlock};";
    assert_eq!(imports("quorum", nested, &table), ["redlock"]);
}
