//! The library's scripts, assembled exactly as `src/scripts.rs` assembles them (`in_line` and
//! `without_comments` are copied from there).

use std::collections::BTreeMap;

fn in_line(body: &str) -> String {
    let helpers = include_str!("../../../src/lua/line.lua");
    match body.split_once(LINE_MARKER) {
        Some((fast, rest)) => format!("{fast}{helpers}{rest}"),
        None => format!("{helpers}\n{body}"),
    }
}

const LINE_MARKER: &str = "--@line\n";

fn without_comments(source: &str) -> String {
    let lines = source.lines().map(str::trim);
    let code = lines.filter(|line| !line.is_empty() && !line.starts_with("--"));
    code.collect::<Vec<_>>().join("\n")
}

macro_rules! lua {
    ($name:literal) => {
        include_str!(concat!("../../../src/lua/", $name, ".lua"))
    };
}

/// Every script, by name, as the library sends it.
pub fn all() -> BTreeMap<&'static str, String> {
    BTreeMap::from([
        ("acquire", without_comments(&in_line(lua!("acquire")))),
        ("acquire_many", in_line(lua!("acquire_many"))),
        ("acquire_owned", in_line(lua!("acquire_owned"))),
        ("acquire_queued", in_line(lua!("acquire_queued"))),
        ("acquire_read", in_line(lua!("acquire_read"))),
        ("acquire_write", in_line(lua!("acquire_write"))),
        ("confirm_leader", lua!("confirm_leader").to_owned()),
        ("dequeue", in_line(lua!("dequeue"))),
        ("extend", lua!("extend").to_owned()),
        ("extend_read", in_line(lua!("extend_read"))),
        ("inspect", in_line(lua!("inspect"))),
        ("raise_fence", lua!("raise_fence").to_owned()),
        ("read_leader", in_line(lua!("read_leader"))),
        ("release", without_comments(&in_line(lua!("release")))),
        ("release_read", in_line(lua!("release_read"))),
        ("release_write", lua!("release_write").to_owned()),
        ("restore", without_comments(&in_line(lua!("restore")))),
    ])
}
