//! Reading and writing both encodings, and every kind of broken file FORMAT.md names.

use std::collections::BTreeMap;
use std::fs;
use std::path::{Path, PathBuf};
use std::process::Command;

use phy_trace::{CbtOptions, Cell, ColumnName, Columns, Encoding, Error, Metadata, Trace};
use serde_json::{json, Map, Value};

/// A scratch directory removed when dropped.
struct Scratch(PathBuf);

impl Scratch {
    fn new(name: &str) -> Scratch {
        let dir = std::env::temp_dir().join(format!("phy-trace-test-{}-{name}", std::process::id()));
        let _ = fs::remove_dir_all(&dir);
        fs::create_dir_all(&dir).unwrap();
        Scratch(dir)
    }

    fn path(&self, file: &str) -> PathBuf {
        self.0.join(file)
    }
}

impl Drop for Scratch {
    fn drop(&mut self) {
        let _ = fs::remove_dir_all(&self.0);
    }
}

fn metadata(rows: u32) -> Metadata {
    let mut provenance = Map::new();
    provenance.insert("generator".into(), "test".into());
    Metadata {
        format_version: 1,
        cell: Cell { bandwidth_mhz: 10.0, n_rb: 50, n_antennas: 2 },
        duration_ms: rows,
        start_sfn: 1020,
        source: "synth".into(),
        provenance,
        description: Some("test trace".into()),
    }
}

/// A valid trace with every column but `harq_fail`, `outage` and `mcs_source`, values varied enough that the
/// encodings differ.
fn sample(rows: u32) -> Trace {
    let n = rows as usize;
    let byte = |i: usize, modulo: usize| (i * 7 % modulo) as u8;
    let columns = Columns {
        t_ms: (0..rows).collect(),
        mcs: (0..n).map(|i| byte(i, 29)).collect(),
        other_rbs: (0..n).map(|i| byte(i, 30)).collect(),
        other_users: Some((0..n).map(|i| byte(i, 5)).collect()),
        harq_fail: None,
        bler: Some((0..n).map(|i| (i % 10) as f32 / 10.0).collect()),
        layers: Some((0..n).map(|i| 1 + (i / 100 % 2) as u8).collect()),
        rsrp_dbm: Some((0..n).map(|i| -95.0 - (i % 16) as f32 / 16.0).collect()),
        own_rbs: Some((0..n).map(|i| byte(i, 21)).collect()),
        own_tbs_bits: Some((0..n).map(|i| (i * 1000 % (1 << 24)) as u32).collect()),
        rsrq_db: Some((0..n).map(|i| -10.0 - (i % 7) as f32 * 0.1).collect()),
        ul_capacity_bits: Some((0..n).map(|i| (i % 5000) as u32 * 8).collect()),
        core_delay_ms: Some((0..n).map(|i| 20.0 + (i / 1000) as f32).collect()),
        outage: None,
        mcs_source: None,
    };
    Trace { metadata: metadata(rows), columns }
}

/// A minimal valid trace: required columns only.
fn minimal(rows: u32) -> Trace {
    let n = rows as usize;
    let columns = Columns { t_ms: (0..rows).collect(), mcs: vec![20; n], other_rbs: vec![10; n], ..Columns::default() };
    Trace { metadata: metadata(rows), columns }
}

/// The JSON header and the blocks of a `.cbt` file.
fn split_cbt(bytes: &[u8]) -> (Value, Vec<u8>) {
    let header_len = u32::from_le_bytes(bytes[12..16].try_into().unwrap()) as usize;
    let header = serde_json::from_slice(&bytes[16..16 + header_len]).unwrap();
    (header, bytes[16 + header_len..].to_vec())
}

fn join_cbt(header: &Value, blocks: &[u8]) -> Vec<u8> {
    let header = serde_json::to_vec(header).unwrap();
    let mut out = b"CBTRACE\0\x01\x00\x00\x00".to_vec();
    out.extend_from_slice(&(header.len() as u32).to_le_bytes());
    out.extend_from_slice(&header);
    out.extend_from_slice(blocks);
    out
}

/// Rewrites the JSON header of the `.cbt` file at `path`.
fn edit_header(path: &Path, edit: impl FnOnce(&mut Value)) {
    let (mut header, blocks) = split_cbt(&fs::read(path).unwrap());
    edit(&mut header);
    fs::write(path, join_cbt(&header, &blocks)).unwrap();
}

/// Byte offset, within the blocks, of column `name`'s block.
fn block_offset(header: &Value, name: &str) -> usize {
    let mut offset = 0;
    for entry in header["columns"].as_array().unwrap() {
        if entry["name"] == name {
            return offset;
        }
        offset += entry["stored_bytes"].as_u64().unwrap() as usize;
    }
    panic!("no column {name}");
}

fn all_raw() -> CbtOptions {
    CbtOptions { encodings: ColumnName::ALL.iter().map(|&c| (c, Encoding::Raw)).collect(), ..CbtOptions::default() }
}

fn defect_fields(error: Error) -> Vec<(String, Option<usize>, Option<usize>)> {
    match error {
        Error::Invalid { defects, .. } => defects.into_iter().map(|d| (d.field, d.row, d.line)).collect(),
        other => panic!("expected Error::Invalid, got {other:?}"),
    }
}

#[test]
fn cbt_round_trip() {
    let dir = Scratch::new("cbt-round-trip");
    let trace = sample(5000);
    let path = dir.path("t.cbt");
    trace.write_cbt(&path).unwrap();
    assert_eq!(Trace::read(&path).unwrap(), trace);
    // The header's metadata is the metadata object of FORMAT.md, bandwidth as an integer.
    let (header, _) = split_cbt(&fs::read(&path).unwrap());
    assert_eq!(header["metadata"]["cell"], json!({"bandwidth_mhz": 10, "n_rb": 50, "n_antennas": 2}));
    assert_eq!(header["columns"][0]["name"], "t_ms");
    assert_eq!(header["columns"][0]["encoding"], "delta-zstd");
}

#[test]
fn writing_leaves_only_the_finished_file() {
    let dir = Scratch::new("atomic");
    minimal(10).write_cbt(dir.path("t.cbt")).unwrap();
    minimal(10).write_csv(dir.path("t.csv")).unwrap();
    let mut names: Vec<String> =
        fs::read_dir(&dir.0).unwrap().map(|e| e.unwrap().file_name().to_string_lossy().into_owned()).collect();
    names.sort();
    assert_eq!(names, ["t.cbt", "t.csv"]);
    let error = minimal(10).write_cbt(dir.path("missing/t.cbt")).unwrap_err();
    assert!(matches!(&error, Error::Io { path, .. } if path.ends_with("missing/t.cbt")), "{error}");
}

#[test]
fn csv_round_trip() {
    let dir = Scratch::new("csv-round-trip");
    let trace = sample(3000);
    let path = dir.path("t.csv");
    trace.write_csv(&path).unwrap();
    assert_eq!(Trace::read(&path).unwrap(), trace);
    let text = fs::read_to_string(&path).unwrap();
    let lines: Vec<&str> = text.lines().take(4).collect();
    assert_eq!(lines[0], "# clawbed-trace 1");
    assert!(lines[1].starts_with("# {\"format_version\":1,"));
    assert_eq!(
        lines[2],
        "t_ms,mcs,other_rbs,other_users,bler,layers,rsrp_dbm,own_rbs,own_tbs_bits,rsrq_db,ul_capacity_bits,core_delay_ms"
    );
    assert_eq!(lines[3], "0,0,0,0,0,1,-95,0,0,-10,0,20");
}

#[test]
fn csv_and_cbt_convert_both_ways() {
    let dir = Scratch::new("convert");
    let trace = sample(2000);
    trace.write(dir.path("a.csv")).unwrap();
    Trace::read(dir.path("a.csv")).unwrap().write(dir.path("b.cbt")).unwrap();
    Trace::read(dir.path("b.cbt")).unwrap().write(dir.path("c.csv")).unwrap();
    assert_eq!(fs::read(dir.path("a.csv")).unwrap(), fs::read(dir.path("c.csv")).unwrap());
    assert!(matches!(trace.write(dir.path("d.txt")), Err(Error::NotATrace { .. })));
}

#[test]
fn every_encoding_round_trips() {
    let dir = Scratch::new("encodings");
    let trace = sample(4000);
    for encoding in [Encoding::Raw, Encoding::Zstd, Encoding::DeltaZstd] {
        let encodings: BTreeMap<ColumnName, Encoding> = ColumnName::ALL
            .iter()
            .map(|&c| {
                let float = c.dtype() == phy_trace::Dtype::F32;
                (c, if float && encoding == Encoding::DeltaZstd { Encoding::Zstd } else { encoding })
            })
            .collect();
        let path = dir.path(&format!("{}.cbt", encoding.as_str()));
        trace.write_cbt_with(&path, &CbtOptions { zstd_level: 1, encodings }).unwrap();
        let (header, blocks) = split_cbt(&fs::read(&path).unwrap());
        assert_eq!(header["columns"][1]["encoding"], encoding.as_str());
        if encoding == Encoding::Raw {
            assert_eq!(blocks.len(), 4000 * (4 + 1 + 1 + 1 + 4 + 1 + 4 + 1 + 4 + 4 + 4 + 4));
        }
        assert_eq!(Trace::read(&path).unwrap(), trace, "{}", encoding.as_str());
    }
}

#[test]
fn delta_zstd_is_refused_for_a_float_column() {
    let dir = Scratch::new("delta-float");
    let options = CbtOptions {
        encodings: [(ColumnName::Bler, Encoding::DeltaZstd)].into_iter().collect(),
        ..CbtOptions::default()
    };
    let error = sample(10).write_cbt_with(dir.path("t.cbt"), &options).unwrap_err();
    assert!(matches!(&error, Error::Column { column, .. } if column == "bler"), "{error}");

    // And a file claiming it is rejected on reading.
    let path = dir.path("u.cbt");
    sample(10).write_cbt(&path).unwrap();
    edit_header(&path, |h| h["columns"][4]["encoding"] = "delta-zstd".into());
    let error = Trace::read(&path).unwrap_err();
    assert!(matches!(&error, Error::Column { column, .. } if column == "bler"), "{error}");
}

#[test]
fn corrupted_block_fails_its_crc() {
    let dir = Scratch::new("crc");
    let path = dir.path("t.cbt");
    sample(1000).write_cbt_with(&path, &all_raw()).unwrap();
    let bytes = fs::read(&path).unwrap();
    let (header, mut blocks) = split_cbt(&bytes);
    // Row 10 of `mcs` from 10 to 11: still a valid MCS, so only the CRC can tell.
    let at = block_offset(&header, "mcs") + 10;
    blocks[at] ^= 1;
    fs::write(&path, join_cbt(&header, &blocks)).unwrap();
    let error = Trace::read(&path).unwrap_err();
    assert!(matches!(&error, Error::Crc { column, .. } if column == "mcs"), "{error}");
    let message = error.to_string();
    assert!(message.contains("t.cbt") && message.contains("`mcs`"), "{message}");

    // A compressed block: the CRC recorded in the header no longer matches.
    sample(1000).write_cbt(&path).unwrap();
    edit_header(&path, |h| {
        let crc = h["columns"][2]["crc32"].as_u64().unwrap();
        h["columns"][2]["crc32"] = (crc ^ 0x8000_0000).into();
    });
    let error = Trace::read(&path).unwrap_err();
    assert!(matches!(&error, Error::Crc { column, .. } if column == "other_rbs"), "{error}");
}

#[test]
fn garbage_in_a_zstd_block_is_an_error_not_a_panic() {
    let dir = Scratch::new("zstd-garbage");
    let path = dir.path("t.cbt");
    sample(1000).write_cbt(&path).unwrap();
    let (header, mut blocks) = split_cbt(&fs::read(&path).unwrap());
    let at = block_offset(&header, "own_tbs_bits");
    for b in &mut blocks[at..at + 16] {
        *b = !*b;
    }
    fs::write(&path, join_cbt(&header, &blocks)).unwrap();
    let error = Trace::read(&path).unwrap_err();
    assert!(
        matches!(&error, Error::Column { column, .. } | Error::Crc { column, .. } if column == "own_tbs_bits"),
        "{error}"
    );
}

#[test]
fn truncated_file() {
    let dir = Scratch::new("truncated");
    let path = dir.path("t.cbt");
    sample(1000).write_cbt(&path).unwrap();
    let bytes = fs::read(&path).unwrap();

    fs::write(&path, &bytes[..bytes.len() - 10]).unwrap();
    let error = Trace::read(&path).unwrap_err();
    assert!(matches!(&error, Error::Truncated { part, .. } if part == "column `core_delay_ms`"), "{error}");

    fs::write(&path, &bytes[..40]).unwrap();
    let error = Trace::read(&path).unwrap_err();
    assert!(matches!(&error, Error::Truncated { part, .. } if part == "JSON header"), "{error}");

    fs::write(&path, &bytes[..10]).unwrap();
    let error = Trace::read(&path).unwrap_err();
    assert!(matches!(&error, Error::Truncated { part, .. } if part == "fixed header"), "{error}");
}

#[test]
fn trailing_bytes() {
    let dir = Scratch::new("trailing");
    let path = dir.path("t.cbt");
    minimal(10).write_cbt(&path).unwrap();
    let mut bytes = fs::read(&path).unwrap();
    bytes.extend_from_slice(b"xyz");
    fs::write(&path, bytes).unwrap();
    assert!(matches!(Trace::read(&path), Err(Error::TrailingBytes { extra: 3, .. })));
}

#[test]
fn bad_magic() {
    let dir = Scratch::new("magic");
    let path = dir.path("t.cbt");
    minimal(10).write_cbt(&path).unwrap();
    let mut bytes = fs::read(&path).unwrap();
    bytes[0] = b'X';
    fs::write(&path, &bytes).unwrap();
    assert!(matches!(Trace::read(&path), Err(Error::NotATrace { .. })));
    // Without a known suffix, the content decides; unrecognised content is not a trace.
    let other = dir.path("t.bin");
    fs::write(&other, &bytes).unwrap();
    assert!(matches!(Trace::read(&other), Err(Error::NotATrace { .. })));
    fs::write(dir.path("t.csv"), "t_ms,mcs,other_rbs\n0,1,2\n").unwrap();
    assert!(matches!(Trace::read(dir.path("t.csv")), Err(Error::NotATrace { .. })));
}

#[test]
fn encoding_is_sniffed_without_a_suffix() {
    let dir = Scratch::new("sniff");
    let trace = minimal(20);
    trace.write_cbt(dir.path("a.cbt")).unwrap();
    trace.write_csv(dir.path("a.csv")).unwrap();
    fs::rename(dir.path("a.cbt"), dir.path("binary")).unwrap();
    fs::rename(dir.path("a.csv"), dir.path("text")).unwrap();
    assert_eq!(Trace::read(dir.path("binary")).unwrap(), trace);
    assert_eq!(Trace::read(dir.path("text")).unwrap(), trace);
}

#[test]
fn wrong_version() {
    let dir = Scratch::new("version");
    let path = dir.path("t.cbt");
    minimal(10).write_cbt(&path).unwrap();
    let mut bytes = fs::read(&path).unwrap();
    bytes[8] = 2;
    fs::write(&path, &bytes).unwrap();
    assert!(matches!(Trace::read(&path), Err(Error::UnsupportedVersion { version: 2, .. })));

    let csv = dir.path("t.csv");
    minimal(10).write_csv(&csv).unwrap();
    let text = fs::read_to_string(&csv).unwrap().replacen("# clawbed-trace 1", "# clawbed-trace 2", 1);
    fs::write(&csv, text).unwrap();
    assert!(matches!(Trace::read(&csv), Err(Error::UnsupportedVersion { version: 2, .. })));

    // The metadata's own format_version must be 1 too.
    minimal(10).write_cbt(&path).unwrap();
    edit_header(&path, |h| h["metadata"]["format_version"] = 2.into());
    assert_eq!(defect_fields(Trace::read(&path).unwrap_err()), [("format_version".into(), None, None)]);
}

#[test]
fn unknown_column() {
    let dir = Scratch::new("unknown-column");
    let path = dir.path("t.cbt");
    sample(10).write_cbt(&path).unwrap();
    edit_header(&path, |h| h["columns"][5]["name"] = "layer".into());
    let error = Trace::read(&path).unwrap_err();
    assert!(matches!(&error, Error::UnknownColumn { column, line: None, .. } if column == "layer"), "{error}");

    let csv = dir.path("t.csv");
    fs::write(
        &csv,
        "# clawbed-trace 1\n# {}\nt_ms,mcs,other_rbs,mcs_idx\n0,1,2,3\n"
            .replace("{}", &metadata(1).to_json().to_string()),
    )
    .unwrap();
    let error = Trace::read(&csv).unwrap_err();
    assert!(matches!(&error, Error::UnknownColumn { column, line: Some(3), .. } if column == "mcs_idx"), "{error}");
    assert!(error.to_string().contains("line 3"), "{error}");
}

#[test]
fn header_dtype_must_match_the_column() {
    let dir = Scratch::new("dtype");
    let path = dir.path("t.cbt");
    minimal(10).write_cbt(&path).unwrap();
    edit_header(&path, |h| h["columns"][1]["dtype"] = "u16".into());
    let error = Trace::read(&path).unwrap_err();
    assert!(matches!(&error, Error::Column { column, .. } if column == "mcs"), "{error}");
}

#[test]
fn missing_required_column() {
    let dir = Scratch::new("required");
    let csv = dir.path("t.csv");
    let text = format!("# clawbed-trace 1\n# {}\nt_ms,mcs\n0,1\n", metadata(1).to_json());
    fs::write(&csv, text).unwrap();
    let error = Trace::read(&csv).unwrap_err();
    assert!(matches!(&error, Error::Csv { column: Some(c), line: 3, .. } if c == "other_rbs"), "{error}");
}

#[test]
fn gap_in_t_ms() {
    let dir = Scratch::new("gap");
    let mut trace = minimal(20);
    trace.columns.t_ms[5] = 6;
    trace.columns.t_ms[6] = 7;
    // The writer refuses it...
    let error = trace.write_csv(dir.path("refused.csv")).unwrap_err();
    assert_eq!(defect_fields(error), [("t_ms".into(), Some(5), None)]);

    // ...and a file that has one anyway fails to read, naming the row and its CSV line.
    let csv = dir.path("t.csv");
    minimal(20).write_csv(&csv).unwrap();
    let text = fs::read_to_string(&csv).unwrap().replace("\n5,", "\n6,");
    fs::write(&csv, text).unwrap();
    let error = Trace::read(&csv).unwrap_err();
    assert!(error.to_string().contains("t_ms, row 5 (line 9): is 6"), "{error}");
    assert_eq!(defect_fields(error), [("t_ms".into(), Some(5), Some(9))]);

    // A repeat in a .cbt file.
    let path = dir.path("t.cbt");
    minimal(20).write_cbt_with(&path, &all_raw()).unwrap();
    let (mut header, mut blocks) = split_cbt(&fs::read(&path).unwrap());
    blocks[12..16].copy_from_slice(&2u32.to_le_bytes());
    header["columns"][0]["crc32"] = crc32fast::hash(&blocks[..80]).into();
    fs::write(&path, join_cbt(&header, &blocks)).unwrap();
    assert_eq!(defect_fields(Trace::read(&path).unwrap_err()), [("t_ms".into(), Some(3), None)]);
}

#[test]
fn validate_reports_every_defect() {
    let mut trace = sample(100);
    trace.metadata.cell.n_rb = 25; // a 10 MHz cell has 50
    trace.metadata.start_sfn = 1024;
    trace.columns.mcs[3] = 29;
    trace.columns.mcs[4] = 31;
    trace.columns.harq_fail = Some(vec![0; 100]);
    trace.columns.layers.as_mut().unwrap()[7] = 3;
    trace.columns.rsrp_dbm.as_mut().unwrap()[8] = f32::NAN;
    trace.columns.own_tbs_bits.as_mut().unwrap()[9] = (1 << 24) + 1;
    trace.columns.other_rbs.pop();
    let defects = trace.validate();
    let found: Vec<(&str, Option<usize>)> = defects.iter().map(|d| (d.field.as_str(), d.row)).collect();
    for expected in [
        ("cell.n_rb", None),
        ("start_sfn", None),
        ("other_rbs", None),
        ("mcs", Some(3)),
        ("bler", None),
        ("layers", Some(7)),
        ("rsrp_dbm", Some(8)),
        ("own_tbs_bits", Some(9)),
        // Above the (wrong) 25 RBs: other_rbs alone at row 4, own + other at row 2 (14 + 14).
        ("other_rbs", Some(4)),
        ("own_rbs", Some(2)),
    ] {
        assert!(found.contains(&expected), "{expected:?} not in {found:?}");
    }
    let mcs = defects.iter().find(|d| d.field == "mcs").unwrap();
    assert_eq!(mcs.message, "is 29, must be 0..=28 (2 rows in all)");
    assert!(sample(100).validate().is_empty());
}

#[test]
fn metadata_defects_are_all_reported() {
    let dir = Scratch::new("metadata");
    let path = dir.path("t.cbt");
    minimal(10).write_cbt(&path).unwrap();
    edit_header(&path, |h| {
        let m = h["metadata"].as_object_mut().unwrap();
        m.remove("source");
        m.insert("descripton".into(), "typo".into());
        m["cell"]["n_antennas"] = "two".into();
    });
    let error = Trace::read(&path).unwrap_err();
    let fields: Vec<String> = defect_fields(error).into_iter().map(|(f, _, _)| f).collect();
    assert_eq!(fields, ["descripton", "source", "cell.n_antennas"]);
}

#[test]
fn duration_must_match_rows() {
    let dir = Scratch::new("duration");
    let csv = dir.path("t.csv");
    minimal(10).write_csv(&csv).unwrap();
    let text = fs::read_to_string(&csv).unwrap();
    let lines: Vec<&str> = text.lines().collect();
    fs::write(&csv, lines[..lines.len() - 1].join("\n")).unwrap();
    let fields = defect_fields(Trace::read(&csv).unwrap_err());
    // Each column is one row short of duration_ms: pointed at the column names' line.
    assert_eq!(fields[0], ("t_ms".into(), None, Some(3)));
    assert_eq!(fields.len(), 3);
    // A metadata defect points at the metadata line.
    minimal(10).write_csv(&csv).unwrap();
    let text = fs::read_to_string(&csv).unwrap().replace("\"start_sfn\":1020", "\"start_sfn\":1024");
    fs::write(&csv, text).unwrap();
    assert_eq!(defect_fields(Trace::read(&csv).unwrap_err()), [("start_sfn".into(), None, Some(2))]);
}

#[test]
fn csv_errors_name_line_and_column() {
    let dir = Scratch::new("csv-errors");
    let csv = dir.path("t.csv");
    let head = format!("# clawbed-trace 1\n# {}\nt_ms, mcs ,other_rbs,bler\n", metadata(3).to_json());
    let cases = [
        ("0,20,1,0.1\n1,abc,1,0.1\n2,20,1,0.1\n", 5, Some("mcs"), "`abc` is not a non-negative integer"),
        ("0,20,1,0.1\n1,20,300,0.1\n2,20,1,0.1\n", 5, Some("other_rbs"), "`300` is too large for u8"),
        ("0,20,1,0.1\n1,20,-1,0.1\n2,20,1,0.1\n", 5, Some("other_rbs"), "`-1` is not a non-negative integer"),
        ("0,20,1,0.1\n1,20,1\n2,20,1,0.1\n", 5, Some("bler"), "expected 4 fields"),
        ("0,20,1,0.1\n1,20,1,0.1,9\n", 5, None, "more than the 4 fields of line 3"),
        ("0,20,1,0.1\n\n1,20,1,0.1\n", 5, None, "empty line among the rows"),
        ("0,20,1,x\n", 4, Some("bler"), "`x` is not a number"),
    ];
    for (rows, line, column, message) in cases {
        fs::write(&csv, format!("{head}{rows}")).unwrap();
        match Trace::read(&csv).unwrap_err() {
            Error::Csv { line: l, column: c, message: m, .. } => {
                assert_eq!((l, c.as_deref(), m.as_str()), (line, column, message), "{rows:?}");
            }
            other => panic!("{rows:?}: {other}"),
        }
    }
    // Spaces around fields, CRLF line ends, exponents and trailing blank lines are fine.
    fs::write(&csv, format!("{head}0, 20,1,1e-1\r\n1,20,1 , 0.1\r\n2,20,1,1.0E-1\n\n\n")).unwrap();
    let trace = Trace::read(&csv).unwrap();
    assert_eq!(trace.columns.bler, Some(vec![0.1; 3]));

    fs::write(&csv, format!("{head}0,20,1,0.1\n").replace("\n# {", "\n# {oops")).unwrap();
    assert!(matches!(Trace::read(&csv), Err(Error::Csv { line: 2, .. })));
}

#[test]
fn sfn_and_subframe_follow_time() {
    let trace = minimal(50);
    // start_sfn 1020: row 45 is frame 1020 + 4 = 1024 ≡ 0, subframe 5.
    assert_eq!(trace.sfn_subframe(0), Some((1020, 0)));
    assert_eq!(trace.sfn_subframe(39), Some((1023, 9)));
    assert_eq!(trace.sfn_subframe(45), Some((0, 5)));
    assert_eq!(trace.sfn_subframe(50), None);
}

#[test]
fn cbtrace_summary_and_convert() {
    let dir = Scratch::new("cbtrace");
    let trace = sample(1000);
    let path = dir.path("t.cbt");
    trace.write_cbt(&path).unwrap();
    let out = Command::new(env!("CARGO_BIN_EXE_cbtrace")).arg("summary").arg(&path).output().unwrap();
    assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
    let summary: Value = serde_json::from_slice(&out.stdout).unwrap();
    assert_eq!(summary["rows"], 1000);
    assert_eq!(summary["metadata"], trace.metadata.to_json());
    assert_eq!(summary["columns"]["t_ms"], json!({"sum": 499_500, "min": 0, "max": 999}));
    // The float sum is math.fsum of the f32 values: Python computes the same number.
    assert_eq!(summary["columns"]["bler"], json!({"sum": 450.0000022351742, "min": 0.0, "max": 0.8999999761581421}));
    assert_eq!(summary["columns"].as_object().unwrap().len(), 12);
    assert!(summary["load_seconds"].as_f64().unwrap() >= 0.0);

    let csv = dir.path("t.csv");
    let out = Command::new(env!("CARGO_BIN_EXE_cbtrace")).arg("convert").arg(&path).arg(&csv).output().unwrap();
    assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
    assert_eq!(Trace::read(&csv).unwrap(), trace);

    let out = Command::new(env!("CARGO_BIN_EXE_cbtrace")).arg("summary").arg(dir.path("none.cbt")).output().unwrap();
    assert_eq!(out.status.code(), Some(1));
    let out = Command::new(env!("CARGO_BIN_EXE_cbtrace")).arg("frobnicate").output().unwrap();
    assert_eq!(out.status.code(), Some(2));
}
