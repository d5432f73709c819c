//! Helpers of the end-to-end tests: namespaces that remove themselves, the emulator process
//! with its `ready` line, sockets inside a namespace.
//!
//! The tests need root (namespaces, TUN devices); without it they print why and pass.
//! Names are `cbdpt<N>ue` / `cbdpt<N>core` with N unique per test and process, so tests
//! running in parallel (or another run on the same machine) never share a namespace.

#![allow(dead_code)] // each test file uses a different subset

use std::io::{BufRead, BufReader};
use std::net::{TcpListener, UdpSocket};
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::sync::mpsc;
use std::time::Duration;

use emulator::netns::Namespace;

/// Whether the tests can create namespaces; prints the reason when not.
pub fn have_root() -> bool {
    // SAFETY: geteuid cannot fail.
    let root = unsafe { libc::geteuid() } == 0;
    if !root {
        eprintln!("skipped: needs root (network namespaces and TUN devices)");
    }
    root
}

/// Runs `ip ARGS`, panicking with its stderr on failure.
pub fn ip(args: &[&str]) -> String {
    let out = Command::new("ip").args(args).output().expect("running ip");
    assert!(out.status.success(), "ip {}: {}", args.join(" "), String::from_utf8_lossy(&out.stderr));
    String::from_utf8_lossy(&out.stdout).into_owned()
}

/// A UE and a core namespace, deleted on drop (even when the test panics).
pub struct Namespaces {
    /// The UE namespace's name (`cbdpt<N>ue`).
    pub ue: String,
    /// The core namespace's name (`cbdpt<N>core`).
    pub core: String,
    /// A scratch directory for the test's files, removed on drop.
    pub dir: PathBuf,
}

impl Namespaces {
    /// Creates `cbdpt<N>ue` and `cbdpt<N>core`, N made of `test` and this process's id.
    pub fn create(test: u32) -> Namespaces {
        let n = format!("{test}{:03}", std::process::id() % 1000);
        let ns = Namespaces {
            ue: format!("cbdpt{n}ue"),
            core: format!("cbdpt{n}core"),
            dir: std::env::temp_dir().join(format!("cbdpt{n}-{}", std::process::id())),
        };
        // The guard exists before the first `ip`, so a failure half-way still cleans up.
        ip(&["netns", "add", &ns.ue]);
        ip(&["netns", "add", &ns.core]);
        std::fs::create_dir_all(&ns.dir).expect("scratch dir");
        ns
    }

    /// Links other than `lo` in namespace `name`.
    pub fn links(name: &str) -> Vec<String> {
        ip(&["-n", name, "-o", "link", "show"])
            .lines()
            .filter_map(|l| l.split(':').nth(1).map(|s| s.trim().split('@').next().unwrap_or("").to_string()))
            .filter(|name| name != "lo")
            .collect()
    }

    /// A path in the scratch directory, as a string.
    pub fn path(&self, name: &str) -> String {
        self.dir.join(name).to_string_lossy().into_owned()
    }
}

impl Drop for Namespaces {
    fn drop(&mut self) {
        for name in [&self.ue, &self.core] {
            let _ = Command::new("ip").args(["netns", "del", name]).stderr(Stdio::null()).status();
        }
        let _ = std::fs::remove_dir_all(&self.dir);
    }
}

/// The emulator process; killed on drop if still running.
pub struct Emulator {
    child: Child,
    lines: mpsc::Receiver<String>,
    /// The JSON of the `ready` line.
    pub ready: serde_json::Value,
}

impl Emulator {
    /// Starts `clawbed-emu ARGS` and waits (≤ 5 s) for its `ready` line.
    pub fn start(args: &[&str]) -> Emulator {
        let mut child = Command::new(env!("CARGO_BIN_EXE_clawbed-emu"))
            .args(args)
            .stdout(Stdio::piped())
            .stderr(Stdio::inherit())
            .spawn()
            .expect("starting clawbed-emu");
        let stdout = child.stdout.take().expect("stdout");
        let (tx, lines) = mpsc::channel();
        std::thread::spawn(move || {
            for line in BufReader::new(stdout).lines().map_while(Result::ok) {
                if tx.send(line).is_err() {
                    break;
                }
            }
        });
        let mut emu = Emulator { child, lines, ready: serde_json::Value::Null };
        let line = emu.lines.recv_timeout(Duration::from_secs(5)).expect("a ready line within 5 s");
        let json = line.strip_prefix("ready ").unwrap_or_else(|| panic!("expected `ready {{...}}`, got {line}"));
        emu.ready = serde_json::from_str(json).expect("ready JSON");
        emu
    }

    /// Sends `signal` to the process.
    pub fn signal(&self, signal: libc::c_int) {
        // SAFETY: plain kill(2) to our own child, by its pid.
        assert_eq!(unsafe { libc::kill(self.child.id() as libc::pid_t, signal) }, 0, "kill");
    }

    /// Sends SIGTERM and waits (≤ 5 s) for the exit; returns the exit code and the
    /// `counters` JSON.
    pub fn stop(mut self) -> (i32, serde_json::Value) {
        self.signal(libc::SIGTERM);
        self.wait_exit()
    }

    /// Waits (≤ 5 s) for the process to end by itself; returns the exit code and the
    /// `counters` JSON.
    pub fn wait_exit(&mut self) -> (i32, serde_json::Value) {
        let line = self.lines.recv_timeout(Duration::from_secs(5)).expect("a counters line within 5 s");
        let json = line.strip_prefix("counters ").unwrap_or_else(|| panic!("expected `counters {{...}}`, got {line}"));
        let counters = serde_json::from_str(json).expect("counters JSON");
        let status = self.child.wait().expect("wait");
        (status.code().unwrap_or(-1), counters)
    }
}

impl Drop for Emulator {
    fn drop(&mut self) {
        if let Ok(None) = self.child.try_wait() {
            let _ = self.child.kill();
            let _ = self.child.wait();
        }
    }
}

/// A UDP socket bound to `addr` inside namespace `ns`.
pub fn udp_in(ns: &str, addr: &str) -> UdpSocket {
    let ns = Namespace::open(ns, "test").expect("namespace");
    ns.run_in(|| {
        UdpSocket::bind(addr)
            .map_err(|e| emulator::error::Error::Os { attempted: format!("binding {addr}"), source: e })
    })
    .expect("UDP socket in the namespace")
}

/// A TCP listener bound to `addr` inside namespace `ns`.
pub fn tcp_listener_in(ns: &str, addr: &str) -> TcpListener {
    let ns = Namespace::open(ns, "test").expect("namespace");
    ns.run_in(|| {
        TcpListener::bind(addr)
            .map_err(|e| emulator::error::Error::Os { attempted: format!("binding {addr}"), source: e })
    })
    .expect("TCP listener in the namespace")
}

/// A TCP connection to `addr` from inside namespace `ns`.
pub fn tcp_connect_in(ns: &str, addr: &str) -> std::net::TcpStream {
    let ns = Namespace::open(ns, "test").expect("namespace");
    ns.run_in(|| {
        std::net::TcpStream::connect(addr)
            .map_err(|e| emulator::error::Error::Os { attempted: format!("connecting to {addr}"), source: e })
    })
    .expect("TCP connection from the namespace")
}

/// Runs `clawbed-emu ARGS`, which should fail at once (a config error: no `ready` line);
/// returns its exit code and stderr. One that is still running after 5 s is killed and the
/// test fails, rather than hanging the suite.
pub fn run_failing(args: &[&str]) -> (i32, String) {
    let mut child = Command::new(env!("CARGO_BIN_EXE_clawbed-emu"))
        .args(args)
        .stdout(Stdio::null())
        .stderr(Stdio::piped())
        .spawn()
        .expect("running clawbed-emu");
    let started = std::time::Instant::now();
    while child.try_wait().expect("wait").is_none() {
        if started.elapsed() > Duration::from_secs(5) {
            let _ = child.kill();
            let _ = child.wait();
            panic!("clawbed-emu {} did not fail within 5 s", args.join(" "));
        }
        std::thread::sleep(Duration::from_millis(20));
    }
    let out = child.wait_with_output().expect("output");
    (out.status.code().unwrap_or(-1), String::from_utf8_lossy(&out.stderr).into_owned())
}

/// Writes a CSV PHY trace of `rows` ms: MCS 20, 10 RBs for other users, and a
/// `core_delay_ms` column of `core_delay_ms`.
pub fn write_trace(path: &Path, rows: u32, core_delay_ms: u32) {
    let mut text = String::from("# clawbed-trace 1\n");
    text.push_str(&format!(
        "# {{\"format_version\": 1, \"cell\": {{\"bandwidth_mhz\": 10, \"n_rb\": 50, \"n_antennas\": 2}}, \"duration_ms\": {rows}, \"start_sfn\": 0, \"source\": \"synth\", \"provenance\": {{\"generator\": \"dataplane test\"}}}}\n"
    ));
    text.push_str("t_ms,mcs,other_rbs,core_delay_ms\n");
    for t in 0..rows {
        text.push_str(&format!("{t},20,10,{core_delay_ms}\n"));
    }
    std::fs::write(path, text).expect("writing the trace");
}
