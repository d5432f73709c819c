//! The trace metadata: one JSON object, the same in both encodings (FORMAT.md, "Metadata").

use serde_json::{Map, Value};

use crate::error::Defect;

/// The only format version this library reads and writes.
pub const FORMAT_VERSION: u32 = 1;

/// Highest system frame number; SFNs count modulo 1024.
pub const MAX_SFN: u16 = 1023;

/// The cell the trace was recorded in or synthesised for.
#[derive(Debug, Clone, PartialEq)]
pub struct Cell {
    /// Channel bandwidth, MHz: 1.4, 3, 5, 10, 15 or 20.
    pub bandwidth_mhz: f64,
    /// Downlink resource blocks of the cell, N_rb; must match the bandwidth.
    pub n_rb: u8,
    /// Transmit antenna ports, 1 or 2 (sets N_ref of the RSRQ model).
    pub n_antennas: u8,
}

/// The metadata of a trace.
#[derive(Debug, Clone, PartialEq)]
pub struct Metadata {
    /// Format version, 1.
    pub format_version: u32,
    /// The cell.
    pub cell: Cell,
    /// Number of rows, ms (= last `t_ms` + 1).
    pub duration_ms: u32,
    /// SFN of the first row, 0..=1023.
    pub start_sfn: u16,
    /// Where the trace comes from: `synth`, `mahimahi`, `decoder-csv`, or another short word.
    pub source: String,
    /// How the trace was made (generator, parameters, seed, input file and its SHA-256,
    /// lossy mappings); free-form.
    pub provenance: Map<String, Value>,
    /// Free text.
    pub description: Option<String>,
}

const TOP_KEYS: [&str; 7] =
    ["format_version", "cell", "duration_ms", "start_sfn", "source", "provenance", "description"];
const CELL_KEYS: [&str; 3] = ["bandwidth_mhz", "n_rb", "n_antennas"];

impl Metadata {
    /// Reads metadata from its JSON object. Returns every missing key, mistyped value and
    /// unknown key (a typo must not pass silently; free-form data goes in `provenance`).
    /// Ranges and consistency are checked by [`Metadata::validate`].
    pub fn from_json(value: &Value) -> Result<Metadata, Vec<Defect>> {
        let mut defects = Vec::new();
        let Some(object) = value.as_object() else {
            return Err(vec![Defect::new("metadata", "must be a JSON object")]);
        };
        unknown_keys(object, &TOP_KEYS, "", &mut defects);

        let format_version = integer(object, "format_version", "format_version", &mut defects);
        let duration_ms = integer(object, "duration_ms", "duration_ms", &mut defects);
        let start_sfn = integer(object, "start_sfn", "start_sfn", &mut defects);
        let source = match object.get("source") {
            Some(Value::String(s)) => Some(s.clone()),
            Some(_) => type_defect("source", "a string", &mut defects),
            None => missing("source", &mut defects),
        };
        let provenance = match object.get("provenance") {
            Some(Value::Object(map)) => Some(map.clone()),
            Some(_) => type_defect("provenance", "a JSON object", &mut defects),
            None => missing("provenance", &mut defects),
        };
        let description = match object.get("description") {
            None => None,
            Some(Value::String(s)) => Some(s.clone()),
            Some(_) => type_defect("description", "a string", &mut defects),
        };
        let cell = match object.get("cell") {
            Some(Value::Object(cell)) => {
                unknown_keys(cell, &CELL_KEYS, "cell.", &mut defects);
                let bandwidth_mhz = match cell.get("bandwidth_mhz") {
                    Some(Value::Number(n)) => n.as_f64(),
                    Some(_) => type_defect("cell.bandwidth_mhz", "a number", &mut defects),
                    None => missing("cell.bandwidth_mhz", &mut defects),
                };
                let n_rb = integer(cell, "n_rb", "cell.n_rb", &mut defects);
                let n_antennas = integer(cell, "n_antennas", "cell.n_antennas", &mut defects);
                match (bandwidth_mhz, n_rb, n_antennas) {
                    (Some(bandwidth_mhz), Some(n_rb), Some(n_antennas)) => {
                        Some(Cell { bandwidth_mhz, n_rb, n_antennas })
                    }
                    _ => None,
                }
            }
            Some(_) => type_defect("cell", "a JSON object", &mut defects),
            None => missing("cell", &mut defects),
        };

        match (format_version, cell, duration_ms, start_sfn, source, provenance) {
            (Some(format_version), Some(cell), Some(duration_ms), Some(start_sfn), Some(source), Some(provenance))
                if defects.is_empty() =>
            {
                Ok(Metadata { format_version, cell, duration_ms, start_sfn, source, provenance, description })
            }
            _ => Err(defects),
        }
    }

    /// The metadata as a JSON object, keys in FORMAT.md's order. A whole-number bandwidth is
    /// written as an integer (`10`, not `10.0`), as people write it.
    pub fn to_json(&self) -> Value {
        let bandwidth = self.cell.bandwidth_mhz;
        // The cast is exact: the value is whole and checked to lie well inside i64.
        let bandwidth = if bandwidth.fract() == 0.0 && bandwidth.abs() < 1e15 {
            Value::from(bandwidth as i64)
        } else {
            Value::from(bandwidth)
        };
        let mut cell = Map::new();
        cell.insert("bandwidth_mhz".into(), bandwidth);
        cell.insert("n_rb".into(), self.cell.n_rb.into());
        cell.insert("n_antennas".into(), self.cell.n_antennas.into());
        let mut object = Map::new();
        object.insert("format_version".into(), self.format_version.into());
        object.insert("cell".into(), Value::Object(cell));
        object.insert("duration_ms".into(), self.duration_ms.into());
        object.insert("start_sfn".into(), self.start_sfn.into());
        object.insert("source".into(), self.source.clone().into());
        object.insert("provenance".into(), Value::Object(self.provenance.clone()));
        if let Some(description) = &self.description {
            object.insert("description".into(), description.clone().into());
        }
        Value::Object(object)
    }

    /// Every range or consistency rule of the metadata that is broken: version, bandwidth,
    /// N_rb matching the bandwidth, antennas, start SFN, a non-empty one-word source.
    /// (That `duration_ms` matches the rows is checked by [`crate::Trace::validate`].)
    pub fn validate(&self) -> Vec<Defect> {
        let mut defects = Vec::new();
        if self.format_version != FORMAT_VERSION {
            defects
                .push(Defect::new("format_version", format!("is {}, must be {FORMAT_VERSION}", self.format_version)));
        }
        match lte::bandwidth::n_rb_for_mhz(self.cell.bandwidth_mhz) {
            None => defects.push(Defect::new(
                "cell.bandwidth_mhz",
                format!("is {}, must be 1.4, 3, 5, 10, 15 or 20", self.cell.bandwidth_mhz),
            )),
            Some(n_rb) if n_rb != self.cell.n_rb => defects.push(Defect::new(
                "cell.n_rb",
                format!("is {}, but a {} MHz cell has {n_rb}", self.cell.n_rb, self.cell.bandwidth_mhz),
            )),
            Some(_) => {}
        }
        if lte::bandwidth::mhz_for_n_rb(self.cell.n_rb).is_none() {
            defects.push(Defect::new("cell.n_rb", format!("is {}, must be 6, 15, 25, 50, 75 or 100", self.cell.n_rb)));
        }
        if lte::rsrq::n_ref(self.cell.n_antennas).is_none() {
            defects.push(Defect::new("cell.n_antennas", format!("is {}, must be 1 or 2", self.cell.n_antennas)));
        }
        if self.start_sfn > MAX_SFN {
            defects.push(Defect::new("start_sfn", format!("is {}, must be 0..={MAX_SFN}", self.start_sfn)));
        }
        if self.source.is_empty() || self.source.chars().any(char::is_whitespace) {
            defects.push(Defect::new("source", format!("is {:?}, must be one short word", self.source)));
        }
        defects
    }
}

fn unknown_keys(object: &Map<String, Value>, known: &[&str], prefix: &str, defects: &mut Vec<Defect>) {
    for key in object.keys().filter(|k| !known.contains(&k.as_str())) {
        defects.push(Defect::new(
            format!("{prefix}{key}"),
            "unknown metadata key (put free-form information in `provenance`)",
        ));
    }
}

fn missing<T>(path: &str, defects: &mut Vec<Defect>) -> Option<T> {
    defects.push(Defect::new(path, "required key is missing"));
    None
}

fn type_defect<T>(path: &str, expected: &str, defects: &mut Vec<Defect>) -> Option<T> {
    defects.push(Defect::new(path, format!("must be {expected}")));
    None
}

/// An unsigned integer that fits `T`, or a defect naming `path`.
fn integer<T>(object: &Map<String, Value>, key: &str, path: &str, defects: &mut Vec<Defect>) -> Option<T>
where
    T: TryFrom<u64> + num_bounds::Max,
{
    match object.get(key) {
        None => missing(path, defects),
        Some(value) => match value.as_u64().and_then(|v| T::try_from(v).ok()) {
            Some(v) => Some(v),
            None => type_defect(path, &format!("an integer in 0..={}", T::MAX_U64), defects),
        },
    }
}

/// The largest value of each integer type metadata uses, for error messages.
mod num_bounds {
    pub trait Max {
        const MAX_U64: u64;
    }
    impl Max for u8 {
        const MAX_U64: u64 = u8::MAX as u64;
    }
    impl Max for u16 {
        const MAX_U64: u64 = u16::MAX as u64;
    }
    impl Max for u32 {
        const MAX_U64: u64 = u32::MAX as u64;
    }
}
