//! Property tests of the readers: any bytes, and any corruption of a valid file, give a
//! trace or an error with a message, never a panic. Bounded (a few hundred cases each), so
//! they run in seconds inside `cargo test`.

use std::path::Path;

use phy_trace::{Error, Trace};
use proptest::prelude::*;

const CASES: u32 = 256;

fn sample(name: &str) -> Vec<u8> {
    let path = Path::new(env!("CARGO_MANIFEST_DIR")).join("../samples").join(name);
    std::fs::read(&path).unwrap_or_else(|e| panic!("{}: {e}", path.display()))
}

/// The reader's verdict on `bytes` named `name`: an error must say something.
fn read(bytes: &[u8], name: &str) -> Result<Trace, Error> {
    let result = Trace::from_bytes(bytes, name);
    if let Err(e) = &result {
        assert!(!e.to_string().trim().is_empty(), "an error without a message");
    }
    result
}

/// A few edits of `bytes`: byte overwrites at `edits` (position, value), then a cut.
fn corrupt(mut bytes: Vec<u8>, edits: &[(usize, u8)], keep: Option<usize>) -> Vec<u8> {
    if !bytes.is_empty() {
        for &(at, value) in edits {
            let i = at % bytes.len();
            bytes[i] = value;
        }
    }
    if let Some(keep) = keep {
        bytes.truncate(keep % (bytes.len() + 1));
    }
    bytes
}

proptest! {
    #![proptest_config(ProptestConfig { cases: CASES, failure_persistence: None, ..ProptestConfig::default() })]

    #[test]
    fn arbitrary_bytes_are_refused_with_a_message(bytes in proptest::collection::vec(any::<u8>(), 0..512)) {
        for name in ["x.cbt", "x.csv", "x"] {
            // Random bytes are not a valid trace (the odds are nil).
            prop_assert!(read(&bytes, name).is_err());
        }
    }

    #[test]
    fn a_cbt_header_with_any_prefix_is_refused(tail in proptest::collection::vec(any::<u8>(), 0..256)) {
        let mut bytes = b"CBTRACE\0\x01\x00\x00\x00".to_vec();
        bytes.extend(tail);
        prop_assert!(read(&bytes, "x.cbt").is_err());
    }

    #[test]
    fn a_corrupted_cbt_is_read_or_refused(
        edits in proptest::collection::vec((any::<usize>(), any::<u8>()), 0..6),
        keep in proptest::option::of(any::<usize>()),
    ) {
        let bytes = corrupt(sample("idle-cell.cbt"), &edits, keep);
        // A change the CRCs and checks cannot see (e.g. within the JSON's whitespace) may
        // still read; anything else is an error.
        let _ = read(&bytes, "idle-cell.cbt");
    }

    #[test]
    fn a_corrupted_cbt_header_is_read_or_refused(
        edits in proptest::collection::vec((0usize..600, any::<u8>()), 1..4),
    ) {
        // Edits within the fixed and JSON headers, where the lengths and the keys are.
        let _ = read(&corrupt(sample("idle-cell.cbt"), &edits, None), "idle-cell.cbt");
    }

    #[test]
    fn a_corrupted_csv_is_read_or_refused(
        edits in proptest::collection::vec((any::<usize>(), prop::sample::select(b",.-0123456789\n#ex ".to_vec())), 0..6),
        keep in proptest::option::of(any::<usize>()),
    ) {
        let _ = read(&corrupt(sample("busy-cell.csv"), &edits, keep), "busy-cell.csv");
    }

    #[test]
    fn csv_text_of_any_shape_is_read_or_refused(
        lines in proptest::collection::vec("[0-9a-z_,.#: -]{0,40}", 0..12),
    ) {
        let mut text = String::from("# clawbed-trace 1\n");
        text.push_str(&lines.join("\n"));
        let _ = read(text.as_bytes(), "x.csv");
    }

    #[test]
    fn csv_rows_of_any_values_are_read_or_refused(
        duration in 0u64..5_000_000_000,
        rows in proptest::collection::vec(proptest::collection::vec("-?[0-9]{0,12}(\\.[0-9]{0,3})?|nan|inf|", 7), 0..6),
    ) {
        // The sample's own metadata line with any duration_ms, its column line, any rows.
        let sample = String::from_utf8(sample("busy-cell.csv")).unwrap_or_default();
        let mut lines = sample.lines();
        let format = lines.next().unwrap_or_default();
        let metadata = lines.next().unwrap_or_default().replace("\"duration_ms\": 2000", &format!("\"duration_ms\": {duration}"));
        let columns = lines.next().unwrap_or_default();
        let mut text = format!("{format}\n{metadata}\n{columns}\n");
        for row in rows {
            text.push_str(&row.join(","));
            text.push('\n');
        }
        let _ = read(text.as_bytes(), "x.csv");
    }
}

#[test]
fn the_samples_read() {
    for name in ["idle-cell.cbt", "busy-cell.csv"] {
        read(&sample(name), name).unwrap_or_else(|e| panic!("{name}: {e}"));
    }
}
