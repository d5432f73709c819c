//! TUN devices inside network namespaces, configured so the topology is ready to use.
//!
//! A [`Tun`] is created by a thread that has entered the target namespace (`TUNSETIFF`
//! creates the device in the namespace of the calling thread), which also sets its MTU,
//! IPv4 address, brings it up and adds routes through it. The device is not persistent: the
//! kernel removes it, with its addresses and routes, when the last descriptor closes, so
//! dropping the [`Tun`] removes everything it made.
//!
//! Configuration uses the classic `ioctl`s on an `AF_INET` socket of the namespace
//! (`SIOCSIFMTU`, `SIOCSIFADDR`, `SIOCADDRT`, ...), which need no external program and no
//! netlink message building for the handful of settings a point-to-point device needs.

use std::ffi::CString;
use std::io;
use std::net::Ipv4Addr;
use std::os::fd::{AsRawFd, FromRawFd, OwnedFd, RawFd};

use crate::error::{check_os, Context, Error, Result};
use crate::netns::Namespace;

/// Longest interface name the kernel accepts, bytes (IFNAMSIZ less the NUL).
pub const MAX_IFNAME_BYTES: usize = libc::IFNAMSIZ - 1;

/// Most parts one [`Tun::write_parts`] takes (the kernel's `UIO_MAXIOV`).
pub const MAX_WRITE_PARTS: usize = 1024;

/// An IPv4 prefix, e.g. `10.64.0.0/16` or `0.0.0.0/0`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Ipv4Prefix {
    /// Network address.
    pub addr: Ipv4Addr,
    /// Prefix length, bits, 0..=32.
    pub len_bits: u8,
}

impl Ipv4Prefix {
    /// The netmask of this prefix length.
    pub fn netmask(&self) -> Ipv4Addr {
        Ipv4Addr::from(if self.len_bits == 0 { 0 } else { u32::MAX << (32 - u32::from(self.len_bits)) })
    }
}

impl std::str::FromStr for Ipv4Prefix {
    type Err = String;

    /// Parses `A.B.C.D/N`, `A.B.C.D` (a host, /32) or `default` (0.0.0.0/0). The host bits
    /// must be zero, so a mistyped prefix is not silently widened.
    fn from_str(s: &str) -> std::result::Result<Ipv4Prefix, String> {
        if s == "default" {
            return Ok(Ipv4Prefix { addr: Ipv4Addr::UNSPECIFIED, len_bits: 0 });
        }
        let (addr, len) = s.split_once('/').unwrap_or((s, "32"));
        let addr: Ipv4Addr = addr.parse().map_err(|_| format!("`{s}` is not an IPv4 address or prefix"))?;
        let len_bits: u8 = match len.parse() {
            Ok(n) if n <= 32 => n,
            _ => return Err(format!("`{s}`: prefix length must be 0..32")),
        };
        let prefix = Ipv4Prefix { addr, len_bits };
        if u32::from(addr) & !u32::from(prefix.netmask()) != 0 {
            return Err(format!(
                "`{s}`: host bits are set (did you mean {}/{len_bits}?)",
                Ipv4Addr::from(u32::from(addr) & u32::from(prefix.netmask()))
            ));
        }
        Ok(prefix)
    }
}

impl std::fmt::Display for Ipv4Prefix {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "{}/{}", self.addr, self.len_bits)
    }
}

/// How a TUN device is configured once created.
/// Packets a TUN device holds for the emulator to read (the kernel's default is 500). The
/// queue fills only while the I/O thread is kept off the CPU (on a small machine, by the
/// very applications whose traffic it carries); 500 small packets are 2 ms of a 250 kpps
/// flood, so the kernel dropped packets the emulator would have had time to take.
pub const TXQUEUELEN_PACKETS: i32 = 4096;

#[derive(Debug, Clone, PartialEq)]
pub struct LinkSetup {
    /// The device's own IPv4 address (assigned as a /32: a point-to-point device needs no
    /// subnet, the routes say what is behind it).
    pub address: Ipv4Addr,
    /// MTU, bytes.
    pub mtu_bytes: u32,
    /// Destinations routed through the device.
    pub routes: Vec<Ipv4Prefix>,
    /// Segmentation offload: every packet goes behind a `virtio_net_hdr`, and the kernel may
    /// hand over TCP super-packets with partial checksums (`crate::offload`).
    pub offload: bool,
}

/// A TUN device (IFF_TUN | IFF_NO_PI: bare IP packets, with IFF_VNET_HDR each behind a
/// `virtio_net_hdr`) in a network namespace; the descriptor is non-blocking. Dropping it
/// closes the descriptor, which removes the device.
#[derive(Debug)]
pub struct Tun {
    fd: OwnedFd,
    name: String,
    namespace: String,
    offload: bool,
}

impl Tun {
    /// Creates TUN `name` in `ns` and applies `setup`. Fails if an interface of that name
    /// already exists there (attaching to someone else's device would leave it behind or
    /// steal its traffic).
    pub fn create(ns: &Namespace, name: &str, setup: &LinkSetup) -> Result<Tun> {
        let where_ = format!("{name} in namespace {ns}");
        let c_name =
            CString::new(name).map_err(|_| Error::config("tun name", format!("`{name}` contains a NUL byte")))?;
        if name.is_empty() || name.len() > MAX_IFNAME_BYTES {
            return Err(Error::config("tun name", format!("`{name}` must be 1..={MAX_IFNAME_BYTES} bytes")));
        }
        ns.run_in(|| {
            // SAFETY: `c_name` is a valid NUL-terminated string.
            if unsafe { libc::if_nametoindex(c_name.as_ptr()) } != 0 {
                return Err(Error::Os {
                    attempted: format!("creating TUN {where_}"),
                    source: io::Error::new(io::ErrorKind::AlreadyExists, "an interface of that name already exists"),
                });
            }
            let tun = Tun::open_device(name, setup.offload, &where_)?;
            configure(&tun, setup, &where_)?;
            Ok(Tun { namespace: ns.name().to_string(), ..tun })
        })
    }

    /// Opens `/dev/net/tun` and attaches a new device `name` (in the calling thread's
    /// namespace), with checksum and TCPv4 segmentation offload if `offload`.
    fn open_device(name: &str, offload: bool, where_: &str) -> Result<Tun> {
        // SAFETY: a constant NUL-terminated path; the returned descriptor is checked.
        let raw = check_os(unsafe {
            libc::open(c"/dev/net/tun".as_ptr(), libc::O_RDWR | libc::O_NONBLOCK | libc::O_CLOEXEC)
        })
        .context(|| format!("opening /dev/net/tun to create TUN {where_}"))?;
        // SAFETY: `raw` is a descriptor we own from here on.
        let fd = unsafe { OwnedFd::from_raw_fd(raw) };
        let mut req = ifreq_named(name);
        let vnet = if offload { libc::IFF_VNET_HDR } else { 0 };
        req.ifr_ifru.ifru_flags = (libc::IFF_TUN | libc::IFF_NO_PI | vnet) as libc::c_short;
        // SAFETY: TUNSETIFF reads and writes one `ifreq`, which lives for the call.
        check_os(unsafe { libc::ioctl(fd.as_raw_fd(), libc::TUNSETIFF, &mut req) })
            .context(|| format!("creating TUN {where_}"))?;
        if offload {
            // The header size is the default 10 bytes (`offload::VNET_HDR_BYTES`); only the
            // features are set. UDP segmentation and ECN super-packets stay off, so the
            // kernel segments those itself.
            let features = libc::TUN_F_CSUM | libc::TUN_F_TSO4;
            // SAFETY: TUNSETOFFLOAD takes its argument by value and touches no memory.
            check_os(unsafe { libc::ioctl(fd.as_raw_fd(), libc::TUNSETOFFLOAD, features as libc::c_ulong) })
                .context(|| format!("enabling segmentation offload on TUN {where_}"))?;
        }
        Ok(Tun { fd, name: name.to_string(), namespace: String::new(), offload })
    }

    /// Whether packets go behind a `virtio_net_hdr` (segmentation offload on).
    pub fn offload(&self) -> bool {
        self.offload
    }

    /// The interface name.
    pub fn name(&self) -> &str {
        &self.name
    }

    /// The namespace the device lives in, as configured.
    pub fn namespace(&self) -> &str {
        &self.namespace
    }

    /// Reads one packet into `buf`; `WouldBlock` when none is waiting.
    pub fn read(&self, buf: &mut [u8]) -> io::Result<usize> {
        // SAFETY: `buf` is valid for `buf.len()` bytes of writes.
        let n = unsafe { libc::read(self.fd.as_raw_fd(), buf.as_mut_ptr().cast(), buf.len()) };
        if n < 0 {
            Err(io::Error::last_os_error())
        } else {
            Ok(n as usize)
        }
    }

    /// Writes one packet made of `parts` (a `virtio_net_hdr` first when offloading), in one
    /// `writev`; the kernel takes it whole or fails. At most [`MAX_WRITE_PARTS`] parts.
    pub fn write_parts(&self, parts: &[io::IoSlice<'_>]) -> io::Result<usize> {
        let count = parts.len().min(MAX_WRITE_PARTS) as libc::c_int;
        // SAFETY: `IoSlice` is ABI-compatible with `iovec`; every slice is valid for reads
        // for the call.
        let n = unsafe { libc::writev(self.fd.as_raw_fd(), parts.as_ptr().cast(), count) };
        if n < 0 {
            Err(io::Error::last_os_error())
        } else {
            Ok(n as usize)
        }
    }
}

impl AsRawFd for Tun {
    fn as_raw_fd(&self) -> RawFd {
        self.fd.as_raw_fd()
    }
}

/// An `ifreq` with `ifr_name` set and everything else zero.
fn ifreq_named(name: &str) -> libc::ifreq {
    // SAFETY: `ifreq` is plain old data; all-zero is a valid value.
    let mut req: libc::ifreq = unsafe { std::mem::zeroed() };
    for (dst, &src) in req.ifr_name.iter_mut().zip(name.as_bytes().iter().take(MAX_IFNAME_BYTES)) {
        *dst = src as libc::c_char;
    }
    req
}

/// A `sockaddr` holding an IPv4 address (port 0).
fn sockaddr_v4(addr: Ipv4Addr) -> libc::sockaddr {
    let sin = libc::sockaddr_in {
        sin_family: libc::AF_INET as libc::sa_family_t,
        sin_port: 0,
        sin_addr: libc::in_addr { s_addr: u32::from(addr).to_be() },
        sin_zero: [0; 8],
    };
    // SAFETY: `sockaddr_in` and `sockaddr` have the same size (16 bytes) and the kernel reads
    // the family to interpret it.
    unsafe { std::mem::transmute::<libc::sockaddr_in, libc::sockaddr>(sin) }
}

/// The kernel's `struct rtentry` (include/uapi/linux/route.h), for `SIOCADDRT`; glibc's libc
/// bindings do not carry it.
#[repr(C)]
struct RtEntry {
    rt_pad1: libc::c_ulong,
    rt_dst: libc::sockaddr,
    rt_gateway: libc::sockaddr,
    rt_genmask: libc::sockaddr,
    rt_flags: libc::c_ushort,
    rt_pad2: libc::c_short,
    rt_pad3: libc::c_ulong,
    rt_pad4: *mut libc::c_void,
    rt_metric: libc::c_short,
    rt_dev: *mut libc::c_char,
    rt_mtu: libc::c_ulong,
    rt_window: libc::c_ulong,
    rt_irtt: libc::c_ushort,
}

/// Brings the loopback interface of `ns` up (a new namespace has it down, and nothing can
/// listen on 127.0.0.1 until it is up). Runs on the calling thread, which must be in `ns`.
pub fn bring_up_loopback(ns: &Namespace) -> Result<()> {
    let where_ = format!("lo in namespace {ns}");
    set_up(&config_socket(&where_)?, "lo", &where_)
}

/// An `AF_INET` datagram socket of the calling thread's namespace, for interface `ioctl`s.
fn config_socket(where_: &str) -> Result<OwnedFd> {
    // SAFETY: plain socket creation; the descriptor is checked and owned.
    let raw = check_os(unsafe { libc::socket(libc::AF_INET, libc::SOCK_DGRAM | libc::SOCK_CLOEXEC, 0) })
        .context(|| format!("opening a configuration socket for {where_}"))?;
    // SAFETY: `raw` is a descriptor we own from here on.
    Ok(unsafe { OwnedFd::from_raw_fd(raw) })
}

/// One interface `ioctl` (`SIOCSIFMTU`, `SIOCGIFFLAGS`, ...) on `req`; `attempted` names it
/// in the error.
fn if_ioctl(sock: &OwnedFd, request: libc::c_ulong, req: &mut libc::ifreq, attempted: &str) -> Result<()> {
    // SAFETY: each SIOC*IF* request used here reads or writes one `ifreq` living for the call.
    check_os(unsafe { libc::ioctl(sock.as_raw_fd(), request, req as *mut libc::ifreq) })
        .map(drop)
        .context(|| attempted.to_string())
}

/// Sets IFF_UP (and IFF_RUNNING) on interface `name`, keeping its other flags.
fn set_up(sock: &OwnedFd, name: &str, where_: &str) -> Result<()> {
    let mut req = ifreq_named(name);
    if_ioctl(sock, libc::SIOCGIFFLAGS, &mut req, &format!("reading the interface flags of {where_}"))?;
    // SAFETY: SIOCGIFFLAGS filled the `ifru_flags` member.
    let flags = unsafe { req.ifr_ifru.ifru_flags };
    req.ifr_ifru.ifru_flags = flags | (libc::IFF_UP | libc::IFF_RUNNING) as libc::c_short;
    if_ioctl(sock, libc::SIOCSIFFLAGS, &mut req, &format!("bringing up {where_}"))
}

/// Applies `setup` to `tun`; runs in the device's namespace.
fn configure(tun: &Tun, setup: &LinkSetup, where_: &str) -> Result<()> {
    // IPv6 would only bring router solicitations and MLD reports that the emulator drops
    // anyway (it forwards IPv4); failing to switch it off (IPv6 disabled in the kernel or
    // the namespace) is harmless, so the result is ignored on purpose.
    let _ = std::fs::write(format!("/proc/sys/net/ipv6/conf/{}/disable_ipv6", tun.name), "1");

    let sock = config_socket(where_)?;
    let ioctl = |request: libc::c_ulong, req: &mut libc::ifreq, what: &str| {
        if_ioctl(&sock, request, req, &format!("{what} on {where_}"))
    };

    let mtu = libc::c_int::try_from(setup.mtu_bytes)
        .map_err(|_| Error::config("mtu_bytes", format!("{} is too large", setup.mtu_bytes)))?;
    let mut req = ifreq_named(&tun.name);
    req.ifr_ifru.ifru_mtu = mtu;
    ioctl(libc::SIOCSIFMTU, &mut req, &format!("setting MTU {} bytes", setup.mtu_bytes))?;

    let mut req = ifreq_named(&tun.name);
    req.ifr_ifru.ifru_metric = TXQUEUELEN_PACKETS; // `ifr_qlen` shares the union's int slot
    ioctl(libc::SIOCSIFTXQLEN, &mut req, &format!("setting the queue length to {TXQUEUELEN_PACKETS} packets"))?;

    let mut req = ifreq_named(&tun.name);
    req.ifr_ifru.ifru_addr = sockaddr_v4(setup.address);
    ioctl(libc::SIOCSIFADDR, &mut req, &format!("setting address {}", setup.address))?;
    let mut req = ifreq_named(&tun.name);
    req.ifr_ifru.ifru_netmask = sockaddr_v4(Ipv4Addr::BROADCAST);
    ioctl(libc::SIOCSIFNETMASK, &mut req, "setting netmask 255.255.255.255")?;

    set_up(&sock, &tun.name, where_)?;

    let dev = CString::new(tun.name.as_str()).map_err(|_| Error::config("tun name", "contains a NUL byte"))?;
    for route in &setup.routes {
        let mut entry = RtEntry {
            rt_pad1: 0,
            rt_dst: sockaddr_v4(route.addr),
            rt_gateway: sockaddr_v4(Ipv4Addr::UNSPECIFIED),
            rt_genmask: sockaddr_v4(route.netmask()),
            rt_flags: libc::RTF_UP | if route.len_bits == 32 { libc::RTF_HOST } else { 0 },
            rt_pad2: 0,
            rt_pad3: 0,
            rt_pad4: std::ptr::null_mut(),
            rt_metric: 0,
            rt_dev: dev.as_ptr().cast_mut(),
            rt_mtu: 0,
            rt_window: 0,
            rt_irtt: 0,
        };
        // SAFETY: SIOCADDRT reads one `rtentry` and the NUL-terminated device name it points
        // to, both alive for the call.
        check_os(unsafe { libc::ioctl(sock.as_raw_fd(), libc::SIOCADDRT, &mut entry as *mut RtEntry) })
            .context(|| format!("adding route {route} via {where_}"))?;
    }
    Ok(())
}
