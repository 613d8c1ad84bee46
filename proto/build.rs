//! Generates Rust for the MCP wire messages and services from our own
//! `.proto` files with protox (pure Rust: no `protoc` needed), and writes the
//! descriptor set of every schema (MCP and the Istio config messages) for the
//! runtime descriptor pool used by transcoding.

use std::{env, fs, path::PathBuf};

use prost::Message as _;

const SCHEMA_ROOT: &str = "schema";

fn main() -> Result<(), Box<dyn std::error::Error>> {
    let out = PathBuf::from(env::var("OUT_DIR")?);
    println!("cargo:rerun-if-changed={SCHEMA_ROOT}");

    let files = proto_files(SCHEMA_ROOT.as_ref())?;
    for f in &files {
        println!("cargo:rerun-if-changed={SCHEMA_ROOT}/{f}");
    }
    let all = protox::compile(&files, [SCHEMA_ROOT])?;
    fs::write(out.join("meshhub_descriptor.bin"), all.encode_to_vec())?;

    // Rust types only for the MCP wire (the Istio config messages are handled
    // dynamically through the descriptor pool).
    let mcp = protox::compile(["mcp/v1alpha1/mcp.proto"], [SCHEMA_ROOT])?;
    tonic_prost_build::configure()
        .extern_path(".google.rpc", "::tonic_types::pb")
        // Sorted maps: a resource's labels and annotations encode in the
        // same order every time, so its bytes are reproducible.
        .btree_map(".istio.mcp.v1alpha1.Metadata")
        // Streams start with small buffers (`src/codec.rs`).
        .codec_path("crate::codec::StreamCodec")
        .compile_fds(mcp)?;
    // The upward channel's messages (meshhub's own, agent → hub).
    let upward = protox::compile(["meshhub/v1alpha1/upward.proto"], [SCHEMA_ROOT])?;
    tonic_prost_build::configure()
        .build_client(false)
        .build_server(false)
        .compile_fds(upward)?;

    Ok(())
}

/// Every `.proto` file under `root`, as paths relative to it, sorted.
fn proto_files(root: &std::path::Path) -> std::io::Result<Vec<String>> {
    let mut found = Vec::new();
    let mut dirs = vec![root.to_path_buf()];
    while let Some(dir) = dirs.pop() {
        for entry in fs::read_dir(&dir)? {
            let path = entry?.path();
            if path.is_dir() {
                dirs.push(path);
            } else if path.extension().is_some_and(|e| e == "proto") {
                let rel = path.strip_prefix(root).expect("under root");
                found.push(rel.to_string_lossy().replace('\\', "/"));
            }
        }
    }
    found.sort();
    Ok(found)
}
