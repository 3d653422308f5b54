//! One client connection's protocol state: buffered input, a value being read, bytes being
//! swallowed after an error, or a multi-get being answered in bounded pieces.

use crate::store::Store;
use crate::text;

/// How much input and output one session may hold.
#[derive(Clone, Copy, Debug)]
pub struct Limits {
    /// Bytes buffered without a newline before the connection is closed (memcached: 2048),
    /// unless the line is a `get`/`gets`.
    pub line_without_newline: usize,
    /// The longest `get`/`gets` line accepted; memcached grows its buffer without bound here,
    /// this server closes the connection instead.
    pub get_line: usize,
    /// Output held before the session stops to let the caller write it.
    pub output_high_water: usize,
}

impl Default for Limits {
    fn default() -> Self {
        Limits {
            line_without_newline: 2048,
            get_line: 1 << 20,
            output_high_water: 256 << 10,
        }
    }
}

/// What the caller should do after [`Session::run`].
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Status {
    /// Everything buffered is answered: write the output, then read more.
    NeedInput,
    /// The output reached the high-water mark: write it, then call `run` again.
    OutputFull,
    /// Write the output, then close the connection.
    Close,
}

/// A storage command waiting for its data block.
pub(crate) struct PendingStore {
    pub kind: text::StoreKind,
    pub key: Vec<u8>,
    pub flags: u32,
    pub exptime: u32,
    pub cas: u64,
    /// Data length including the CRLF that must end it.
    pub total: usize,
    pub noreply: bool,
    /// The key was given base64-encoded (`ms ... b`).
    pub key_binary: bool,
    /// For `ms`: the reply flags to echo once stored.
    pub meta: Option<crate::meta::SetReply>,
}

/// A multi-get being answered key by key.
pub(crate) struct PendingGet {
    pub keys: Vec<u8>,
    pub next: usize,
    pub with_cas: bool,
    pub touch: Option<u32>,
}

pub(crate) enum State {
    Command,
    Data(PendingStore),
    Swallow(usize),
    Get(PendingGet),
}

pub struct Session {
    buf: Vec<u8>,
    pos: usize,
    pub(crate) state: State,
    pub(crate) limits: Limits,
    pub(crate) close: bool,
}

impl Session {
    pub fn new(limits: Limits) -> Self {
        Session {
            buf: Vec::new(),
            pos: 0,
            state: State::Command,
            limits,
            close: false,
        }
    }

    /// Bytes received and not yet consumed.
    pub fn buffered(&self) -> usize {
        self.buf.len() - self.pos
    }

    /// Appends received bytes.
    pub fn feed(&mut self, data: &[u8]) {
        if self.pos > 0 && self.pos * 2 >= self.buf.len() {
            self.buf.drain(..self.pos);
            self.pos = 0;
        }
        self.buf.extend_from_slice(data);
    }

    /// Answers as many buffered requests as it can; replies are appended to `out`.
    pub fn run(&mut self, store: &Store, now: u32, out: &mut Vec<u8>) -> Status {
        loop {
            if self.close {
                return Status::Close;
            }
            if out.len() >= self.limits.output_high_water {
                return Status::OutputFull;
            }
            match std::mem::replace(&mut self.state, State::Command) {
                State::Swallow(n) => {
                    let take = n.min(self.buffered());
                    self.pos += take;
                    if take < n {
                        self.state = State::Swallow(n - take);
                        return Status::NeedInput;
                    }
                }
                State::Data(p) => {
                    if self.buffered() < p.total {
                        self.state = State::Data(p);
                        return Status::NeedInput;
                    }
                    let data = &self.buf[self.pos..self.pos + p.total];
                    self.pos += p.total;
                    text::complete_store(store, now, p, data, out);
                }
                State::Get(g) => {
                    text::continue_get(self, store, now, g, out);
                }
                State::Command => {
                    let avail = &self.buf[self.pos..];
                    if avail.is_empty() {
                        return Status::NeedInput;
                    }
                    let Some(nl) = avail.iter().position(|&b| b == b'\n') else {
                        if avail.len() > self.limits.line_without_newline {
                            let spaces = avail.iter().take_while(|&&b| b == b' ').count();
                            let rest = &avail[spaces..];
                            let is_get = rest.starts_with(b"get ") || rest.starts_with(b"gets ");
                            if spaces > 100 || !is_get || avail.len() > self.limits.get_line {
                                return Status::Close;
                            }
                        }
                        return Status::NeedInput;
                    };
                    let mut end = nl;
                    if end > 1 && avail[end - 1] == b'\r' {
                        end -= 1;
                    }
                    let start = self.pos;
                    self.pos += nl + 1;
                    // memcached reads the line as a C string: a NUL ends it.
                    let line_buf = std::mem::take(&mut self.buf);
                    let mut line = &line_buf[start..start + end];
                    if let Some(z) = line.iter().position(|&b| b == 0) {
                        line = &line[..z];
                    }
                    text::process_line(self, store, now, line, out);
                    self.buf = line_buf;
                }
            }
        }
    }
}
