//! Copies the compiled descriptor set of Envoy's API that the `envoy-types`
//! crate ships in its package (`src/generated/types.bin`, not exported by
//! the crate) into OUT_DIR, for the EnvoyFilter patch checks, compressed:
//! the set is 3.4 MB and would otherwise sit whole in every binary that
//! validates (the hub and meshhubctl), against the image's size budget;
//! compressed it is about a fifth of that, inflated once on first use. The
//! crate is found through `cargo metadata`, so vendored and path
//! dependencies work too.

use std::io::Write;
use std::path::PathBuf;
use std::process::Command;

fn main() -> Result<(), Box<dyn std::error::Error>> {
    let out = PathBuf::from(std::env::var("OUT_DIR")?);
    let cargo = std::env::var("CARGO").unwrap_or_else(|_| "cargo".into());
    let manifest_dir = std::env::var("CARGO_MANIFEST_DIR")?;
    let meta = Command::new(cargo)
        .current_dir(&manifest_dir)
        .args(["metadata", "--format-version", "1", "--offline"])
        .output()?;
    if !meta.status.success() {
        return Err(format!(
            "cargo metadata failed: {}",
            String::from_utf8_lossy(&meta.stderr)
        )
        .into());
    }
    let meta: serde_json::Value = serde_json::from_slice(&meta.stdout)?;
    let manifest = meta["packages"]
        .as_array()
        .into_iter()
        .flatten()
        .find(|p| p["name"] == "envoy-types")
        .and_then(|p| p["manifest_path"].as_str())
        .ok_or("envoy-types is not in the dependency graph")?;
    let bin = PathBuf::from(manifest)
        .parent()
        .ok_or("envoy-types manifest has no directory")?
        .join("src/generated/types.bin");
    println!("cargo:rerun-if-changed={}", bin.display());
    println!("cargo:rerun-if-changed=build.rs");
    let raw = std::fs::read(&bin).map_err(|e| format!("{}: {e}", bin.display()))?;
    let mut z = flate2::write::ZlibEncoder::new(Vec::new(), flate2::Compression::best());
    z.write_all(&raw)?;
    std::fs::write(out.join("envoy_types.bin.zz"), z.finish()?)?;
    Ok(())
}
