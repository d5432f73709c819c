//! `serve-feed`: a recorded diag feed played at real rate to many clients, for the bench of
//! clients per core (`claw/client/bench.py`). Each client gets its own connection and the
//! whole feed, one subframe's lines every 1 ms (a subframe starts at each PDSCH line, the
//! first the emulator writes per subframe), as the emulator sends it.

use std::io::Write;
use std::net::{TcpListener, TcpStream};
use std::path::PathBuf;
use std::time::{Duration, Instant};

use clap::Args;

#[derive(Args)]
pub struct ServeArgs {
    /// The recorded feed (a diag-ue<N>.jsonl file).
    #[arg(long)]
    input: PathBuf,
    /// TCP port on 127.0.0.1 to listen on.
    #[arg(long)]
    port: u16,
    /// Connections to wait for before playing.
    #[arg(long)]
    clients: usize,
    /// How long to wait for them, s.
    #[arg(long, default_value_t = 30.0)]
    accept_timeout_s: f64,
}

/// Whether a line is a PDSCH message (its type comes first, however the JSON is spaced).
fn starts_subframe(line: &[u8]) -> bool {
    const NAME: &[u8] = b"\"LTE_PHY_PDSCH_Stat_Indication\"";
    line[..line.len().min(64)].windows(NAME.len()).any(|w| w == NAME)
}

/// The feed's lines grouped by subframe (each group ends with a newline).
fn subframes(text: &[u8]) -> Vec<&[u8]> {
    let mut groups = Vec::new();
    let mut start = 0;
    let mut at = 0;
    while at < text.len() {
        let end = text[at..].iter().position(|&b| b == b'\n').map_or(text.len(), |p| at + p + 1);
        if at > start && starts_subframe(&text[at..end]) {
            groups.push(&text[start..at]);
            start = at;
        }
        at = end;
    }
    if start < text.len() {
        groups.push(&text[start..]);
    }
    groups
}

pub fn serve(a: &ServeArgs) -> Result<String, String> {
    let text = std::fs::read(&a.input).map_err(|e| format!("--input {}: {e}", a.input.display()))?;
    let groups = subframes(&text);
    let listener =
        TcpListener::bind(("127.0.0.1", a.port)).map_err(|e| format!("listening on 127.0.0.1:{}: {e}", a.port))?;
    listener.set_nonblocking(true).map_err(|e| e.to_string())?;
    println!("serving {} subframes on 127.0.0.1:{}", groups.len(), a.port);
    let deadline = Instant::now() + Duration::from_secs_f64(a.accept_timeout_s.max(0.0));
    let mut clients: Vec<TcpStream> = Vec::new();
    while clients.len() < a.clients {
        match listener.accept() {
            Ok((s, _)) => {
                let _ = s.set_nodelay(true);
                clients.push(s);
            }
            Err(e) if e.kind() == std::io::ErrorKind::WouldBlock => {
                if Instant::now() >= deadline {
                    return Err(format!(
                        "only {} of {} clients connected in {} s",
                        clients.len(),
                        a.clients,
                        a.accept_timeout_s
                    ));
                }
                std::thread::sleep(Duration::from_millis(5));
            }
            Err(e) => return Err(format!("accepting: {e}")),
        }
    }
    // The bench samples the clients' CPU from here.
    println!("playing");
    let start = Instant::now();
    let mut late_ms_max = 0u128;
    for (k, group) in groups.iter().enumerate() {
        let due = start + Duration::from_millis(k as u64);
        let now = Instant::now();
        if due > now {
            std::thread::sleep(due - now);
        } else {
            late_ms_max = late_ms_max.max((now - due).as_millis());
        }
        // A client that stopped reading is dropped, as the emulator drops a slow subscriber.
        clients.retain_mut(|c| c.write_all(group).is_ok());
    }
    let seconds = start.elapsed().as_secs_f64();
    drop(clients);
    Ok(format!("{{\"subframes\": {}, \"seconds\": {seconds:.3}, \"late_ms_max\": {late_ms_max}}}", groups.len()))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn groups_start_at_each_pdsch_line() {
        let text = b"{\"type_id\":\"LTE_PHY_PDSCH_Stat_Indication\",\"a\":1}\n{\"type_id\":\"X\"}\n{\"type_id\": \"LTE_PHY_PDSCH_Stat_Indication\"}\n{\"type_id\":\"Y\"}";
        let g = subframes(text);
        assert_eq!(g.len(), 2);
        assert!(g[0].ends_with(b"{\"type_id\":\"X\"}\n"));
        assert!(g[1].ends_with(b"{\"type_id\":\"Y\"}"));
    }
}
