//! `envoy_descriptor_set!()`: Envoy's API as a zlib-compressed, serialized
//! `FileDescriptorSet`, as a `&'static [u8; N]` literal.
//!
//! The `envoy-types` crate carries the set compiled from Envoy's protos in
//! its package (`src/generated/types.bin`) but does not export it, and cargo
//! gives no build script the place of a dependency's sources. A crate that
//! depends on `envoy-types` is compiled by a rustc that was handed the very
//! artifact it links, as `--extern envoy_types=<dir>/libenvoy_types-<hash>.rmeta`
//! (or `.rlib`); beside it rustc wrote that artifact's dep-info,
//! `<dir>/envoy_types-<hash>.d`, which names every source file it read —
//! the package's `src/lib.rs` among them. The macro reads the set from that
//! package: the copy cargo unpacked and compiled for this build, wherever it
//! lives (a registry, `cargo vendor`, a path). No `cargo metadata`, no
//! network, no guess at `CARGO_HOME` (docs/dependencies.md).
//!
//! The invoking crate must depend on `envoy-types` itself (so that rustc is
//! given `--extern envoy_types`); otherwise the macro fails with that
//! message. Compressed, the 3.4 MB set is about a fifth of that in every
//! binary that validates.

use std::io::Write;
use std::path::{Path, PathBuf};

use proc_macro::{Literal, TokenStream, TokenTree};

/// The crate the descriptors come from, as rustc names it.
const CRATE: &str = "envoy_types";
/// The set's file, relative to the package root.
const DESCRIPTORS: &str = "src/generated/types.bin";

/// Expands to the zlib-compressed descriptor set of Envoy's API, as a byte
/// string literal; a `compile_error!` saying why when it cannot be found.
#[proc_macro]
pub fn envoy_descriptor_set(input: TokenStream) -> TokenStream {
    if !input.is_empty() {
        return error("envoy_descriptor_set!() takes no arguments");
    }
    match compressed_set(rustc_args()) {
        Ok(bytes) => TokenTree::Literal(Literal::byte_string(&bytes)).into(),
        Err(message) => error(&message),
    }
}

/// rustc's arguments, lossily as text (a path that is not UTF-8 cannot be
/// the one looked for anyway), with `@file` arguments expanded as rustc
/// does (one argument a line): cargo passes them that way when a command
/// line grows too long.
fn rustc_args() -> impl Iterator<Item = String> {
    std::env::args_os()
        .map(|a| a.to_string_lossy().into_owned())
        .flat_map(|a| match a.strip_prefix('@') {
            Some(file) => std::fs::read_to_string(file)
                .map(|text| text.lines().map(str::to_owned).collect())
                .unwrap_or_else(|_| vec![a.clone()]),
            None => vec![a],
        })
}

fn error(message: &str) -> TokenStream {
    format!("compile_error!({message:?})")
        .parse()
        .unwrap_or_default()
}

fn compressed_set(args: impl Iterator<Item = String>) -> Result<Vec<u8>, String> {
    let artifact = extern_artifact(args, CRATE).ok_or_else(|| {
        format!(
            "rustc was given no --extern {CRATE}=…: the crate invoking envoy_descriptor_set!() \
             must depend on envoy-types"
        )
    })?;
    let dep_info = dep_info_of(&artifact)
        .ok_or_else(|| format!("{}: not a rustc artifact name", artifact.display()))?;
    let text = std::fs::read_to_string(&dep_info)
        .map_err(|e| format!("{} (dep-info of {CRATE}): {e}", dep_info.display()))?;
    let package = package_of(&text).ok_or_else(|| {
        format!(
            "{}: names no src/lib.rs of a package holding {DESCRIPTORS}",
            dep_info.display()
        )
    })?;
    let set = package.join(DESCRIPTORS);
    let raw = std::fs::read(&set).map_err(|e| format!("{}: {e}", set.display()))?;
    let mut z = flate2::write::ZlibEncoder::new(Vec::new(), flate2::Compression::best());
    z.write_all(&raw)
        .and_then(|()| z.finish())
        .map_err(|e| format!("compressing {}: {e}", set.display()))
}

/// The path rustc was given for `name` by `--extern name=path` (cargo's
/// form, two arguments) or `--extern=name=path`.
fn extern_artifact(args: impl Iterator<Item = String>, name: &str) -> Option<PathBuf> {
    let mut args = args;
    while let Some(arg) = args.next() {
        let value = if arg == "--extern" {
            args.next()?
        } else if let Some(v) = arg.strip_prefix("--extern=") {
            v.to_string()
        } else {
            continue;
        };
        // `name=path` or `opts:name=path` (e.g. `priv:`; the path may hold
        // `:` and `=` itself): the name is what precedes the first `=`.
        let Some((spec, path)) = value.split_once('=') else {
            continue;
        };
        let crate_name = spec.rsplit_once(':').map_or(spec, |(_, n)| n);
        if crate_name == name {
            return Some(PathBuf::from(path));
        }
    }
    None
}

/// `<dir>/lib<crate>-<hash>.rmeta` → `<dir>/<crate>-<hash>.d`.
fn dep_info_of(artifact: &Path) -> Option<PathBuf> {
    let stem = artifact.file_stem()?.to_str()?;
    let stem = stem.strip_prefix("lib").unwrap_or(stem);
    Some(artifact.with_file_name(format!("{stem}.d")))
}

/// The package root a Makefile-style dep-info names: the directory above
/// the `src/lib.rs` it lists, if that directory holds the descriptors.
fn package_of(dep_info: &str) -> Option<PathBuf> {
    dep_info
        .lines()
        .filter_map(|line| line.strip_suffix(':'))
        .map(|p| PathBuf::from(p.replace("\\ ", " ")))
        .filter(|p| p.ends_with("src/lib.rs"))
        .filter_map(|p| p.parent()?.parent().map(Path::to_path_buf))
        .find(|root| root.join(DESCRIPTORS).is_file())
}

#[cfg(test)]
mod tests {
    use super::*;

    fn args(a: &[&str]) -> impl Iterator<Item = String> {
        a.iter()
            .map(|s| s.to_string())
            .collect::<Vec<_>>()
            .into_iter()
    }

    #[test]
    fn finds_the_extern_in_each_form() {
        let cargo = [
            "rustc",
            "--extern",
            "prost=/t/libprost-1.rmeta",
            "--extern",
            "envoy_types=/t/deps/libenvoy_types-ab12.rmeta",
        ];
        assert_eq!(
            extern_artifact(args(&cargo), CRATE),
            Some(PathBuf::from("/t/deps/libenvoy_types-ab12.rmeta"))
        );
        let joined = ["rustc", "--extern=envoy_types=/t/libenvoy_types-1.rlib"];
        assert_eq!(
            extern_artifact(args(&joined), CRATE),
            Some(PathBuf::from("/t/libenvoy_types-1.rlib"))
        );
        let private = [
            "rustc",
            "--extern",
            "priv:envoy_types=/t/libenvoy_types-2.rlib",
        ];
        assert_eq!(
            extern_artifact(args(&private), CRATE),
            Some(PathBuf::from("/t/libenvoy_types-2.rlib"))
        );
        let colon = [
            "rustc",
            "--extern",
            "priv:envoy_types=/a:b/c=d/libenvoy_types-3.rlib",
        ];
        assert_eq!(
            extern_artifact(args(&colon), CRATE),
            Some(PathBuf::from("/a:b/c=d/libenvoy_types-3.rlib"))
        );
        let other = ["rustc", "--extern", "envoy_types_extra=/t/x.rlib"];
        assert_eq!(extern_artifact(args(&other), CRATE), None);
    }

    #[test]
    fn the_dep_info_sits_beside_the_artifact() {
        assert_eq!(
            dep_info_of(Path::new("/t/deps/libenvoy_types-ab12.rmeta")),
            Some(PathBuf::from("/t/deps/envoy_types-ab12.d"))
        );
    }

    #[test]
    fn the_package_is_the_one_holding_the_set() {
        let root =
            std::env::temp_dir().join(format!("envoy-descriptors-test-{}", std::process::id()));
        std::fs::create_dir_all(root.join("src/generated")).unwrap();
        std::fs::write(root.join(DESCRIPTORS), b"x").unwrap();
        let lib = root.join("src/lib.rs");
        let text = format!(
            "/t/libenvoy_types-1.rmeta: {lib}\n\n/elsewhere/src/lib.rs:\n{lib}:\n",
            lib = lib.display()
        );
        assert_eq!(package_of(&text), Some(root.clone()));
        assert_eq!(package_of("/a/src/lib.rs:\n"), None);
        std::fs::remove_dir_all(root).unwrap();
    }

    #[test]
    fn a_missing_extern_says_what_to_do() {
        let err = compressed_set(args(&["rustc", "--crate-name", "x"])).unwrap_err();
        assert!(err.contains("must depend on envoy-types"), "{err}");
    }
}
