//! The columns of format version 1: names, types, and typed storage.
//!
//! The one list of columns is the `columns!` invocation below; names, dtypes, the
//! required/optional split and the fields of [`Columns`] all come from it, so they cannot
//! drift apart.

/// Element type of a column as stored in a `.cbt` block (little-endian).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum Dtype {
    /// Unsigned 8-bit integer.
    U8,
    /// Unsigned 32-bit integer.
    U32,
    /// IEEE 754 single-precision float.
    F32,
}

impl Dtype {
    /// The name used in the `.cbt` header: `u8`, `u32` or `f32`.
    pub fn as_str(self) -> &'static str {
        match self {
            Dtype::U8 => "u8",
            Dtype::U32 => "u32",
            Dtype::F32 => "f32",
        }
    }

    /// Bytes per value.
    pub fn size(self) -> usize {
        match self {
            Dtype::U8 => 1,
            Dtype::U32 | Dtype::F32 => 4,
        }
    }
}

/// One column's values, owned.
#[derive(Debug, Clone, PartialEq)]
pub enum ColumnData {
    /// A `u8` column.
    U8(Vec<u8>),
    /// A `u32` column.
    U32(Vec<u32>),
    /// An `f32` column.
    F32(Vec<f32>),
}

/// One column's values, borrowed from a [`Columns`].
#[derive(Debug, Clone, Copy, PartialEq)]
pub enum ColumnSlice<'a> {
    /// A `u8` column.
    U8(&'a [u8]),
    /// A `u32` column.
    U32(&'a [u32]),
    /// An `f32` column.
    F32(&'a [f32]),
}

impl ColumnSlice<'_> {
    /// Number of values (rows).
    pub fn len(&self) -> usize {
        match self {
            ColumnSlice::U8(v) => v.len(),
            ColumnSlice::U32(v) => v.len(),
            ColumnSlice::F32(v) => v.len(),
        }
    }

    /// Whether the column holds no values.
    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }

    /// The column's element type.
    pub fn dtype(&self) -> Dtype {
        match self {
            ColumnSlice::U8(_) => Dtype::U8,
            ColumnSlice::U32(_) => Dtype::U32,
            ColumnSlice::F32(_) => Dtype::F32,
        }
    }

    /// The values as little-endian bytes, `len() × dtype().size()` of them: the "raw"
    /// encoding of a `.cbt` block and the input of its CRC-32.
    pub fn to_le_bytes(&self) -> Vec<u8> {
        match self {
            ColumnSlice::U8(v) => v.to_vec(),
            ColumnSlice::U32(v) => v.iter().flat_map(|x| x.to_le_bytes()).collect(),
            ColumnSlice::F32(v) => v.iter().flat_map(|x| x.to_le_bytes()).collect(),
        }
    }
}

impl ColumnData {
    /// The values, borrowed.
    pub fn as_slice(&self) -> ColumnSlice<'_> {
        match self {
            ColumnData::U8(v) => ColumnSlice::U8(v),
            ColumnData::U32(v) => ColumnSlice::U32(v),
            ColumnData::F32(v) => ColumnSlice::F32(v),
        }
    }
}

/// Converts between [`ColumnData`]/[`ColumnSlice`] and typed `Vec`s of one element type.
trait FromColumnData: Sized {
    /// The typed values, or the data back if it holds another type.
    fn from_column_data(data: ColumnData) -> Result<Vec<Self>, ColumnData>;
    fn slice(values: &[Self]) -> ColumnSlice<'_>;
}

macro_rules! impl_from_column_data {
    ($ty:ty, $variant:ident) => {
        impl FromColumnData for $ty {
            fn from_column_data(data: ColumnData) -> Result<Vec<$ty>, ColumnData> {
                match data {
                    ColumnData::$variant(v) => Ok(v),
                    other => Err(other),
                }
            }
            fn slice(values: &[$ty]) -> ColumnSlice<'_> {
                ColumnSlice::$variant(values)
            }
        }
    };
}
impl_from_column_data!(u8, U8);
impl_from_column_data!(u32, U32);
impl_from_column_data!(f32, F32);

macro_rules! columns {
    (
        required { $( $(#[$rdoc:meta])* $rvariant:ident => $rfield:ident : $rty:ty = $rdtype:ident, )* }
        optional { $( $(#[$odoc:meta])* $ovariant:ident => $ofield:ident : $oty:ty = $odtype:ident, )* }
    ) => {
        /// A column of format version 1 (FORMAT.md, "Columns").
        #[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
        pub enum ColumnName {
            $( $(#[$rdoc])* $rvariant, )*
            $( $(#[$odoc])* $ovariant, )*
        }

        impl ColumnName {
            /// Every column, in FORMAT.md's order (the order files are written in).
            pub const ALL: &'static [ColumnName] = &[ $( ColumnName::$rvariant, )* $( ColumnName::$ovariant, )* ];

            /// The column's name in files, e.g. `other_rbs`.
            pub fn as_str(self) -> &'static str {
                match self {
                    $( ColumnName::$rvariant => stringify!($rfield), )*
                    $( ColumnName::$ovariant => stringify!($ofield), )*
                }
            }

            /// The column named `name`, if version 1 defines it.
            pub fn from_name(name: &str) -> Option<ColumnName> {
                ColumnName::ALL.iter().copied().find(|c| c.as_str() == name)
            }

            /// The column's element type.
            pub fn dtype(self) -> Dtype {
                match self {
                    $( ColumnName::$rvariant => Dtype::$rdtype, )*
                    $( ColumnName::$ovariant => Dtype::$odtype, )*
                }
            }

            /// Whether every trace must have this column.
            pub fn is_required(self) -> bool {
                match self {
                    $( ColumnName::$rvariant => true, )*
                    $( ColumnName::$ovariant => false, )*
                }
            }
        }

        /// The values of a trace, one `Vec` per column, one element per row (1 ms subframe).
        /// Optional columns are `None` when absent; a present column has a value in every row.
        #[derive(Debug, Clone, PartialEq, Default)]
        pub struct Columns {
            $( $(#[$rdoc])* pub $rfield: Vec<$rty>, )*
            $( $(#[$odoc])* pub $ofield: Option<Vec<$oty>>, )*
        }

        impl Columns {
            /// The values of column `name`, or `None` if that optional column is absent.
            pub fn get(&self, name: ColumnName) -> Option<ColumnSlice<'_>> {
                match name {
                    $( ColumnName::$rvariant => Some(<$rty as FromColumnData>::slice(&self.$rfield)), )*
                    $( ColumnName::$ovariant => self.$ofield.as_deref().map(<$oty as FromColumnData>::slice), )*
                }
            }

            /// Puts `data` in column `name`, replacing what was there. Gives the data back
            /// if its type is not the column's.
            pub fn set(&mut self, name: ColumnName, data: ColumnData) -> Result<(), ColumnData> {
                match name {
                    $( ColumnName::$rvariant => {
                        self.$rfield = <$rty as FromColumnData>::from_column_data(data)?;
                    } )*
                    $( ColumnName::$ovariant => {
                        self.$ofield = Some(<$oty as FromColumnData>::from_column_data(data)?);
                    } )*
                }
                Ok(())
            }
        }
    };
}

columns! {
    required {
        /// Subframe time since the trace start, ms; row `i` has `t_ms = i`.
        TMs => t_ms: u32 = U32,
        /// The UE's channel-quality MCS index (36.213 Table 7.1.7.1-1), 0..=28.
        Mcs => mcs: u8 = U8,
        /// RBs the cell's other users demand in the subframe (B_k), 0..=N_rb.
        OtherRbs => other_rbs: u8 = U8,
    }
    optional {
        /// Number of active other users.
        OtherUsers => other_users: u8 = U8,
        /// 1 when the UE's first transmission in the subframe fails its CRC, else 0.
        HarqFail => harq_fail: u8 = U8,
        /// Block error rate of a first transmission, 0.0..=1.0.
        Bler => bler: f32 = F32,
        /// Spatial layers of a transport block, 1 or 2.
        Layers => layers: u8 = U8,
        /// Reference signal received power, dBm, -140.0..=-44.0.
        RsrpDbm => rsrp_dbm: f32 = F32,
        /// The UE's RBs as recorded, 0..=N_rb.
        OwnRbs => own_rbs: u8 = U8,
        /// The UE's transport block size as recorded, bits, 0..=2^24.
        OwnTbsBits => own_tbs_bits: u32 = U32,
        /// RSRQ as recorded, dB, -34.0..=3.0.
        RsrqDb => rsrq_db: f32 = F32,
        /// Uplink capacity of the subframe, bits, 0..=2^24.
        UlCapacityBits => ul_capacity_bits: u32 = U32,
        /// One-way core network delay in force from this subframe on, ms, 0.0..=10000.0.
        CoreDelayMs => core_delay_ms: f32 = F32,
        /// 1 when the UE's link is out in the subframe (a stall: data held, not lost), else 0.
        Outage => outage: u8 = U8,
        /// Where the row's `mcs` comes from (imported logs): 0 the log's own MCS, 1 inferred
        /// from the UE's measurements, 2 held (no measurement near).
        McsSource => mcs_source: u8 = U8,
    }
}

impl Columns {
    /// The columns present, in FORMAT.md's order.
    pub fn present(&self) -> Vec<(ColumnName, ColumnSlice<'_>)> {
        ColumnName::ALL.iter().filter_map(|&name| self.get(name).map(|slice| (name, slice))).collect()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn names_round_trip() {
        assert_eq!(ColumnName::ALL.len(), 15);
        for &name in ColumnName::ALL {
            assert_eq!(ColumnName::from_name(name.as_str()), Some(name));
        }
        assert_eq!(ColumnName::from_name("mcs "), None);
        assert_eq!(ColumnName::TMs.as_str(), "t_ms");
        assert_eq!(ColumnName::CoreDelayMs.dtype(), Dtype::F32);
        assert!(ColumnName::OtherRbs.is_required());
        assert!(!ColumnName::Layers.is_required());
    }

    #[test]
    fn declared_dtype_is_the_storage_type() {
        let mut columns = Columns::default();
        for &name in ColumnName::ALL {
            let empty = match name.dtype() {
                Dtype::U8 => ColumnData::U8(Vec::new()),
                Dtype::U32 => ColumnData::U32(Vec::new()),
                Dtype::F32 => ColumnData::F32(Vec::new()),
            };
            assert!(columns.set(name, empty).is_ok(), "{}", name.as_str());
            assert_eq!(columns.get(name).map(|s| s.dtype()), Some(name.dtype()));
        }
    }

    #[test]
    fn set_checks_the_type() {
        let mut columns = Columns::default();
        assert!(columns.set(ColumnName::Bler, ColumnData::F32(vec![0.5])).is_ok());
        assert_eq!(columns.bler, Some(vec![0.5]));
        assert!(columns.set(ColumnName::Mcs, ColumnData::U32(vec![1])).is_err());
        assert!(columns.set(ColumnName::Mcs, ColumnData::U8(vec![1])).is_ok());
        assert_eq!(columns.get(ColumnName::Mcs), Some(ColumnSlice::U8(&[1])));
        assert_eq!(columns.get(ColumnName::Layers), None);
    }

    #[test]
    fn le_bytes() {
        let data = ColumnData::U32(vec![0, 1, 0xdead_beef]);
        let bytes = data.as_slice().to_le_bytes();
        assert_eq!(bytes[8..], [0xef, 0xbe, 0xad, 0xde]);
        assert_eq!(ColumnSlice::F32(&[1.0]).to_le_bytes(), [0, 0, 0x80, 0x3f]);
    }
}
