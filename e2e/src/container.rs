//! meshhub's image (`deploy/image/Containerfile`, built by
//! `deploy/image/build.sh`) run with podman, without Docker: podman and
//! buildah from Debian's packages (`.ci/run` installs them), with runc.
//!
//! Every container started here is removed when its [`Container`] guard
//! drops; its logs are printed first when the test is failing.

use std::ffi::OsStr;
use std::io::Read as _;
use std::path::{Path, PathBuf};
use std::process::{Command, ExitStatus, Stdio};
use std::sync::OnceLock;

use meshhub_testkit::eventually_blocking;

/// Flags every `podman run` needs on this machine kind: runc (crun fails
/// here: "cgroups in hybrid mode not supported") and explicit ulimits
/// (podman's defaults exceed the sandbox's hard limits: "setrlimit
/// RLIMIT_NOFILE: Operation not permitted").
pub const RUNTIME_FLAGS: [&str; 6] = [
    "--runtime",
    "runc",
    "--ulimit",
    "nofile=1024:1024",
    "--ulimit",
    "nproc=1024:1024",
];

/// The image tests run: `MESHHUB_IMAGE`, else what build.sh tags.
pub const DEFAULT_IMAGE: &str = "meshhub:dev";

fn on_path(program: &str) -> Option<PathBuf> {
    let path = std::env::var_os("PATH")?;
    std::env::split_paths(&path)
        .map(|d| d.join(program))
        .find(|p| p.is_file())
}

/// `Ok` when podman and buildah are installed and the image is there or
/// can be built (a C compiler for musl, which `deploy/image/build.sh` needs
/// for ring and mimalloc); otherwise why the image tests are skipped
/// (`.ci/run` installs all of them from Debian's packages).
pub fn available() -> Result<(), String> {
    for tool in ["podman", "buildah"] {
        if on_path(tool).is_none() {
            return Err(format!(
                "{tool} is not installed (Debian: apt-get install podman buildah runc); \
                 the image is neither built nor run"
            ));
        }
    }
    let name = std::env::var("MESHHUB_IMAGE").unwrap_or_else(|_| DEFAULT_IMAGE.to_owned());
    let (exists, _, _) = run_bounded("podman", &["image", "exists", &name]);
    let musl_cc = [
        "CC_x86_64_unknown_linux_musl",
        "CC_x86_64-unknown-linux-musl",
        "TARGET_CC",
    ]
    .iter()
    .any(|v| std::env::var_os(v).is_some())
        || on_path("x86_64-linux-musl-gcc").is_some()
        || on_path("musl-gcc").is_some();
    if !exists.success() && !musl_cc {
        return Err(format!(
            "image {name} is not built and this machine can't build it: no C compiler for \
             musl (Debian: apt-get install musl-tools)"
        ));
    }
    Ok(())
}

/// Runs `program args…` to completion within the deadline: status,
/// stdout, stderr.
pub fn run_bounded(program: impl AsRef<OsStr>, args: &[&str]) -> (ExitStatus, String, String) {
    let program = program.as_ref();
    let mut child = Command::new(program)
        .args(args)
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap_or_else(|e| panic!("can't start {}: {e}", program.display()));
    let mut out = child.stdout.take().expect("stdout");
    let mut err = child.stderr.take().expect("stderr");
    let reader = std::thread::spawn(move || {
        let mut s = String::new();
        let _ = err.read_to_string(&mut s);
        s
    });
    let mut stdout = String::new();
    let _ = out.read_to_string(&mut stdout);
    let what = format!("{} {}", program.display(), args.join(" "));
    let status = eventually_blocking(&what, || child.try_wait().ok().flatten());
    let stderr = reader.join().unwrap_or_default();
    (status, stdout, stderr)
}

/// `podman args…`, which must succeed: its stdout.
pub fn podman(args: &[&str]) -> String {
    let (status, out, err) = run_bounded("podman", args);
    assert!(
        status.success(),
        "podman {} failed ({status}):\n{err}",
        args.join(" ")
    );
    out
}

/// The image under test, built once per test process if missing:
/// `MESHHUB_IMAGE` (CI builds it with build.sh first and exports it), else
/// [`DEFAULT_IMAGE`] when podman has it, else built now by
/// `deploy/image/build.sh` (a release build of the three binaries: minutes).
pub fn image() -> &'static str {
    static IMAGE: OnceLock<String> = OnceLock::new();
    IMAGE.get_or_init(|| {
        let name = std::env::var("MESHHUB_IMAGE").unwrap_or_else(|_| DEFAULT_IMAGE.to_owned());
        let (exists, _, _) = run_bounded("podman", &["image", "exists", &name]);
        if exists.success() {
            let revision = podman(&[
                "image",
                "inspect",
                "--format",
                "{{index .Labels \"org.opencontainers.image.revision\"}}",
                &name,
            ]);
            eprintln!(
                "e2e: image {name} (revision {}); rebuild it with deploy/image/build.sh after changing the code",
                revision.trim()
            );
            return name;
        }
        let script = Path::new(env!("CARGO_MANIFEST_DIR")).join("../deploy/image/build.sh");
        eprintln!(
            "e2e: image {name} not found: building it with {} (a release build of the three binaries, several minutes cold)",
            script.display()
        );
        let status = Command::new("bash")
            .arg(&script)
            .env("MESHHUB_IMAGE", &name)
            .stdout(Stdio::inherit())
            .stderr(Stdio::inherit())
            .status()
            .expect("bash runs");
        assert!(status.success(), "{} failed ({status})", script.display());
        name
    })
}

/// A running container (`podman run -d`): removed (`podman rm -f`) when
/// dropped.
#[derive(Debug)]
pub struct Container {
    /// Its name.
    pub name: String,
}

impl Container {
    /// `podman run -d --name <unique> [RUNTIME_FLAGS] <flags…> <image>
    /// <args…>`; panics with podman's message when it does not start.
    pub fn run(name: &str, flags: &[String], image: &str, args: &[String]) -> Self {
        let name = format!(
            "meshhub-e2e-{}-{name}-{:08x}",
            std::process::id(),
            rand::random::<u32>()
        );
        let mut all: Vec<&str> = vec!["run", "-d", "--name", &name];
        all.extend(RUNTIME_FLAGS);
        all.extend(flags.iter().map(String::as_str));
        all.push(image);
        all.extend(args.iter().map(String::as_str));
        let command = all.join(" ");
        eprintln!("e2e: podman {command}");
        let (status, _, err) = run_bounded("podman", &all);
        // The guard exists from here on, so a failed start is cleaned up too.
        let container = Self { name };
        assert!(
            status.success(),
            "podman {command} failed ({status}):\n{err}\n{}",
            container.logs()
        );
        container
    }

    /// Everything it wrote so far (stdout and stderr).
    pub fn logs(&self) -> String {
        let (_, out, err) = run_bounded("podman", &["logs", &self.name]);
        format!("{out}{err}")
    }

    /// `podman inspect --format <format>` of this container, trimmed.
    pub fn inspect(&self, format: &str) -> String {
        podman(&["inspect", "--format", format, &self.name])
            .trim()
            .to_owned()
    }

    /// Whether it is still running.
    pub fn running(&self) -> bool {
        self.inspect("{{.State.Running}}") == "true"
    }

    /// The host pid of its main process.
    pub fn pid(&self) -> u32 {
        self.inspect("{{.State.Pid}}")
            .parse()
            .expect("a running container's pid")
    }

    /// `podman exec <container> <args…>`: status, stdout, stderr.
    pub fn exec(&self, args: &[&str]) -> (ExitStatus, String, String) {
        let mut all = vec!["exec", self.name.as_str()];
        all.extend(args);
        run_bounded("podman", &all)
    }

    /// What changed in its root filesystem (`podman diff`), one path a line.
    pub fn diff(&self) -> Vec<String> {
        podman(&["diff", &self.name])
            .lines()
            .map(str::to_owned)
            .collect()
    }

    /// Where volumes are mounted in it.
    pub fn mount_points(&self) -> Vec<String> {
        self.inspect("{{range .Mounts}}{{.Destination}}\n{{end}}")
            .lines()
            .map(str::to_owned)
            .collect()
    }

    /// What it changed in its root filesystem other than the directories
    /// and files podman adds to mount things on (a volume's mount point and
    /// its parents; the files podman itself mounts into /etc): each
    /// `A path`/`C path`/`D path`.
    pub fn writes_outside_volumes(&self) -> Vec<String> {
        let mut mounts = self.mount_points();
        mounts.extend(["/etc/hosts", "/etc/hostname", "/etc/resolv.conf"].map(str::to_owned));
        self.diff()
            .into_iter()
            .filter(|line| {
                let path = line.get(2..).unwrap_or_default();
                !mounts.iter().any(|m| {
                    m == path || m.starts_with(&format!("{}/", path.trim_end_matches('/')))
                })
            })
            .collect()
    }

    /// `podman stop --time <grace>` (SIGTERM, SIGKILL after the grace) and
    /// the exit code.
    pub fn stop(&self, grace_secs: u64) -> i32 {
        podman(&["stop", "--time", &grace_secs.to_string(), &self.name]);
        self.inspect("{{.State.ExitCode}}")
            .parse()
            .expect("an exit code")
    }
}

impl Drop for Container {
    fn drop(&mut self) {
        if std::thread::panicking() {
            eprintln!("--- logs of container {}:\n{}", self.name, self.logs());
        }
        let _ = Command::new("podman")
            .args(["rm", "-f", "-t", "0", &self.name])
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .status();
    }
}

/// `podman run --rm [RUNTIME_FLAGS] <flags…> <image> <args…>` to completion:
/// status, stdout, stderr.
pub fn run_once(flags: &[&str], image: &str, args: &[&str]) -> (ExitStatus, String, String) {
    let mut all = vec!["run", "--rm"];
    all.extend(RUNTIME_FLAGS);
    all.extend(flags);
    all.push(image);
    all.extend(args);
    run_bounded("podman", &all)
}

/// The files of `image` (`podman export` of a created, never started,
/// container): `(path, mode, size)` as tar lists them.
pub fn image_files(image: &str) -> Vec<(String, String, u64)> {
    let id = podman(&["create", "--runtime", "runc", image]);
    let id = id.trim();
    let (status, listing, err) = run_bounded(
        "bash",
        &[
            "-c",
            &format!("set -o pipefail; podman export {id} | tar -tvf -"),
        ],
    );
    let _ = run_bounded("podman", &["rm", "-f", id]);
    assert!(status.success(), "podman export {id} | tar -tv: {err}");
    listing
        .lines()
        .filter_map(|l| {
            // "-rwxr-xr-x 0/0  123 2026-01-01 00:00 usr/local/bin/meshhub"
            let f: Vec<&str> = l.split_whitespace().collect();
            (f.len() >= 6).then(|| {
                (
                    f[5..].join(" ").trim_end_matches('/').to_owned(),
                    f[0].to_owned(),
                    f[2].parse().unwrap_or(0),
                )
            })
        })
        .collect()
}

/// One file of `image`, read with `podman cp` from a created container.
pub fn image_file(image: &str, path: &str) -> Vec<u8> {
    let id = podman(&["create", "--runtime", "runc", image]);
    let id = id.trim();
    let out = Command::new("podman")
        .args(["cp", &format!("{id}:{path}"), "-"])
        .output()
        .expect("podman cp runs");
    let _ = run_bounded("podman", &["rm", "-f", id]);
    assert!(
        out.status.success(),
        "podman cp {path}: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    // `podman cp … -` writes a tar stream of the one file.
    let mut tar = Command::new("tar")
        .args(["-xOf", "-"])
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .spawn()
        .expect("tar runs");
    let mut stdin = tar.stdin.take().expect("stdin");
    let bytes = out.stdout;
    let writer = std::thread::spawn(move || {
        use std::io::Write as _;
        let _ = stdin.write_all(&bytes);
    });
    let extracted = tar.wait_with_output().expect("tar output");
    let _ = writer.join();
    extracted.stdout
}
