//! `clawbed-claw-client`: the CLAW client of one UE, compiled (`claw/DESIGN.md`, "The
//! compiled client"). The Python client (`python -m clawbed.claw.client`) is the reference;
//! it launches this one by default (`--client-impl fast`), after loading the UE's ACK
//! marker, which it owns.
//!
//! - `run`: the daemon (diag feed in, feedback out, echoes in, loss flags, estimates log);
//! - `replay`: the same client over a recorded feed with the echoes it received, for the
//!   test that compares it with the reference report by report;
//! - `serve-feed`: plays a recorded feed at real rate to many connections (the bench of
//!   clients per core).

mod analyzer;
mod core;
mod daemon;
mod detector;
mod estimates;
mod feed;
mod feedback;
mod json;
mod marking;
mod serve;

use std::net::ToSocketAddrs;
use std::path::PathBuf;
use std::process::ExitCode;
use std::time::Duration;

use clap::{Args, Parser, Subcommand, ValueEnum};

use crate::analyzer::{Clamp, Variant, DEFAULT_IDLE_TIMEOUT_MS};
use crate::core::{ClientConfig, MAX_FEEDBACK_PERIOD_MS, MIN_FEEDBACK_PERIOD_MS};
use crate::estimates::EstimateLog;
use crate::feed::VALID_N_RB;
use crate::feedback::MIN_KEY_BYTES;

/// Default `--batch-ms`: 10 ms between feed reads keeps a client under 1 % of a core at the
/// 1 ms feed (a read per subframe: ~2.5 %), within the 100 ms feedback period.
const DEFAULT_BATCH_MS: u64 = 10;

#[derive(Parser)]
#[command(
    name = "clawbed-claw-client",
    about = "The CLAW client of one UE (compiled; the reference is python -m clawbed.claw.client)"
)]
struct Cli {
    #[command(subcommand)]
    command: Command,
}

#[derive(Subcommand)]
enum Command {
    /// Run the client: the UE's diag feed in, feedback to the server agent out.
    Run(RunArgs),
    /// The client over a recorded feed (lines of diag messages and {"echo_hex": ...}).
    Replay(ReplayArgs),
    /// Play a recorded feed at real rate (1 ms per subframe) to N connections.
    ServeFeed(serve::ServeArgs),
}

#[derive(Clone, Copy, ValueEnum)]
enum VariantArg {
    Claw,
    Cqic,
}

#[derive(Clone, Copy, ValueEnum)]
enum ClampArg {
    Window,
    Sample,
}

/// The client's own settings (the reference's flags of the same names).
#[derive(Args)]
struct ClientArgs {
    /// UE id in the feedback reports (0..65535).
    #[arg(long)]
    ue_id: u16,
    /// File holding the key shared with the server agent (its exact bytes, ≥ 16).
    #[arg(long)]
    key_file: PathBuf,
    /// Feedback period, ms of diag time, 1..10000.
    #[arg(long, default_value_t = 100)]
    period_ms: i64,
    #[arg(long, value_enum, default_value = "claw")]
    variant: VariantArg,
    /// Never report a wireline bottleneck (CLAW without its detector).
    #[arg(long = "no-bottleneck-detector", action = clap::ArgAction::SetFalse)]
    bottleneck_detector: bool,
    /// The cell's transmit antennas (1 or 2).
    #[arg(long, default_value_t = 2)]
    n_antennas: i64,
    /// The cell's RBs (default: from the first measurement).
    #[arg(long)]
    n_rb: Option<i64>,
    #[arg(long, value_enum, default_value = "window")]
    clamp: ClampArg,
    /// No scheduled subframe for this long = radio idle, ms.
    #[arg(long, default_value_t = DEFAULT_IDLE_TIMEOUT_MS)]
    idle_timeout_ms: i64,
    /// CSV file for the per-subframe estimates.
    #[arg(long)]
    log: Option<PathBuf>,
    /// Log one row per this many ms.
    #[arg(long, default_value_t = 1)]
    log_period_ms: i64,
    /// Sequence number of the first report (default: the time in ms, mod 2^32).
    #[arg(long)]
    first_seq: Option<u32>,
}

#[derive(Args)]
struct RunArgs {
    #[command(flatten)]
    client: ClientArgs,
    /// The CLAW server agent's UDP address, HOST:PORT.
    #[arg(long)]
    server: String,
    /// Diag feed TCP port on 127.0.0.1 in the UE namespace.
    #[arg(long, default_value_t = 5775)]
    diag_port: u16,
    /// UE namespace to run in (feed and feedback sockets are made there).
    #[arg(long)]
    netns: Option<String>,
    /// The pinned config map of the UE's ACK marker (loaded by the launcher).
    #[arg(long)]
    ack_map: Option<PathBuf>,
    /// How long to retry the diag feed while it refuses, s.
    #[arg(long, default_value_t = 10.0)]
    connect_timeout_s: f64,
    /// End (as on SIGTERM) when the process that started this one ends: the launcher that
    /// owns the UE's ACK marker.
    #[arg(long)]
    exit_with_parent: bool,
    /// Once able to do its job (feed connected, feedback socket open, loss-flag map and
    /// log open), append one line `ready ue=<id> pid=<pid>` to this file (or FIFO): the
    /// launcher's readiness signal. The first estimate comes later, at the feed's first
    /// message.
    #[arg(long)]
    ready_file: Option<PathBuf>,
    /// Read the feed at most once per this many ms (0: as it arrives): a wake-up per
    /// subframe costs more than the subframe's work. The estimates and verdicts are the same
    /// (diag time); reports and loss flags leave up to this much later.
    #[arg(long, default_value_t = DEFAULT_BATCH_MS)]
    batch_ms: u64,
}

#[derive(Args)]
struct ReplayArgs {
    #[command(flatten)]
    client: ClientArgs,
    /// The recorded feed: JSON lines, diag messages and {"echo_hex": "<datagram>"}.
    #[arg(long)]
    input: PathBuf,
    /// Write each report's datagram here, in hex, one a line.
    #[arg(long)]
    feedback_out: Option<PathBuf>,
}

fn client_config(a: &ClientArgs) -> Result<(ClientConfig, Vec<u8>), String> {
    if !(MIN_FEEDBACK_PERIOD_MS..=MAX_FEEDBACK_PERIOD_MS).contains(&a.period_ms) {
        return Err(format!("--period-ms {}: must be {MIN_FEEDBACK_PERIOD_MS}..{MAX_FEEDBACK_PERIOD_MS}", a.period_ms));
    }
    if !(1..=2).contains(&a.n_antennas) {
        return Err(format!("--n-antennas {}: must be 1 or 2", a.n_antennas));
    }
    if let Some(n) = a.n_rb.filter(|n| !VALID_N_RB.contains(n)) {
        return Err(format!("--n-rb {n}: not an LTE cell size {VALID_N_RB:?}"));
    }
    if a.idle_timeout_ms < 1 {
        return Err("--idle-timeout-ms must be at least 1".into());
    }
    if a.log_period_ms < 1 {
        return Err("--log-period-ms must be at least 1".into());
    }
    let key = std::fs::read(&a.key_file)
        .map_err(|e| format!("--key-file: reading the key file {}: {e}", a.key_file.display()))?;
    if key.len() < MIN_KEY_BYTES {
        return Err(format!(
            "--key-file: key file {} holds {} bytes; the key must be at least {MIN_KEY_BYTES}",
            a.key_file.display(),
            key.len()
        ));
    }
    let first_seq = a.first_seq.unwrap_or_else(|| {
        let ms = std::time::SystemTime::now().duration_since(std::time::UNIX_EPOCH).map_or(0, |d| d.as_millis());
        (ms & 0xFFFF_FFFF) as u32
    });
    let config = ClientConfig {
        ue_id: a.ue_id,
        n_antennas: a.n_antennas,
        n_rb: a.n_rb,
        variant: match a.variant {
            VariantArg::Claw => Variant::Claw,
            VariantArg::Cqic => Variant::Cqic,
        },
        bottleneck_detector: a.bottleneck_detector,
        feedback_period_ms: a.period_ms,
        idle_timeout_ms: a.idle_timeout_ms,
        first_seq,
        clamp: match a.clamp {
            ClampArg::Window => Clamp::Window,
            ClampArg::Sample => Clamp::Sample,
        },
    };
    Ok((config, key))
}

fn open_log(a: &ClientArgs) -> Result<Option<EstimateLog>, String> {
    match &a.log {
        Some(p) => EstimateLog::create(p, a.log_period_ms).map(Some).map_err(|e| format!("--log {}: {e}", p.display())),
        None => Ok(None),
    }
}

fn run(cli: Cli) -> Result<String, String> {
    match cli.command {
        Command::Run(a) => {
            let (client, key) = client_config(&a.client)?;
            let server = a
                .server
                .to_socket_addrs()
                .map_err(|e| format!("--server {}: not HOST:PORT ({e})", a.server))?
                .find(|s| s.is_ipv4())
                .ok_or_else(|| format!("--server {}: no IPv4 address", a.server))?;
            if !(a.connect_timeout_s.is_finite() && a.connect_timeout_s >= 0.0) {
                return Err(format!("--connect-timeout-s {}: must be ≥ 0", a.connect_timeout_s));
            }
            daemon::run(daemon::DaemonConfig {
                client,
                server,
                key,
                diag_port: a.diag_port,
                netns: a.netns,
                log_path: a.client.log.clone(),
                log_period_ms: a.client.log_period_ms,
                connect_timeout: Duration::from_secs_f64(a.connect_timeout_s),
                ack_map: a.ack_map,
                batch_ms: a.batch_ms,
                exit_with_parent: a.exit_with_parent,
                ready_file: a.ready_file,
            })
        }
        Command::Replay(a) => {
            let (client, key) = client_config(&a.client)?;
            let log = open_log(&a.client)?;
            daemon::replay(&a.input, client, &key, log, a.feedback_out.as_deref())
        }
        Command::ServeFeed(a) => serve::serve(&a),
    }
}

fn main() -> ExitCode {
    let cli = Cli::parse();
    match run(cli) {
        Ok(report) => {
            if !report.is_empty() {
                println!("claw-client {report}");
            }
            ExitCode::SUCCESS
        }
        Err(e) => {
            eprintln!("claw-client: error: {e}");
            ExitCode::FAILURE
        }
    }
}
