//! Messages on iokerneld's control socket (a unix `SOCK_SEQPACKET` socket, so every message
//! arrives whole or not at all).
//!
//! A runtime sends one [`Request::Register`] with its shared-memory region (a sealed memfd)
//! attached as `SCM_RIGHTS`, the one descriptor a registration carries, and gets one
//! [`Reply`]. It then keeps the connection open for as long as it lives: iokerneld takes the
//! closing of the connection as the runtime's exit and reclaims its cores at once. Any client
//! may instead send [`Request::Stats`] and get the daemon's counters as JSON text, or
//! [`Request::Gen`] with a run spec (JSON text) for iokerneld's built-in traffic generator (the
//! `gen` NIC backend); the [`Reply::Gen`] with the results comes when the run has ended, and
//! closing the connection before then abandons the run.
//!
//! Every message starts with a 16-byte [`MessageHeader`]. All integers are little-endian.
//! [`Request::decode`] checks every field of what a runtime sent, and its errors name the field
//! and the value, because they travel back to the runtime as the reason for a refusal.

use core::fmt;

/// The bytes `CRLC`, little-endian: first word of every control message.
pub const CONTROL_MAGIC: u32 = u32::from_le_bytes(*b"CRLC");

/// Bumped whenever a control message changes in a way an older peer would misread; iokerneld
/// refuses any other version. A field that was reserved (required to be zero) may gain a
/// meaning without a bump, as long as zero keeps meaning what it meant: older runtimes still
/// register unchanged, and an older iokerneld refuses the new value by naming the field.
pub const CONTROL_VERSION: u16 = 3;

/// Bytes of a runtime's name on the wire (UTF-8, padded with NULs).
pub const NAME_LEN: usize = 32;

/// Most kthreads one registration may carry: as many as a region's layout has room for.
pub const MAX_REGISTER_KTHREADS: usize = crate::MAX_KTHREADS;

/// What a request other than a registration carries, for [`ControlError::Descriptors`].
const NO_DESCRIPTORS: &str = "none: only a registration carries one";

/// Bytes of the common message header.
pub const HEADER_LEN: usize = 16;

/// Bytes of a registration body before its table of thread ids.
pub const REGISTER_FIXED_LEN: usize = NAME_LEN + 28;

/// Longest run spec a [`Request::Gen`] may carry, in bytes of JSON.
pub const MAX_GEN_SPEC_LEN: usize = 64 << 10;

/// Largest request: a registration with [`MAX_REGISTER_KTHREADS`] thread ids, or a
/// [`Request::Gen`] with the longest spec, whichever is longer.
pub const MAX_REQUEST_LEN: usize = {
    let register = HEADER_LEN + REGISTER_FIXED_LEN + 4 * MAX_REGISTER_KTHREADS;
    let generate = HEADER_LEN + MAX_GEN_SPEC_LEN;
    if register > generate {
        register
    } else {
        generate
    }
};

/// Largest reply iokerneld sends (a statistics dump may be long).
pub const MAX_REPLY_LEN: usize = 1 << 20;

/// Message kinds.
pub mod kind {
    /// Request: register a runtime.
    pub const REGISTER: u16 = 1;
    /// Request: dump statistics.
    pub const STATS: u16 = 2;
    /// Request: play a traffic generator run (the body is its spec, JSON text).
    pub const GEN: u16 = 3;
    /// Reply: the registration was accepted.
    pub const REGISTERED: u16 = 0x81;
    /// Reply: the request was refused.
    pub const ERROR: u16 = 0x82;
    /// Reply: statistics, as JSON text.
    pub const STATS_REPLY: u16 = 0x83;
    /// Reply: a traffic generator run's results, as JSON text.
    pub const GEN_REPLY: u16 = 0x84;
}

/// The first 16 bytes of every message.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct MessageHeader {
    /// [`CONTROL_MAGIC`].
    pub magic: u32,
    /// [`CONTROL_VERSION`].
    pub version: u16,
    /// One of [`kind`].
    pub kind: u16,
    /// Bytes after the header.
    pub body_len: u32,
}

impl MessageHeader {
    fn encode(kind: u16, body_len: usize, out: &mut Vec<u8>) {
        out.extend_from_slice(&CONTROL_MAGIC.to_le_bytes());
        out.extend_from_slice(&CONTROL_VERSION.to_le_bytes());
        out.extend_from_slice(&kind.to_le_bytes());
        out.extend_from_slice(&(body_len as u32).to_le_bytes());
        out.extend_from_slice(&0u32.to_le_bytes());
    }

    /// Checks magic, version and length and returns the header and the body.
    pub fn decode(bytes: &[u8]) -> Result<(MessageHeader, &[u8]), ControlError> {
        let mut r = Reader::new(bytes);
        let header = MessageHeader {
            magic: r.u32("header.magic")?,
            version: r.u16("header.version")?,
            kind: r.u16("header.kind")?,
            body_len: r.u32("header.body_len")?,
        };
        let _reserved = r.u32("header.reserved")?;
        if header.magic != CONTROL_MAGIC {
            return Err(ControlError::BadMagic(header.magic));
        }
        if header.version != CONTROL_VERSION {
            return Err(ControlError::UnsupportedVersion(header.version));
        }
        let body = r.rest();
        if body.len() != header.body_len as usize {
            return Err(ControlError::LengthMismatch {
                declared: header.body_len,
                actual: body.len(),
            });
        }
        Ok((header, body))
    }
}

/// What a runtime asks for when it registers.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Registration {
    /// Shown in logs and statistics: 1 to [`NAME_LEN`] bytes of printable UTF-8.
    pub name: String,
    /// Cores it may hold without ever being preempted.
    pub guaranteed_cores: u16,
    /// Most cores it may hold at once (at most its kthread count).
    pub max_cores: u16,
    /// Kthreads that never park once granted a core; they hold guaranteed cores, so there are
    /// at most `guaranteed_cores` of them.
    pub spinning_kthreads: u16,
    /// Capacity of each kthread's run queue, a power of two; published positions further
    /// apart than this are refused as impossible.
    pub run_queue_capacity: u32,
    /// How iokerneld asks its kthreads for a core back.
    pub preemption: PreemptionMode,
    /// Linux thread id of each kthread, in kthread order. Each must be a thread of the
    /// registering process.
    pub tids: Vec<i32>,
    /// The runtime's network identity, if it has a network stack: iokerneld steers frames for
    /// this MAC (and ARP requests for this address) to it, and drops frames it sends from any
    /// other MAC or address.
    pub net: Option<NetIdentity>,
}

/// How iokerneld asks a runtime's kthread to give back a core.
///
/// iokerneld first rings the kthread's cede word and, for a cooperative runtime, waits up to
/// its grace period (`cede_grace_us`) for the kthread to park by itself before it sends the
/// preemption signal. A runtime that cannot notice the cede word in time (an unmodified
/// program that never reaches a preemption point) would wait out the whole grace period on
/// every hand-over and then take the signal anyway, so it registers as [`SignalAtOnce`] and is
/// signalled at once. A runtime can only choose the sooner of the two: neither mode gives it
/// more time than iokerneld's grace period.
///
/// On the wire it is the 32-bit word after `run_queue_capacity`, reserved (zero) before the
/// modes existed: zero is [`Cooperative`], so older runtimes keep the grace period.
///
/// [`SignalAtOnce`]: PreemptionMode::SignalAtOnce
/// [`Cooperative`]: PreemptionMode::Cooperative
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Hash)]
pub enum PreemptionMode {
    /// Ring the cede word and signal only if the kthread has not parked when iokerneld's grace
    /// period ends.
    #[default]
    Cooperative,
    /// Ring the cede word and send the preemption signal at once, with no grace period.
    SignalAtOnce,
    /// Never asked: the runtime's kthreads run in Linux's idle scheduling class
    /// (`SCHED_IDLE`) on the cores they are granted, and iokerneld takes such a core by waking
    /// the taker's kthread on it, which Linux runs at once in the idle-class kthread's place.
    /// The taken kthread stays on its CPU, runnable, and runs again whenever the core has
    /// nothing else to run; iokerneld counts it as parked with work until it grants it a core
    /// again. For batch runtimes: a hand-over costs one wake-up and no signal, and the
    /// runtime's uthreads keep the idle moments of the core they were taken from.
    IdleClass,
}

impl PreemptionMode {
    /// The value on the wire.
    pub const fn wire(self) -> u32 {
        match self {
            PreemptionMode::Cooperative => 0,
            PreemptionMode::SignalAtOnce => 1,
            PreemptionMode::IdleClass => 2,
        }
    }

    /// The mode a wire value stands for, `None` for any other value.
    pub const fn from_wire(value: u32) -> Option<Self> {
        match value {
            0 => Some(PreemptionMode::Cooperative),
            1 => Some(PreemptionMode::SignalAtOnce),
            2 => Some(PreemptionMode::IdleClass),
            _ => None,
        }
    }

    /// The name shown in logs and statistics.
    pub const fn name(self) -> &'static str {
        match self {
            PreemptionMode::Cooperative => "cooperative",
            PreemptionMode::SignalAtOnce => "signal_at_once",
            PreemptionMode::IdleClass => "idle_class",
        }
    }

    /// How long a kthread of this mode may take to park by itself before it is signalled,
    /// given iokerneld's grace period: never longer than that.
    pub const fn cede_grace_ns(self, daemon_grace_ns: u64) -> u64 {
        match self {
            PreemptionMode::Cooperative => daemon_grace_ns,
            PreemptionMode::SignalAtOnce | PreemptionMode::IdleClass => 0,
        }
    }
}

/// A runtime's Ethernet and IPv4 addresses.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub struct NetIdentity {
    /// A unicast MAC address.
    pub mac: [u8; 6],
    /// A unicast IPv4 address, network byte order.
    pub ipv4: [u8; 4],
}

impl Registration {
    /// Kthreads registered.
    pub fn kthreads(&self) -> usize {
        self.tids.len()
    }

    /// Descriptors that must accompany the message: the region alone, whatever the number of
    /// kthreads (each sleeps on its wake word in the region).
    pub fn descriptor_count(&self) -> usize {
        1
    }

    /// Checks everything that does not need the descriptors or the daemon's state.
    pub fn validate(&self) -> Result<(), ControlError> {
        let bad = |field: &'static str, value: String, expected: &'static str| {
            Err(ControlError::BadField {
                field,
                value,
                expected,
            })
        };
        if self.name.is_empty() || self.name.len() > NAME_LEN {
            return bad(
                "name",
                format!("{:?}", self.name),
                "1 to 32 bytes of printable UTF-8",
            );
        }
        if self.name.chars().any(|c| c.is_control()) {
            return bad("name", format!("{:?}", self.name), "no control characters");
        }
        let kthreads = self.tids.len();
        if kthreads == 0 || kthreads > MAX_REGISTER_KTHREADS {
            return bad("kthreads", kthreads.to_string(), "1 to 256");
        }
        if self.max_cores == 0 || usize::from(self.max_cores) > kthreads {
            return bad(
                "max_cores",
                self.max_cores.to_string(),
                "at least 1 and at most the number of kthreads",
            );
        }
        if self.guaranteed_cores > self.max_cores {
            return bad(
                "guaranteed_cores",
                self.guaranteed_cores.to_string(),
                "at most max_cores",
            );
        }
        if self.spinning_kthreads > self.guaranteed_cores {
            return bad(
                "spinning_kthreads",
                self.spinning_kthreads.to_string(),
                "at most guaranteed_cores",
            );
        }
        if !self.run_queue_capacity.is_power_of_two() || self.run_queue_capacity > 1 << 31 {
            return bad(
                "run_queue_capacity",
                self.run_queue_capacity.to_string(),
                "a power of two up to 2^31",
            );
        }
        if let Some(net) = &self.net {
            if net.mac[0] & 1 != 0 || net.mac == [0; 6] {
                return bad(
                    "mac",
                    format!("{:02x?}", net.mac),
                    "a unicast, nonzero MAC address",
                );
            }
            let [a, ..] = net.ipv4;
            if net.ipv4 == [0; 4] || net.ipv4 == [255; 4] || (224..=239).contains(&a) {
                return bad("ipv4", format!("{:?}", net.ipv4), "a unicast IPv4 address");
            }
        }
        for (index, &tid) in self.tids.iter().enumerate() {
            if tid <= 0 {
                return bad("tids", format!("[{index}] = {tid}"), "positive thread ids");
            }
            if self.tids[..index].contains(&tid) {
                return bad(
                    "tids",
                    format!("[{index}] = {tid} (repeated)"),
                    "distinct thread ids",
                );
            }
        }
        Ok(())
    }
}

/// A message from a client to iokerneld.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Request {
    /// Register a runtime (descriptors attached, see the module documentation).
    Register(Registration),
    /// Dump statistics.
    Stats,
    /// Play a run of the built-in traffic generator. Answered with [`Reply::Gen`] when the run
    /// has ended, or at once with [`Reply::Error`].
    Gen {
        /// The run spec: 1 to [`MAX_GEN_SPEC_LEN`] bytes of UTF-8 (its contents are the
        /// daemon's business).
        json: String,
    },
}

impl Request {
    /// The wire form. Encodes whatever it is given: [`Registration::validate`] is the
    /// receiver's business (and tests send invalid requests on purpose).
    pub fn encode(&self) -> Vec<u8> {
        let mut out = Vec::new();
        match self {
            Request::Register(reg) => {
                let body_len = REGISTER_FIXED_LEN + 4 * reg.tids.len();
                MessageHeader::encode(kind::REGISTER, body_len, &mut out);
                let mut name = [0u8; NAME_LEN];
                let bytes = reg.name.as_bytes();
                let n = bytes.len().min(NAME_LEN);
                name[..n].copy_from_slice(&bytes[..n]);
                out.extend_from_slice(&name);
                out.extend_from_slice(&reg.guaranteed_cores.to_le_bytes());
                out.extend_from_slice(&reg.max_cores.to_le_bytes());
                out.extend_from_slice(&reg.spinning_kthreads.to_le_bytes());
                out.extend_from_slice(&(reg.tids.len() as u16).to_le_bytes());
                out.extend_from_slice(&reg.run_queue_capacity.to_le_bytes());
                out.extend_from_slice(&reg.preemption.wire().to_le_bytes());
                let net = reg.net.unwrap_or(NetIdentity {
                    mac: [0; 6],
                    ipv4: [0; 4],
                });
                out.extend_from_slice(&net.mac);
                out.extend_from_slice(&u16::from(reg.net.is_some()).to_le_bytes());
                out.extend_from_slice(&net.ipv4);
                for tid in &reg.tids {
                    out.extend_from_slice(&tid.to_le_bytes());
                }
            }
            Request::Stats => MessageHeader::encode(kind::STATS, 0, &mut out),
            Request::Gen { json } => {
                MessageHeader::encode(kind::GEN, json.len(), &mut out);
                out.extend_from_slice(json.as_bytes());
            }
        }
        out
    }

    /// Parses and validates a request that arrived with `descriptors` file descriptors.
    pub fn decode(bytes: &[u8], descriptors: usize) -> Result<Request, ControlError> {
        let (header, body) = MessageHeader::decode(bytes)?;
        match header.kind {
            kind::REGISTER => {
                let mut r = Reader::new(body);
                let name_bytes = r.take(NAME_LEN, "name")?;
                let end = name_bytes.iter().position(|&b| b == 0).unwrap_or(NAME_LEN);
                if name_bytes[end..].iter().any(|&b| b != 0) {
                    return Err(ControlError::BadField {
                        field: "name",
                        value: "bytes after the terminating NUL".into(),
                        expected: "NUL padding only",
                    });
                }
                let name = core::str::from_utf8(&name_bytes[..end])
                    .map_err(|_| ControlError::BadField {
                        field: "name",
                        value: format!("{:02x?}", &name_bytes[..end]),
                        expected: "UTF-8",
                    })?
                    .to_owned();
                let guaranteed_cores = r.u16("guaranteed_cores")?;
                let max_cores = r.u16("max_cores")?;
                let spinning_kthreads = r.u16("spinning_kthreads")?;
                let kthreads = usize::from(r.u16("kthreads")?);
                let run_queue_capacity = r.u32("run_queue_capacity")?;
                let preemption_word = r.u32("preemption")?;
                let preemption = PreemptionMode::from_wire(preemption_word).ok_or_else(|| {
                    ControlError::BadField {
                        field: "preemption",
                        value: preemption_word.to_string(),
                        expected: "0 (cede within iokerneld's grace period), 1 (signal at once) or 2 \
                                   (idle scheduling class, never asked)",
                    }
                })?;
                let mut mac = [0u8; 6];
                mac.copy_from_slice(r.take(6, "mac")?);
                let has_net = r.u16("net_flags")?;
                let mut ipv4 = [0u8; 4];
                ipv4.copy_from_slice(r.take(4, "ipv4")?);
                let net = match has_net {
                    0 if mac == [0; 6] && ipv4 == [0; 4] => None,
                    1 => Some(NetIdentity { mac, ipv4 }),
                    _ => {
                        return Err(ControlError::BadField {
                            field: "net_flags",
                            value: has_net.to_string(),
                            expected: "0 (and zero addresses) or 1",
                        });
                    }
                };
                if kthreads == 0 || kthreads > MAX_REGISTER_KTHREADS {
                    return Err(ControlError::BadField {
                        field: "kthreads",
                        value: kthreads.to_string(),
                        expected: "1 to 256",
                    });
                }
                let expected_len = REGISTER_FIXED_LEN + 4 * kthreads;
                if body.len() != expected_len {
                    return Err(ControlError::BodyLength {
                        what: "registration",
                        expected: expected_len,
                        actual: body.len(),
                    });
                }
                let mut tids = Vec::with_capacity(kthreads);
                for _ in 0..kthreads {
                    tids.push(r.u32("tids")? as i32);
                }
                let reg = Registration {
                    name,
                    guaranteed_cores,
                    max_cores,
                    spinning_kthreads,
                    run_queue_capacity,
                    preemption,
                    tids,
                    net,
                };
                reg.validate()?;
                if descriptors != reg.descriptor_count() {
                    return Err(ControlError::Descriptors {
                        expected: reg.descriptor_count(),
                        actual: descriptors,
                        what: "the region",
                    });
                }
                Ok(Request::Register(reg))
            }
            kind::STATS => {
                if !body.is_empty() {
                    return Err(ControlError::BodyLength {
                        what: "statistics request",
                        expected: 0,
                        actual: body.len(),
                    });
                }
                if descriptors != 0 {
                    return Err(ControlError::Descriptors {
                        expected: 0,
                        actual: descriptors,
                        what: NO_DESCRIPTORS,
                    });
                }
                Ok(Request::Stats)
            }
            kind::GEN => {
                if body.is_empty() || body.len() > MAX_GEN_SPEC_LEN {
                    return Err(ControlError::BadField {
                        field: "spec",
                        value: format!("{} bytes", body.len()),
                        expected: "1 to 65536 bytes of JSON",
                    });
                }
                let json = core::str::from_utf8(body).map_err(|e| ControlError::BadField {
                    field: "spec",
                    value: format!("invalid UTF-8 at byte {}", e.valid_up_to()),
                    expected: "UTF-8 JSON text",
                })?;
                if descriptors != 0 {
                    return Err(ControlError::Descriptors {
                        expected: 0,
                        actual: descriptors,
                        what: NO_DESCRIPTORS,
                    });
                }
                Ok(Request::Gen {
                    json: json.to_owned(),
                })
            }
            other => Err(ControlError::UnknownKind(other)),
        }
    }
}

/// A message from iokerneld to a client.
#[allow(missing_docs)] // Each field is described by its variant.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Reply {
    /// Registration accepted. `runtime_id` names the runtime in logs and statistics.
    Registered { runtime_id: u64 },
    /// Request refused, with the reason.
    Error { message: String },
    /// Statistics as JSON text.
    Stats { json: String },
    /// A traffic generator run's results as JSON text.
    Gen { json: String },
}

impl Reply {
    /// The wire form.
    pub fn encode(&self) -> Vec<u8> {
        let mut out = Vec::new();
        match self {
            Reply::Registered { runtime_id } => {
                MessageHeader::encode(kind::REGISTERED, 8, &mut out);
                out.extend_from_slice(&runtime_id.to_le_bytes());
            }
            Reply::Error { message }
            | Reply::Stats { json: message }
            | Reply::Gen { json: message } => {
                let kind = match self {
                    Reply::Error { .. } => kind::ERROR,
                    Reply::Gen { .. } => kind::GEN_REPLY,
                    _ => kind::STATS_REPLY,
                };
                let text = &message.as_bytes()[..message.len().min(MAX_REPLY_LEN - HEADER_LEN)];
                MessageHeader::encode(kind, text.len(), &mut out);
                out.extend_from_slice(text);
            }
        }
        out
    }

    /// Parses a reply.
    pub fn decode(bytes: &[u8]) -> Result<Reply, ControlError> {
        let (header, body) = MessageHeader::decode(bytes)?;
        let text = |body: &[u8]| {
            String::from_utf8(body.to_vec()).map_err(|_| ControlError::BadField {
                field: "text",
                value: "invalid UTF-8".into(),
                expected: "UTF-8",
            })
        };
        match header.kind {
            kind::REGISTERED => {
                let mut r = Reader::new(body);
                let runtime_id = r.u64("runtime_id")?;
                if !r.rest().is_empty() {
                    return Err(ControlError::BodyLength {
                        what: "registration reply",
                        expected: 8,
                        actual: body.len(),
                    });
                }
                Ok(Reply::Registered { runtime_id })
            }
            kind::ERROR => Ok(Reply::Error {
                message: text(body)?,
            }),
            kind::STATS_REPLY => Ok(Reply::Stats { json: text(body)? }),
            kind::GEN_REPLY => Ok(Reply::Gen { json: text(body)? }),
            other => Err(ControlError::UnknownKind(other)),
        }
    }
}

/// Why a control message was refused.
#[allow(missing_docs)] // Each field is described by its variant.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum ControlError {
    /// The message ended inside `field`.
    Truncated { field: &'static str },
    /// The first word is not [`CONTROL_MAGIC`].
    BadMagic(u32),
    /// A protocol version this build does not speak.
    UnsupportedVersion(u16),
    /// The header's length does not match the bytes received.
    LengthMismatch { declared: u32, actual: usize },
    /// The body is the wrong size for its kind.
    BodyLength {
        what: &'static str,
        expected: usize,
        actual: usize,
    },
    /// A kind this build does not know.
    UnknownKind(u16),
    /// A field holds a value that cannot be right.
    BadField {
        field: &'static str,
        value: String,
        expected: &'static str,
    },
    /// The wrong number of descriptors came with the message.
    Descriptors {
        expected: usize,
        actual: usize,
        /// What the expected descriptors are, for the error text.
        what: &'static str,
    },
}

impl fmt::Display for ControlError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            ControlError::Truncated { field } => {
                write!(f, "message truncated: it ends inside {field}")
            }
            ControlError::BadMagic(magic) => write!(
                f,
                "bad magic 0x{magic:08x}: expected 0x{CONTROL_MAGIC:08x} (\"CRLC\")"
            ),
            ControlError::UnsupportedVersion(version) => write!(
                f,
                "unsupported control protocol version {version}: this iokerneld speaks version \
                 {CONTROL_VERSION}"
            ),
            ControlError::LengthMismatch { declared, actual } => write!(
                f,
                "header says the body is {declared} bytes but {actual} arrived"
            ),
            ControlError::BodyLength {
                what,
                expected,
                actual,
            } => write!(f, "{what} body is {actual} bytes: expected {expected}"),
            ControlError::UnknownKind(kind) => write!(f, "unknown message kind 0x{kind:04x}"),
            ControlError::BadField {
                field,
                value,
                expected,
            } => write!(f, "invalid {field} = {value}: expected {expected}"),
            ControlError::Descriptors {
                expected,
                actual,
                what,
            } => write!(
                f,
                "{actual} file descriptors came with the message: expected {expected} ({what})"
            ),
        }
    }
}

impl std::error::Error for ControlError {}

/// Little-endian field reader that names the field it ran out in.
struct Reader<'a> {
    bytes: &'a [u8],
}

impl<'a> Reader<'a> {
    fn new(bytes: &'a [u8]) -> Self {
        Reader { bytes }
    }

    fn take(&mut self, n: usize, field: &'static str) -> Result<&'a [u8], ControlError> {
        if self.bytes.len() < n {
            return Err(ControlError::Truncated { field });
        }
        let (head, tail) = self.bytes.split_at(n);
        self.bytes = tail;
        Ok(head)
    }

    fn u16(&mut self, field: &'static str) -> Result<u16, ControlError> {
        let b = self.take(2, field)?;
        Ok(u16::from_le_bytes([b[0], b[1]]))
    }

    fn u32(&mut self, field: &'static str) -> Result<u32, ControlError> {
        let b = self.take(4, field)?;
        Ok(u32::from_le_bytes([b[0], b[1], b[2], b[3]]))
    }

    fn u64(&mut self, field: &'static str) -> Result<u64, ControlError> {
        let b = self.take(8, field)?;
        let mut w = [0u8; 8];
        w.copy_from_slice(b);
        Ok(u64::from_le_bytes(w))
    }

    fn rest(&mut self) -> &'a [u8] {
        core::mem::take(&mut self.bytes)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn registration() -> Registration {
        Registration {
            name: "memcached".into(),
            guaranteed_cores: 1,
            max_cores: 2,
            spinning_kthreads: 1,
            run_queue_capacity: 256,
            preemption: PreemptionMode::Cooperative,
            tids: vec![101, 102],
            net: Some(NetIdentity {
                mac: [0x02, 0, 0, 0, 0, 1],
                ipv4: [10, 99, 0, 2],
            }),
        }
    }

    #[test]
    fn registration_round_trips() {
        let request = Request::Register(registration());
        let bytes = request.encode();
        assert_eq!(bytes.len(), HEADER_LEN + REGISTER_FIXED_LEN + 8);
        assert_eq!(Request::decode(&bytes, 1), Ok(request));
        assert_eq!(
            Request::decode(&Request::Stats.encode(), 0),
            Ok(Request::Stats)
        );
    }

    /// Byte offset of the preemption word in an encoded registration.
    const PREEMPTION_AT: usize = HEADER_LEN + NAME_LEN + 12;

    #[test]
    fn the_preemption_mode_round_trips_in_the_word_that_was_reserved() {
        let signal = Registration {
            preemption: PreemptionMode::SignalAtOnce,
            ..registration()
        };
        let bytes = Request::Register(signal.clone()).encode();
        assert_eq!(
            &bytes[PREEMPTION_AT..PREEMPTION_AT + 4],
            &1u32.to_le_bytes()
        );
        assert_eq!(
            Request::decode(&bytes, 1),
            Ok(Request::Register(signal.clone()))
        );
        // A registration from before the modes existed has zero there: it keeps the grace.
        let mut older = bytes.clone();
        older[PREEMPTION_AT..PREEMPTION_AT + 4].copy_from_slice(&0u32.to_le_bytes());
        let Ok(Request::Register(decoded)) = Request::decode(&older, 1) else {
            panic!("a registration with a zero preemption word is refused");
        };
        assert_eq!(decoded.preemption, PreemptionMode::Cooperative);
        assert_eq!(decoded.tids, signal.tids);
    }

    #[test]
    fn an_unknown_preemption_mode_is_refused_naming_the_field() {
        for value in [3u32, 0x8000_0000, u32::MAX] {
            let mut bytes = Request::Register(registration()).encode();
            bytes[PREEMPTION_AT..PREEMPTION_AT + 4].copy_from_slice(&value.to_le_bytes());
            let err = Request::decode(&bytes, 1).unwrap_err();
            assert!(
                matches!(
                    err,
                    ControlError::BadField {
                        field: "preemption",
                        ..
                    }
                ),
                "{err:?}"
            );
            let text = err.to_string();
            assert!(text.contains(&value.to_string()), "{text}");
            assert!(text.contains("signal at once"), "{text}");
        }
    }

    #[test]
    fn no_mode_gives_more_grace_than_the_daemon() {
        for daemon_grace_ns in [0, 1, 20_000, u64::MAX] {
            assert_eq!(
                PreemptionMode::Cooperative.cede_grace_ns(daemon_grace_ns),
                daemon_grace_ns
            );
            assert_eq!(
                PreemptionMode::SignalAtOnce.cede_grace_ns(daemon_grace_ns),
                0
            );
        }
        for value in 0..=3 {
            if let Some(mode) = PreemptionMode::from_wire(value) {
                assert_eq!(mode.wire(), value);
                assert!(mode.cede_grace_ns(20_000) <= 20_000);
            }
        }
    }

    #[test]
    fn replies_round_trip() {
        for reply in [
            Reply::Registered { runtime_id: 7 },
            Reply::Error {
                message: "invalid kthreads = 0".into(),
            },
            Reply::Stats {
                json: "{\"cores\":[]}".into(),
            },
        ] {
            assert_eq!(Reply::decode(&reply.encode()), Ok(reply));
        }
    }

    #[test]
    fn every_truncation_is_refused_with_a_named_reason() {
        let bytes = Request::Register(registration()).encode();
        for len in 0..bytes.len() {
            let err = Request::decode(&bytes[..len], 3).unwrap_err();
            assert!(
                matches!(
                    err,
                    ControlError::Truncated { .. } | ControlError::LengthMismatch { .. }
                ),
                "length {len}: {err}"
            );
        }
    }

    #[test]
    fn wrong_version_and_magic_are_named() {
        let mut bytes = Request::Stats.encode();
        bytes[4] = 9;
        let err = Request::decode(&bytes, 0).unwrap_err();
        assert_eq!(err, ControlError::UnsupportedVersion(9));
        assert!(err.to_string().contains("version 9"), "{err}");
        let mut bytes = Request::Stats.encode();
        bytes[0] = b'X';
        assert!(matches!(
            Request::decode(&bytes, 0),
            Err(ControlError::BadMagic(_))
        ));
    }

    #[test]
    fn absurd_counts_are_refused_naming_the_field() {
        let cases: Vec<(Registration, &str)> = vec![
            (
                Registration {
                    tids: vec![],
                    ..registration()
                },
                "kthreads",
            ),
            (
                Registration {
                    max_cores: 3,
                    ..registration()
                },
                "max_cores",
            ),
            (
                Registration {
                    max_cores: 0,
                    ..registration()
                },
                "max_cores",
            ),
            (
                Registration {
                    guaranteed_cores: 3,
                    ..registration()
                },
                "guaranteed_cores",
            ),
            (
                Registration {
                    spinning_kthreads: 2,
                    ..registration()
                },
                "spinning_kthreads",
            ),
            (
                Registration {
                    run_queue_capacity: 300,
                    ..registration()
                },
                "run_queue_capacity",
            ),
            (
                Registration {
                    tids: vec![5, 5],
                    ..registration()
                },
                "tids",
            ),
            (
                Registration {
                    tids: vec![5, -1],
                    ..registration()
                },
                "tids",
            ),
            (
                Registration {
                    net: Some(NetIdentity {
                        mac: [0x01, 0, 0, 0, 0, 1],
                        ipv4: [10, 0, 0, 1],
                    }),
                    ..registration()
                },
                "mac",
            ),
            (
                Registration {
                    net: Some(NetIdentity {
                        mac: [0x02, 0, 0, 0, 0, 1],
                        ipv4: [224, 0, 0, 1],
                    }),
                    ..registration()
                },
                "ipv4",
            ),
            (
                Registration {
                    name: String::new(),
                    ..registration()
                },
                "name",
            ),
            (
                Registration {
                    name: "a\nb".into(),
                    ..registration()
                },
                "name",
            ),
        ];
        for (reg, field) in cases {
            let descriptors = reg.descriptor_count();
            let err = Request::decode(&Request::Register(reg).encode(), descriptors).unwrap_err();
            assert!(
                matches!(&err, ControlError::BadField { field: f, .. } if *f == field),
                "{field}: {err}"
            );
        }
        // A kthread count larger than the table that follows.
        let mut bytes = Request::Register(registration()).encode();
        let kthreads_at = HEADER_LEN + NAME_LEN + 6;
        assert_eq!(
            u16::from_le_bytes([bytes[kthreads_at], bytes[kthreads_at + 1]]),
            2
        );
        bytes[kthreads_at..kthreads_at + 2].copy_from_slice(&60000u16.to_le_bytes());
        let err = Request::decode(&bytes, 3).unwrap_err();
        assert!(err.to_string().contains("kthreads = 60000"), "{err}");
    }

    #[test]
    fn gen_requests_and_replies_round_trip() {
        let json = r#"{"target":"10.99.0.2:5000","phases":[{"rate_rps":1000.0,"duration_s":1.0}]}"#;
        let request = Request::Gen {
            json: json.to_owned(),
        };
        let bytes = request.encode();
        assert_eq!(bytes.len(), HEADER_LEN + json.len());
        assert_eq!(u16::from_le_bytes([bytes[6], bytes[7]]), kind::GEN);
        assert_eq!(Request::decode(&bytes, 0), Ok(request));
        let longest = Request::Gen {
            json: "x".repeat(MAX_GEN_SPEC_LEN),
        };
        let bytes = longest.encode();
        assert!(bytes.len() <= MAX_REQUEST_LEN);
        assert_eq!(Request::decode(&bytes, 0), Ok(longest));
        let reply = Reply::Gen {
            json: "{\"summary\":{}}".into(),
        };
        assert_eq!(Reply::decode(&reply.encode()), Ok(reply));
    }

    #[test]
    fn bad_gen_requests_are_refused_naming_the_spec() {
        let field = |e: ControlError| match e {
            ControlError::BadField { field, .. } => field,
            other => panic!("expected a bad field, got {other}"),
        };
        let empty = Request::Gen {
            json: String::new(),
        };
        let err = Request::decode(&empty.encode(), 0).unwrap_err();
        assert!(err.to_string().contains("invalid spec = 0 bytes"), "{err}");
        assert_eq!(field(err), "spec");
        let too_long = Request::Gen {
            json: "x".repeat(MAX_GEN_SPEC_LEN + 1),
        };
        let err = Request::decode(&too_long.encode(), 0).unwrap_err();
        assert!(
            err.to_string()
                .contains(&format!("{} bytes", MAX_GEN_SPEC_LEN + 1)),
            "{err}"
        );
        assert!(
            err.to_string().contains(&MAX_GEN_SPEC_LEN.to_string()),
            "{err}"
        );
        let mut bytes = Request::Gen {
            json: "{\"a\":1}".into(),
        }
        .encode();
        bytes[HEADER_LEN + 2] = 0xff;
        let err = Request::decode(&bytes, 0).unwrap_err();
        assert!(err.to_string().contains("invalid UTF-8 at byte 2"), "{err}");
        assert_eq!(field(err), "spec");
        let bytes = Request::Gen { json: "{}".into() }.encode();
        assert_eq!(
            Request::decode(&bytes, 1),
            Err(ControlError::Descriptors {
                expected: 0,
                actual: 1,
                what: NO_DESCRIPTORS,
            })
        );
        for len in 0..bytes.len() {
            assert!(Request::decode(&bytes[..len], 0).is_err(), "length {len}");
        }
        let mut bytes = Reply::Gen { json: "{}".into() }.encode();
        bytes[HEADER_LEN] = 0xff;
        assert!(matches!(
            Reply::decode(&bytes),
            Err(ControlError::BadField { field: "text", .. })
        ));
    }

    #[test]
    fn descriptor_count_must_match() {
        // However many kthreads it registers, a registration carries the region alone.
        let reg = registration();
        assert!(reg.kthreads() > 1);
        let bytes = Request::Register(reg).encode();
        assert!(Request::decode(&bytes, 1).is_ok());
        for actual in [0, 2, 1 + registration().kthreads()] {
            let err = Request::decode(&bytes, actual).unwrap_err();
            assert_eq!(
                err,
                ControlError::Descriptors {
                    expected: 1,
                    actual,
                    what: "the region",
                }
            );
            assert_eq!(
                err.to_string(),
                format!("{actual} file descriptors came with the message: expected 1 (the region)")
            );
        }
        assert!(Request::decode(&Request::Stats.encode(), 1).is_err());
    }
}
