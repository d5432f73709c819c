//! Generates the 36.213 tables as Rust statics from the crate's CSV files, so the numbers
//! exist in exactly one place (`emulator/lte/tables/`) for every language in the project
//! (`clawbed/lte.py` reads the same files).
//!
//! Any missing file or malformed line fails the build with the file and line named.

use std::env;
use std::fmt::Write as _;
use std::fs;
use std::path::{Path, PathBuf};
use std::process;

const MCS_FILE: &str = "mcs_table_36213_7_1_7_1.csv";
const TBS_FILE: &str = "tbs_table_36213_7_1_7_2_1.csv";
const TRANSLATION_FILE: &str = "tbs_1to2layer_translation_36213_7_1_7_2_2.csv";

/// Table 7.1.7.1-1 has I_MCS 0..=31.
const MCS_ROWS: usize = 32;
/// Table 7.1.7.2.1-1 has I_TBS 0..=26 ...
const TBS_ROWS: usize = 27;
/// ... and N_PRB 1..=110.
const TBS_COLUMNS: usize = 110;
/// Table 7.1.7.2.2-1 has 112 one-layer → two-layer pairs.
const TRANSLATION_ROWS: usize = 112;
/// Two-layer TBS switches from the doubled column to the translation table here.
const FIRST_TRANSLATED_N_PRB: usize = 56;

fn main() {
    if let Err(message) = run() {
        eprintln!("error: {message}");
        process::exit(1);
    }
}

fn run() -> Result<(), String> {
    println!("cargo:rerun-if-changed=build.rs");
    let dir = table_dir()?;

    let mcs = parse_mcs(&read_csv(&dir, MCS_FILE)?)?;
    let tbs = parse_tbs(&read_csv(&dir, TBS_FILE)?)?;
    let translation = parse_translation(&read_csv(&dir, TRANSLATION_FILE)?)?;
    check_translation_covers_tbs(&tbs, &translation)?;

    let out_dir = env::var_os("OUT_DIR").ok_or("OUT_DIR is not set (not run by cargo?)")?;
    let out = PathBuf::from(out_dir).join("tables.rs");
    let source = render(&dir, &mcs, &tbs, &translation);
    fs::write(&out, source).map_err(|e| format!("{}: cannot write: {e}", out.display()))
}

fn table_dir() -> Result<PathBuf, String> {
    let manifest = env::var_os("CARGO_MANIFEST_DIR").ok_or("CARGO_MANIFEST_DIR is not set")?;
    Ok(PathBuf::from(manifest).join("tables"))
}

/// One CSV file split into lines of trimmed fields, each with its 1-based line number.
struct Csv {
    path: PathBuf,
    lines: Vec<(usize, Vec<String>)>,
}

impl Csv {
    fn error(&self, line: usize, message: impl std::fmt::Display) -> String {
        format!("{}:{line}: {message}", self.path.display())
    }
}

fn read_csv(dir: &Path, name: &str) -> Result<Csv, String> {
    let path = dir.join(name);
    println!("cargo:rerun-if-changed={}", path.display());
    let text = fs::read_to_string(&path).map_err(|e| format!("{}: cannot read 36.213 table ({e})", path.display()))?;
    let lines = text
        .lines()
        .enumerate()
        .filter(|(_, l)| !l.trim().is_empty())
        .map(|(i, l)| (i + 1, l.split(',').map(|f| f.trim().to_string()).collect()))
        .collect();
    Ok(Csv { path, lines })
}

fn expect_header(csv: &Csv, expected: &[&str]) -> Result<(), String> {
    let (line, fields) = csv.lines.first().ok_or_else(|| csv.error(1, "file is empty"))?;
    if fields.iter().map(String::as_str).ne(expected.iter().copied()) {
        return Err(csv.error(*line, format!("header must be {}", expected.join(","))));
    }
    Ok(())
}

fn expect_rows(csv: &Csv, count: usize) -> Result<(), String> {
    let data = csv.lines.len().saturating_sub(1);
    if data != count {
        let line = csv.lines.last().map_or(1, |(l, _)| *l);
        return Err(csv.error(line, format!("expected {count} data rows, found {data}")));
    }
    Ok(())
}

fn expect_width(csv: &Csv, line: usize, fields: &[String], width: usize) -> Result<(), String> {
    if fields.len() != width {
        return Err(csv.error(line, format!("expected {width} fields, found {}", fields.len())));
    }
    Ok(())
}

fn number<T: std::str::FromStr>(csv: &Csv, line: usize, column: &str, field: &str) -> Result<T, String> {
    field.parse().map_err(|_| csv.error(line, format!("column {column}: `{field}` is not a valid number")))
}

/// (Q_m, I_TBS or None for "reserved") indexed by I_MCS.
fn parse_mcs(csv: &Csv) -> Result<Vec<(u8, Option<u8>)>, String> {
    expect_header(csv, &["I_MCS", "Q_m", "I_TBS"])?;
    expect_rows(csv, MCS_ROWS)?;
    let mut rows = Vec::with_capacity(MCS_ROWS);
    for (index, (line, fields)) in csv.lines[1..].iter().enumerate() {
        expect_width(csv, *line, fields, 3)?;
        let i_mcs: usize = number(csv, *line, "I_MCS", &fields[0])?;
        if i_mcs != index {
            return Err(csv.error(*line, format!("I_MCS {i_mcs} out of order, expected {index}")));
        }
        let q_m: u8 = number(csv, *line, "Q_m", &fields[1])?;
        if ![2, 4, 6].contains(&q_m) {
            return Err(csv.error(*line, format!("Q_m {q_m} is not 2, 4 or 6")));
        }
        let i_tbs = if fields[2] == "reserved" {
            None
        } else {
            let i_tbs: u8 = number(csv, *line, "I_TBS", &fields[2])?;
            if usize::from(i_tbs) >= TBS_ROWS {
                return Err(csv.error(*line, format!("I_TBS {i_tbs} is beyond the TBS table")));
            }
            Some(i_tbs)
        };
        rows.push((q_m, i_tbs));
    }
    Ok(rows)
}

/// One-layer TBS in bits, `[I_TBS][N_PRB - 1]`.
fn parse_tbs(csv: &Csv) -> Result<Vec<Vec<u32>>, String> {
    let header: Vec<String> =
        std::iter::once("I_TBS".to_string()).chain((1..=TBS_COLUMNS).map(|n| n.to_string())).collect();
    let header: Vec<&str> = header.iter().map(String::as_str).collect();
    expect_header(csv, &header)?;
    expect_rows(csv, TBS_ROWS)?;
    let mut rows = Vec::with_capacity(TBS_ROWS);
    for (index, (line, fields)) in csv.lines[1..].iter().enumerate() {
        expect_width(csv, *line, fields, TBS_COLUMNS + 1)?;
        let i_tbs: usize = number(csv, *line, "I_TBS", &fields[0])?;
        if i_tbs != index {
            return Err(csv.error(*line, format!("I_TBS {i_tbs} out of order, expected {index}")));
        }
        let mut row = Vec::with_capacity(TBS_COLUMNS);
        for (n_prb, field) in (1..=TBS_COLUMNS).zip(&fields[1..]) {
            let bits: u32 = number(csv, *line, &n_prb.to_string(), field)?;
            if bits == 0 {
                return Err(csv.error(*line, format!("column {n_prb}: TBS must be positive")));
            }
            row.push(bits);
        }
        rows.push(row);
    }
    Ok(rows)
}

/// (one-layer TBS, two-layer TBS), sorted by the one-layer value for binary search.
fn parse_translation(csv: &Csv) -> Result<Vec<(u32, u32)>, String> {
    expect_header(csv, &["TBS_L1", "TBS_L2"])?;
    expect_rows(csv, TRANSLATION_ROWS)?;
    let mut pairs: Vec<(u32, u32)> = Vec::with_capacity(TRANSLATION_ROWS);
    for (line, fields) in &csv.lines[1..] {
        expect_width(csv, *line, fields, 2)?;
        let one: u32 = number(csv, *line, "TBS_L1", &fields[0])?;
        let two: u32 = number(csv, *line, "TBS_L2", &fields[1])?;
        if let Some(&(previous, _)) = pairs.last() {
            if one <= previous {
                return Err(csv.error(*line, "TBS_L1 must be strictly increasing"));
            }
        }
        pairs.push((one, two));
    }
    Ok(pairs)
}

/// Every one-layer value the two-layer rule can look up (N_PRB 56..=110) must have a
/// translation, so the library's lookup cannot miss at run time.
fn check_translation_covers_tbs(tbs: &[Vec<u32>], translation: &[(u32, u32)]) -> Result<(), String> {
    for (i_tbs, row) in tbs.iter().enumerate() {
        for (n_prb, &bits) in row.iter().enumerate().skip(FIRST_TRANSLATED_N_PRB - 1) {
            if translation.binary_search_by_key(&bits, |&(one, _)| one).is_err() {
                return Err(format!(
                    "{TRANSLATION_FILE}: no two-layer entry for one-layer TBS {bits} \
                     (I_TBS {i_tbs}, N_PRB {}) of {TBS_FILE}",
                    n_prb + 1
                ));
            }
        }
    }
    Ok(())
}

fn render(dir: &Path, mcs: &[(u8, Option<u8>)], tbs: &[Vec<u32>], translation: &[(u32, u32)]) -> String {
    let mut s = String::new();
    // `writeln!` into a String cannot fail.
    let _ = writeln!(s, "// Generated by build.rs from {}; do not edit.", dir.display());
    let _ = writeln!(s, "/// (Q_m, I_TBS) by I_MCS; `None` I_TBS marks a reserved index.");
    let _ = writeln!(s, "pub(crate) static MCS_TABLE: [(u8, Option<u8>); {MCS_ROWS}] = [");
    for (q_m, i_tbs) in mcs {
        let _ = writeln!(s, "    ({q_m}, {i_tbs:?}),");
    }
    let _ = writeln!(s, "];");
    let _ = writeln!(s, "/// One-layer TBS in bits, `[I_TBS][N_PRB - 1]`.");
    let _ = writeln!(s, "pub(crate) static TBS_TABLE: [[u32; {TBS_COLUMNS}]; {TBS_ROWS}] = [");
    for row in tbs {
        let cells: Vec<String> = row.iter().map(u32::to_string).collect();
        let _ = writeln!(s, "    [{}],", cells.join(", "));
    }
    let _ = writeln!(s, "];");
    let _ = writeln!(s, "/// (one-layer TBS, two-layer TBS) in bits, sorted by the one-layer value.");
    let _ = writeln!(s, "pub(crate) static TBS_TRANSLATION: [(u32, u32); {TRANSLATION_ROWS}] = [");
    for (one, two) in translation {
        let _ = writeln!(s, "    ({one}, {two}),");
    }
    let _ = writeln!(s, "];");
    s
}
