//! The loss flags' map: the config map of `claw/bpf/ack_mark_egress.bpf.c`, opened from its
//! pin (the marker itself is loaded and attached by the Python launcher,
//! `claw/client/marking.py`, which owns and removes it). Value layout, native byte order:
//! `u64 wireless_event_ns, u64 overflow_event_ns, u64 window_ns, u32 l2_len, u32 reserved`.

use std::ffi::CString;
use std::io;
use std::os::fd::{FromRawFd, OwnedFd};
use std::os::unix::ffi::OsStrExt;
use std::path::Path;

use crate::feed::LossKind;

const BPF_MAP_LOOKUP_ELEM: libc::c_long = 1;
const BPF_MAP_UPDATE_ELEM: libc::c_long = 2;
const BPF_OBJ_GET: libc::c_long = 7;
const BPF_OBJ_GET_INFO_BY_FD: libc::c_long = 15;
/// The config value's size, bytes.
const VALUE_BYTES: usize = 32;
/// `union bpf_attr` is passed at this size (larger than every command's part used here).
const ATTR_BYTES: usize = 128;

fn bpf(cmd: libc::c_long, attr: &mut [u8; ATTR_BYTES]) -> io::Result<libc::c_long> {
    // SAFETY: the attribute buffer is valid for ATTR_BYTES and outlives the call; every
    // pointer written into it refers to memory the caller keeps alive across the call.
    let ret = unsafe { libc::syscall(libc::SYS_bpf, cmd, attr.as_mut_ptr(), ATTR_BYTES as libc::c_uint) };
    if ret < 0 {
        Err(io::Error::last_os_error())
    } else {
        Ok(ret)
    }
}

/// The marker's config map.
pub struct AckMarkMap {
    fd: OwnedFd,
    label: String,
}

impl AckMarkMap {
    /// Open the map pinned at `path`; refuses a map whose values are not the config's size.
    pub fn open(path: &Path) -> Result<Self, String> {
        let label = path.display().to_string();
        let c_path = CString::new(path.as_os_str().as_bytes()).map_err(|_| format!("{label}: NUL in the path"))?;
        let mut attr = [0u8; ATTR_BYTES];
        attr[..8].copy_from_slice(&(c_path.as_ptr() as u64).to_ne_bytes());
        let fd = bpf(BPF_OBJ_GET, &mut attr).map_err(|e| format!("opening the pinned BPF map {label}: {e}"))?;
        // SAFETY: the kernel returned a new file descriptor that nothing else owns.
        let fd = unsafe { OwnedFd::from_raw_fd(fd as i32) };
        let mut info = [0u8; 64];
        let mut attr = [0u8; ATTR_BYTES];
        use std::os::fd::AsRawFd;
        attr[..4].copy_from_slice(&(fd.as_raw_fd() as u32).to_ne_bytes());
        attr[4..8].copy_from_slice(&(info.len() as u32).to_ne_bytes());
        attr[8..16].copy_from_slice(&(info.as_mut_ptr() as u64).to_ne_bytes());
        bpf(BPF_OBJ_GET_INFO_BY_FD, &mut attr).map_err(|e| format!("reading BPF map {label}'s info: {e}"))?;
        let value_size = u32::from_ne_bytes([info[12], info[13], info[14], info[15]]) as usize;
        if value_size != VALUE_BYTES {
            return Err(format!(
                "{label}: value of {value_size} bytes, expected {VALUE_BYTES} (not an ack_mark_egress config map, or an older build)"
            ));
        }
        Ok(AckMarkMap { fd, label })
    }

    fn elem(&self, cmd: libc::c_long, value: &mut [u8; VALUE_BYTES]) -> io::Result<()> {
        use std::os::fd::AsRawFd;
        let key = 0u32.to_ne_bytes();
        let mut attr = [0u8; ATTR_BYTES];
        attr[..4].copy_from_slice(&(self.fd.as_raw_fd() as u32).to_ne_bytes());
        attr[8..16].copy_from_slice(&(key.as_ptr() as u64).to_ne_bytes());
        attr[16..24].copy_from_slice(&(value.as_mut_ptr() as u64).to_ne_bytes());
        bpf(cmd, &mut attr).map(|_| ())
    }

    /// Rewrite one u64 field (by index) keeping the others as the map holds them, so two
    /// writers (this client, a test injecting an event) do not undo each other; with
    /// `keep_larger`, a field already holding more than `v` is left as it is.
    fn set_u64(&self, index: usize, v: u64, keep_larger: bool) -> Result<(), String> {
        let mut value = [0u8; VALUE_BYTES];
        if let Err(e) = self.elem(BPF_MAP_LOOKUP_ELEM, &mut value) {
            if e.raw_os_error() != Some(libc::ENOENT) {
                return Err(format!("looking up BPF map {}: {e}", self.label));
            }
            value = [0; VALUE_BYTES];
        }
        let field = &mut value[index * 8..index * 8 + 8];
        let mut held = [0u8; 8];
        held.copy_from_slice(field);
        if keep_larger && u64::from_ne_bytes(held) >= v {
            return Ok(());
        }
        field.copy_from_slice(&v.to_ne_bytes());
        self.elem(BPF_MAP_UPDATE_ELEM, &mut value).map_err(|e| format!("updating BPF map {}: {e}", self.label))
    }

    /// A loss event of `kind` at `at_monotonic_ns` (CLOCK_MONOTONIC). The latest event wins: an earlier one written late (behind another writer's, e.g. a
    /// test's injected event set ahead of time) must not cut the later one's window.
    pub fn note_event(&self, kind: LossKind, at_monotonic_ns: u64) -> Result<(), String> {
        let index = if kind == LossKind::Wireless { 0 } else { 1 };
        self.set_u64(index, at_monotonic_ns.max(1), true)
    }

    /// How long after an event ACKs are flagged (one RTT), ms.
    pub fn set_window_ms(&self, window_ms: i64) -> Result<(), String> {
        self.set_u64(2, window_ms.max(1) as u64 * 1_000_000, false)
    }
}
