//! The CLAW feedback channel's wire format (version 1; the table is in `claw/feedback.py`):
//! a 76-byte report (44-byte body + HMAC-SHA256) to the server agent, a 56-byte echo
//! (24-byte body + HMAC-SHA256) back. SHA-256 (FIPS 180-4) and HMAC (RFC 2104) are here
//! so the client needs no crate beyond the workspace's.

const VERSION: u8 = 1;
const KIND_FEEDBACK: u8 = 1;
const KIND_ECHO: u8 = 2;
pub const MAC_BYTES: usize = 32;
pub const FEEDBACK_BYTES: usize = 44 + MAC_BYTES;
pub const ECHO_BYTES: usize = 24 + MAC_BYTES;
const LOAD_PPM_SCALE: f64 = 1_000_000.0;
const FLAG_SATURATED: u8 = 0x01;
const FLAG_WIRELINE: u8 = 0x02;
const ECHO_FLAG_CWND_LIMITED: u8 = 0x01;
/// Shortest key accepted, bytes.
pub const MIN_KEY_BYTES: usize = 16;

/// One client report (units as in `claw/feedback.py`).
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct Feedback {
    pub ue_id: u16,
    pub seq: u32,
    pub diag_time_ms: i64,
    pub w_claw_bytes: i64,
    pub load: f64,
    pub n_f_rbs: i64,
    pub n_t_rbs: i64,
    pub window_ms: i64,
    pub saturated: bool,
    pub wireline: bool,
}

impl Feedback {
    /// The datagram: body, then its HMAC with `key`.
    pub fn encode(&self, key: &Hmac) -> [u8; FEEDBACK_BYTES] {
        let mut out = [0u8; FEEDBACK_BYTES];
        out[0] = VERSION;
        out[1] = KIND_FEEDBACK;
        out[2..4].copy_from_slice(&self.ue_id.to_be_bytes());
        out[4..8].copy_from_slice(&self.seq.to_be_bytes());
        out[8..16].copy_from_slice(&(self.diag_time_ms as u64).to_be_bytes());
        out[16..20].copy_from_slice(&(self.w_claw_bytes as u32).to_be_bytes());
        // Python's round(): half to even.
        let load_ppm = (self.load.clamp(0.0, 1.0) * LOAD_PPM_SCALE).round_ties_even() as u32;
        out[20..24].copy_from_slice(&load_ppm.to_be_bytes());
        out[24..28].copy_from_slice(&(self.n_f_rbs as u32).to_be_bytes());
        out[28..32].copy_from_slice(&(self.n_t_rbs as u32).to_be_bytes());
        out[32..36].copy_from_slice(&(self.window_ms as u32).to_be_bytes());
        out[36] = if self.saturated { FLAG_SATURATED } else { 0 } | if self.wireline { FLAG_WIRELINE } else { 0 };
        let mac = key.mac(&out[..44]);
        out[44..].copy_from_slice(&mac);
        out
    }
}

/// The server's answer to an accepted report.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Echo {
    pub ue_id: u16,
    pub seq: u32,
    pub srtt_us: u32,
    pub cwnd_packets: u32,
    pub cwnd_limited: bool,
}

/// Why an echo was refused (the names the reference daemon counts under).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Rejection {
    Malformed,
    BadMac,
}

impl Rejection {
    pub fn name(self) -> &'static str {
        match self {
            Rejection::Malformed => "malformed",
            Rejection::BadMac => "bad-mac",
        }
    }
}

impl Echo {
    /// Parse and authenticate an echo datagram.
    pub fn decode(data: &[u8], key: &Hmac) -> Result<Echo, Rejection> {
        if data.len() != ECHO_BYTES || data[0] != VERSION || data[1] != KIND_ECHO {
            return Err(Rejection::Malformed);
        }
        let (body, mac) = data.split_at(ECHO_BYTES - MAC_BYTES);
        // Compared without an early exit, as hmac.compare_digest does.
        let want = key.mac(body);
        if want.iter().zip(mac).fold(0u8, |acc, (a, b)| acc | (a ^ b)) != 0 {
            return Err(Rejection::BadMac);
        }
        let u32_at = |i: usize| u32::from_be_bytes([body[i], body[i + 1], body[i + 2], body[i + 3]]);
        Ok(Echo {
            ue_id: u16::from_be_bytes([body[2], body[3]]),
            seq: u32_at(4),
            srtt_us: u32_at(8),
            cwnd_packets: u32_at(12),
            cwnd_limited: body[16] & ECHO_FLAG_CWND_LIMITED != 0,
        })
    }

    /// The datagram (the server agent's; here for the tests).
    #[cfg(test)]
    pub fn encode(&self, key: &Hmac) -> [u8; ECHO_BYTES] {
        let mut out = [0u8; ECHO_BYTES];
        out[0] = VERSION;
        out[1] = KIND_ECHO;
        out[2..4].copy_from_slice(&self.ue_id.to_be_bytes());
        out[4..8].copy_from_slice(&self.seq.to_be_bytes());
        out[8..12].copy_from_slice(&self.srtt_us.to_be_bytes());
        out[12..16].copy_from_slice(&self.cwnd_packets.to_be_bytes());
        out[16] = if self.cwnd_limited { ECHO_FLAG_CWND_LIMITED } else { 0 };
        let mac = key.mac(&out[..24]);
        out[24..].copy_from_slice(&mac);
        out
    }
}

// -- SHA-256 and HMAC ----------------------------------------------------------------------------

const K: [u32; 64] = [
    0x428a2f98, 0x71374491, 0xb5c0fbcf, 0xe9b5dba5, 0x3956c25b, 0x59f111f1, 0x923f82a4, 0xab1c5ed5, 0xd807aa98,
    0x12835b01, 0x243185be, 0x550c7dc3, 0x72be5d74, 0x80deb1fe, 0x9bdc06a7, 0xc19bf174, 0xe49b69c1, 0xefbe4786,
    0x0fc19dc6, 0x240ca1cc, 0x2de92c6f, 0x4a7484aa, 0x5cb0a9dc, 0x76f988da, 0x983e5152, 0xa831c66d, 0xb00327c8,
    0xbf597fc7, 0xc6e00bf3, 0xd5a79147, 0x06ca6351, 0x14292967, 0x27b70a85, 0x2e1b2138, 0x4d2c6dfc, 0x53380d13,
    0x650a7354, 0x766a0abb, 0x81c2c92e, 0x92722c85, 0xa2bfe8a1, 0xa81a664b, 0xc24b8b70, 0xc76c51a3, 0xd192e819,
    0xd6990624, 0xf40e3585, 0x106aa070, 0x19a4c116, 0x1e376c08, 0x2748774c, 0x34b0bcb5, 0x391c0cb3, 0x4ed8aa4a,
    0x5b9cca4f, 0x682e6ff3, 0x748f82ee, 0x78a5636f, 0x84c87814, 0x8cc70208, 0x90befffa, 0xa4506ceb, 0xbef9a3f7,
    0xc67178f2,
];
const H0: [u32; 8] = [0x6a09e667, 0xbb67ae85, 0x3c6ef372, 0xa54ff53a, 0x510e527f, 0x9b05688c, 0x1f83d9ab, 0x5be0cd19];

/// A SHA-256 computation.
#[derive(Clone)]
struct Sha256 {
    h: [u32; 8],
    block: [u8; 64],
    filled: usize,
    length_bytes: u64,
}

impl Sha256 {
    fn new() -> Self {
        Sha256 { h: H0, block: [0; 64], filled: 0, length_bytes: 0 }
    }

    fn compress(h: &mut [u32; 8], block: &[u8; 64]) {
        let mut w = [0u32; 64];
        for (i, word) in block.chunks_exact(4).enumerate() {
            w[i] = u32::from_be_bytes([word[0], word[1], word[2], word[3]]);
        }
        for i in 16..64 {
            let s0 = w[i - 15].rotate_right(7) ^ w[i - 15].rotate_right(18) ^ (w[i - 15] >> 3);
            let s1 = w[i - 2].rotate_right(17) ^ w[i - 2].rotate_right(19) ^ (w[i - 2] >> 10);
            w[i] = w[i - 16].wrapping_add(s0).wrapping_add(w[i - 7]).wrapping_add(s1);
        }
        let [mut a, mut b, mut c, mut d, mut e, mut f, mut g, mut hh] = *h;
        for i in 0..64 {
            let s1 = e.rotate_right(6) ^ e.rotate_right(11) ^ e.rotate_right(25);
            let ch = (e & f) ^ (!e & g);
            let t1 = hh.wrapping_add(s1).wrapping_add(ch).wrapping_add(K[i]).wrapping_add(w[i]);
            let s0 = a.rotate_right(2) ^ a.rotate_right(13) ^ a.rotate_right(22);
            let maj = (a & b) ^ (a & c) ^ (b & c);
            let t2 = s0.wrapping_add(maj);
            hh = g;
            g = f;
            f = e;
            e = d.wrapping_add(t1);
            d = c;
            c = b;
            b = a;
            a = t1.wrapping_add(t2);
        }
        for (x, y) in h.iter_mut().zip([a, b, c, d, e, f, g, hh]) {
            *x = x.wrapping_add(y);
        }
    }

    fn update(&mut self, mut data: &[u8]) {
        self.length_bytes += data.len() as u64;
        while !data.is_empty() {
            let take = (64 - self.filled).min(data.len());
            self.block[self.filled..self.filled + take].copy_from_slice(&data[..take]);
            self.filled += take;
            data = &data[take..];
            if self.filled == 64 {
                Self::compress(&mut self.h, &self.block);
                self.filled = 0;
            }
        }
    }

    fn finish(mut self) -> [u8; 32] {
        let bits = self.length_bytes.wrapping_mul(8);
        self.update(&[0x80]);
        while self.filled != 56 {
            self.update(&[0]);
        }
        self.update(&bits.to_be_bytes());
        let mut out = [0u8; 32];
        for (chunk, word) in out.chunks_exact_mut(4).zip(self.h) {
            chunk.copy_from_slice(&word.to_be_bytes());
        }
        out
    }
}

/// HMAC-SHA256 with one key: the inner and outer pads' states are hashed once.
#[derive(Clone)]
pub struct Hmac {
    inner: Sha256,
    outer: Sha256,
}

impl Hmac {
    pub fn new(key: &[u8]) -> Self {
        let mut block = [0u8; 64];
        if key.len() > 64 {
            let mut h = Sha256::new();
            h.update(key);
            block[..32].copy_from_slice(&h.finish());
        } else {
            block[..key.len()].copy_from_slice(key);
        }
        let mut inner = Sha256::new();
        inner.update(&block.map(|b| b ^ 0x36));
        let mut outer = Sha256::new();
        outer.update(&block.map(|b| b ^ 0x5c));
        Hmac { inner, outer }
    }

    pub fn mac(&self, data: &[u8]) -> [u8; 32] {
        let mut inner = self.inner.clone();
        inner.update(data);
        let mut outer = self.outer.clone();
        outer.update(&inner.finish());
        outer.finish()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn hex(bytes: &[u8]) -> String {
        bytes.iter().map(|b| format!("{b:02x}")).collect()
    }

    #[test]
    fn sha256_known_answers() {
        let digest = |data: &[u8]| {
            let mut h = Sha256::new();
            h.update(data);
            hex(&h.finish())
        };
        assert_eq!(digest(b""), "e3b0c44298fc1c149afbf4c8996fb92427ae41e4649b934ca495991b7852b855");
        assert_eq!(digest(b"abc"), "ba7816bf8f01cfea414140de5dae2223b00361a396177a9cb410ff61f20015ad");
        assert_eq!(
            digest(b"abcdbcdecdefdefgefghfghighijhijkijkljklmklmnlmnomnopnopq"),
            "248d6a61d20638b8e5c026930c3e6039a33ce45964ff2167f6ecedd419db06c1"
        );
    }

    #[test]
    fn hmac_rfc4231_cases() {
        // RFC 4231 test cases 2 and 6 (a short key, a key longer than a block).
        assert_eq!(
            hex(&Hmac::new(b"Jefe").mac(b"what do ya want for nothing?")),
            "5bdcc146bf60754e6a042426089575c75a003f089d2739839dec58b964ec3843"
        );
        assert_eq!(
            hex(&Hmac::new(&[0xaa; 131]).mac(b"Test Using Larger Than Block-Size Key - Hash Key First")),
            "60e431591ee0b67f0d8a26aacbf5b77f8e0bc6213728c5140546040f0ee37f54"
        );
    }

    #[test]
    fn echo_round_trip_and_rejections() {
        let key = Hmac::new(&[7u8; 32]);
        let echo = Echo { ue_id: 3, seq: 99, srtt_us: 48_000, cwnd_packets: 40, cwnd_limited: true };
        let bytes = echo.encode(&key);
        assert_eq!(Echo::decode(&bytes, &key), Ok(echo));
        assert_eq!(Echo::decode(&bytes, &Hmac::new(&[8u8; 32])), Err(Rejection::BadMac));
        assert_eq!(Echo::decode(&bytes[..55], &key), Err(Rejection::Malformed));
    }

    #[test]
    fn load_is_clamped_and_in_ppm() {
        let key = Hmac::new(&[7u8; 32]);
        let fb = Feedback {
            ue_id: 1,
            seq: 2,
            diag_time_ms: 3,
            w_claw_bytes: 4,
            load: 1.25,
            n_f_rbs: 5,
            n_t_rbs: 6,
            window_ms: 7,
            saturated: true,
            wireline: false,
        };
        let bytes = fb.encode(&key);
        assert_eq!(u32::from_be_bytes([bytes[20], bytes[21], bytes[22], bytes[23]]), 1_000_000);
        assert_eq!(bytes[36], 1);
    }
}
