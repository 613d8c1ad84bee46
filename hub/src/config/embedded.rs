//! The embedded default: `examples/meshhub.yaml` and the Bookinfo objects
//! it serves, compiled into the binary. With no `--config`, they are
//! written to a private temporary directory (mode 0700) and served from
//! there like any configuration, so a copied binary runs the examples from
//! anywhere, and `/status` and the logs name the real file. The directory
//! is removed when the hub stops.

use std::path::PathBuf;

/// The embedded files, relative to the configuration file's directory.
pub const FILES: &[(&str, &str)] = &[
    (
        "meshhub.yaml",
        include_str!("../../../examples/meshhub.yaml"),
    ),
    (
        "bookinfo/destination-rules.yaml",
        include_str!("../../../examples/bookinfo/destination-rules.yaml"),
    ),
    (
        "bookinfo/egress-googleapis.yaml",
        include_str!("../../../examples/bookinfo/egress-googleapis.yaml"),
    ),
    (
        "bookinfo/gateway.yaml",
        include_str!("../../../examples/bookinfo/gateway.yaml"),
    ),
    (
        "bookinfo/security.yaml",
        include_str!("../../../examples/bookinfo/security.yaml"),
    ),
    (
        "bookinfo/virtual-services.yaml",
        include_str!("../../../examples/bookinfo/virtual-services.yaml"),
    ),
];

/// The embedded files written out; the directory goes when this is dropped.
#[derive(Debug)]
pub struct Materialised {
    dir: tempfile::TempDir,
}

impl Materialised {
    /// Writes [`FILES`] to a new private temporary directory.
    pub fn write() -> std::io::Result<Self> {
        let dir = tempfile::Builder::new()
            .prefix("meshhub-embedded-")
            .tempdir()?;
        for (name, text) in FILES {
            let path = dir.path().join(name);
            if let Some(parent) = path.parent() {
                std::fs::create_dir_all(parent)?;
            }
            std::fs::write(path, text)?;
        }
        Ok(Self { dir })
    }

    /// The configuration file.
    pub fn config_file(&self) -> PathBuf {
        self.dir.path().join(FILES[0].0)
    }
}

#[cfg(test)]
mod tests {
    #[test]
    fn every_example_file_is_embedded() {
        let root = concat!(env!("CARGO_MANIFEST_DIR"), "/../examples");
        let mut on_disk = Vec::new();
        for entry in std::fs::read_dir(format!("{root}/bookinfo")).unwrap() {
            let name = entry.unwrap().file_name().into_string().unwrap();
            on_disk.push(format!("bookinfo/{name}"));
        }
        on_disk.push("meshhub.yaml".to_owned());
        on_disk.sort();
        let mut embedded: Vec<String> = super::FILES.iter().map(|(n, _)| (*n).to_owned()).collect();
        embedded.sort();
        assert_eq!(embedded, on_disk, "examples/ and the embedded list differ");
    }

    #[test]
    fn the_written_default_parses_and_is_removed_on_drop() {
        let m = super::Materialised::write().unwrap();
        let file = m.config_file();
        let args = <super::super::Args as clap::Parser>::parse_from(["meshhub"]);
        let text = std::fs::read_to_string(&file).unwrap();
        let config = super::super::Config::from_yaml(&args, &file, &text).unwrap();
        assert_eq!(config.clusters.len(), 2);
        let dir = file.parent().unwrap().to_owned();
        drop(m);
        assert!(!dir.exists());
    }
}
