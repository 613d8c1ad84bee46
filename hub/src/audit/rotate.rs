//! A file that rotates by size: when the next line would make it larger
//! than `max_bytes`, `audit.log` becomes `audit.log.1` (`.1` becomes `.2`,
//! ...; the oldest beyond `keep` is deleted) and a new file starts. Lines
//! are never split across files.

use std::fs::{File, OpenOptions};
use std::io::{self, Write as _};
use std::path::{Path, PathBuf};

/// An append-only file rotated by size.
#[derive(Debug)]
pub struct RotatingFile {
    path: PathBuf,
    max_bytes: u64,
    keep: usize,
    file: File,
    size: u64,
}

impl RotatingFile {
    /// Opens (appending to) `path`, creating its directory; keeps `keep`
    /// rotated files besides it.
    pub fn open(path: &Path, max_bytes: u64, keep: usize) -> io::Result<Self> {
        if let Some(dir) = path.parent().filter(|d| !d.as_os_str().is_empty()) {
            std::fs::create_dir_all(dir)?;
        }
        let file = OpenOptions::new().create(true).append(true).open(path)?;
        let size = file.metadata()?.len();
        Ok(Self {
            path: path.to_owned(),
            max_bytes,
            keep,
            file,
            size,
        })
    }

    /// The file written now.
    pub fn path(&self) -> &Path {
        &self.path
    }

    fn rotated(&self, n: usize) -> PathBuf {
        let mut name = self.path.as_os_str().to_owned();
        name.push(format!(".{n}"));
        PathBuf::from(name)
    }

    fn rotate(&mut self) -> io::Result<()> {
        self.file.flush()?;
        if self.keep == 0 {
            std::fs::remove_file(&self.path)?;
        } else {
            match std::fs::remove_file(self.rotated(self.keep)) {
                Err(e) if e.kind() != io::ErrorKind::NotFound => return Err(e),
                _ => {}
            }
            for n in (1..self.keep).rev() {
                match std::fs::rename(self.rotated(n), self.rotated(n + 1)) {
                    Err(e) if e.kind() != io::ErrorKind::NotFound => return Err(e),
                    _ => {}
                }
            }
            std::fs::rename(&self.path, self.rotated(1))?;
        }
        self.file = OpenOptions::new()
            .create(true)
            .append(true)
            .open(&self.path)?;
        self.size = 0;
        Ok(())
    }

    /// Appends one line (`line` without its newline), rotating first when
    /// it would not fit. A line longer than `max_bytes` gets a file of its
    /// own.
    pub fn write_line(&mut self, line: &[u8]) -> io::Result<()> {
        let len = line.len() as u64 + 1;
        if self.size > 0 && self.size + len > self.max_bytes {
            self.rotate()?;
        }
        let mut buf = Vec::with_capacity(line.len() + 1);
        buf.extend_from_slice(line);
        buf.push(b'\n');
        self.file.write_all(&buf)?;
        self.size += len;
        Ok(())
    }

    /// Flushes what was written.
    pub fn flush(&mut self) -> io::Result<()> {
        self.file.flush()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn lines(p: &Path) -> Vec<String> {
        std::fs::read_to_string(p)
            .map(|t| t.lines().map(str::to_owned).collect())
            .unwrap_or_default()
    }

    #[test]
    fn rotates_by_size_and_keeps_n_files() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("logs/audit.log");
        let mut f = RotatingFile::open(&path, 20, 2).unwrap();
        // 9 bytes per line with the newline: two lines fit in 20 bytes.
        for i in 0..7 {
            f.write_line(format!("line-{i:03}").as_bytes()).unwrap();
        }
        f.flush().unwrap();
        assert_eq!(lines(&path), ["line-006"]);
        assert_eq!(lines(&f.rotated(1)), ["line-004", "line-005"]);
        assert_eq!(lines(&f.rotated(2)), ["line-002", "line-003"]);
        assert!(!f.rotated(3).exists(), "only `keep` rotated files");

        // Reopening appends and counts what is there.
        drop(f);
        let mut f = RotatingFile::open(&path, 20, 2).unwrap();
        f.write_line(b"line-007").unwrap();
        f.write_line(b"line-008").unwrap();
        f.flush().unwrap();
        assert_eq!(lines(&path), ["line-008"]);
        assert_eq!(lines(&f.rotated(1)), ["line-006", "line-007"]);
    }

    #[test]
    fn an_oversized_line_gets_its_own_file_and_keep_zero_discards() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("audit.log");
        let mut f = RotatingFile::open(&path, 10, 0).unwrap();
        f.write_line(b"a-very-long-line").unwrap();
        f.write_line(b"b").unwrap();
        f.flush().unwrap();
        assert_eq!(lines(&path), ["b"]);
        assert!(!f.rotated(1).exists());
    }
}
