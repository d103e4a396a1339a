//! The declared minimum Rust version (`rust-version` in `Cargo.toml`) holds for the committed
//! lockfile: no locked dependency asks for a newer compiler. The toolchain itself cannot be
//! downloaded here, but every dependency states its own `rust-version`, and `cargo metadata`
//! reports them for the versions `Cargo.lock` pins.

use std::process::Command;

/// `1.89`, `1.89.0` → `(1, 89, 0)`.
fn version(text: &str) -> (u64, u64, u64) {
    let mut parts = text.trim().split('.').map(|p| p.parse::<u64>().unwrap());
    let major = parts.next().unwrap();
    let minor = parts.next().unwrap_or(0);
    let patch = parts.next().unwrap_or(0);
    (major, minor, patch)
}

/// Every locked package's metadata. Not `--offline`: the packages of other platforms (the
/// Windows console crates) are never downloaded by a build here, and `cargo metadata` reads
/// them all, so it fetches their manifests from the registry.
fn locked_metadata() -> serde_json::Value {
    let cargo = option_env!("CARGO").unwrap_or("cargo");
    let out = Command::new(cargo)
        .args(["metadata", "--format-version", "1", "--locked"])
        .current_dir(env!("CARGO_MANIFEST_DIR"))
        .output()
        .unwrap();
    assert!(
        out.status.success(),
        "cargo metadata failed: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    serde_json::from_slice(&out.stdout).unwrap()
}

#[test]
fn every_locked_dependency_builds_with_the_declared_rust_version() {
    let metadata = locked_metadata();
    let packages = metadata["packages"].as_array().unwrap();
    let workspace: Vec<&str> = metadata["workspace_members"]
        .as_array()
        .unwrap()
        .iter()
        .map(|m| m.as_str().unwrap())
        .collect();
    let ours: Vec<&serde_json::Value> = packages
        .iter()
        .filter(|p| workspace.contains(&p["id"].as_str().unwrap()))
        .collect();
    assert_eq!(
        ours.len(),
        5,
        "the library, the CLI, the testkit, the simulated master and the simulation"
    );
    let declared = ours[0]["rust_version"].as_str().unwrap();
    for package in &ours {
        assert_eq!(
            package["rust_version"].as_str(),
            Some(declared),
            "{} declares another rust-version",
            package["name"]
        );
    }

    let mut too_new: Vec<String> = packages
        .iter()
        .filter_map(|p| {
            let needs = p["rust_version"].as_str()?;
            (version(needs) > version(declared))
                .then(|| format!("{} {} needs {needs}", p["name"], p["version"]))
        })
        .collect();
    too_new.sort();
    assert!(
        too_new.is_empty(),
        "rust-version = {declared:?}, but the lockfile pins: {too_new:?}"
    );
    assert!(
        packages.len() > 100,
        "cargo metadata listed only {} packages",
        packages.len()
    );
}

#[test]
fn the_readme_states_the_declared_rust_version() {
    let metadata = locked_metadata();
    let declared = metadata["packages"]
        .as_array()
        .unwrap()
        .iter()
        .find(|p| p["name"] == "quorumlock")
        .and_then(|p| p["rust_version"].as_str())
        .unwrap()
        .to_owned();
    let readme =
        std::fs::read_to_string(concat!(env!("CARGO_MANIFEST_DIR"), "/README.md")).unwrap();
    let stated = format!("Rust {declared} or newer");
    assert!(
        readme.contains(&stated),
        "the README does not say {stated:?}"
    );
}

#[test]
fn versions_compare_by_number_not_by_text() {
    assert!(version("1.89") > version("1.88.0"));
    assert!(version("1.100") > version("1.89"));
    assert_eq!(version("1.89"), version("1.89.0"));
}
