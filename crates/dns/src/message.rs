//! Whole messages, parsed into owned sections: what a client or a test reads back. Names are
//! decompressed everywhere, inside record data too, so two servers' answers compare by value
//! whatever compression each chose. Allocates; the server's query path does not use it.

use crate::name::{self, MAX_NAME};
use crate::wire::{Header, NameError, read_name, rtype, u16_at, u32_at};

#[derive(Clone, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct Question {
    pub name: Vec<u8>,
    pub qtype: u16,
    pub qclass: u16,
}

#[derive(Clone, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct Record {
    pub owner: Vec<u8>,
    pub rtype: u16,
    pub class: u16,
    pub ttl: u32,
    /// Wire data with every name in it expanded.
    pub rdata: Vec<u8>,
}

impl Record {
    /// The record with owner and data names lowercased, for comparing without case.
    pub fn canonical(&self) -> Record {
        let mut r = self.clone();
        name::lowercase_in_place(&mut r.owner);
        match r.rtype {
            rtype::NS | rtype::CNAME | rtype::PTR | rtype::DNAME => {
                name::lowercase_in_place(&mut r.rdata)
            }
            rtype::MX => name::lowercase_in_place(&mut r.rdata[2..]),
            rtype::SRV => name::lowercase_in_place(&mut r.rdata[6..]),
            rtype::SOA => {
                let m = crate::name_len(&r.rdata);
                name::lowercase_in_place(&mut r.rdata[..m]);
                name::lowercase_in_place(&mut r.rdata[m..]);
            }
            _ => {}
        }
        r
    }
}

impl std::fmt::Display for Record {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        name::write_presentation(&self.owner, f)?;
        write!(
            f,
            " {} CLASS{} {} {}",
            self.ttl,
            self.class,
            crate::wire::type_name(self.rtype),
            crate::rdata::to_text(self.rtype, &self.rdata)
        )
    }
}

#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Message {
    pub header: Header,
    pub questions: Vec<Question>,
    pub answers: Vec<Record>,
    pub authority: Vec<Record>,
    /// The additional section, the OPT record included.
    pub additional: Vec<Record>,
}

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum ParseError {
    Short,
    Name(NameError),
    BadRdata,
}

impl From<NameError> for ParseError {
    fn from(e: NameError) -> Self {
        ParseError::Name(e)
    }
}

impl Message {
    pub fn parse(msg: &[u8]) -> Result<Message, ParseError> {
        let header = Header::parse(msg).ok_or(ParseError::Short)?;
        let mut at = crate::wire::HEADER_LEN;
        let mut buf = [0u8; MAX_NAME];
        let mut questions = Vec::new();
        for _ in 0..header.qdcount {
            let (len, end) = read_name(msg, at, &mut buf)?;
            questions.push(Question {
                name: buf[..len].to_vec(),
                qtype: u16_at(msg, end).ok_or(ParseError::Short)?,
                qclass: u16_at(msg, end + 2).ok_or(ParseError::Short)?,
            });
            at = end + 4;
        }
        let mut sections = [Vec::new(), Vec::new(), Vec::new()];
        for (i, n) in [header.ancount, header.nscount, header.arcount]
            .into_iter()
            .enumerate()
        {
            for _ in 0..n {
                let (r, end) = read_record(msg, at)?;
                sections[i].push(r);
                at = end;
            }
        }
        let [answers, authority, additional] = sections;
        Ok(Message {
            header,
            questions,
            answers,
            authority,
            additional,
        })
    }

    /// The OPT pseudo-record, if any.
    pub fn opt(&self) -> Option<&Record> {
        self.additional.iter().find(|r| r.rtype == rtype::OPT)
    }

    /// The full RCODE: the header's four bits and the OPT record's upper eight.
    pub fn rcode(&self) -> u16 {
        let hi = self.opt().map_or(0, |o| (o.ttl >> 24) as u16);
        (hi << 4) | u16::from(self.header.rcode())
    }
}

fn read_record(msg: &[u8], at: usize) -> Result<(Record, usize), ParseError> {
    let mut buf = [0u8; MAX_NAME];
    let (len, end) = read_name(msg, at, &mut buf)?;
    let owner = buf[..len].to_vec();
    let short = ParseError::Short;
    let t = u16_at(msg, end).ok_or(short)?;
    let class = u16_at(msg, end + 2).ok_or(short)?;
    let ttl = u32_at(msg, end + 4).ok_or(short)?;
    let rdlen = usize::from(u16_at(msg, end + 8).ok_or(short)?);
    let start = end + 10;
    let data_end = start + rdlen;
    let raw = msg.get(start..data_end).ok_or(short)?;
    let mut rdata = Vec::with_capacity(rdlen);
    // Names in data are read from the whole message, as pointers in them may reach back,
    // but must end inside the record's own data.
    let mut name = |rdata: &mut Vec<u8>, pos: usize| -> Result<usize, ParseError> {
        let (len, next) = read_name(msg, pos, &mut buf)?;
        if next > data_end {
            return Err(ParseError::BadRdata);
        }
        rdata.extend_from_slice(&buf[..len]);
        Ok(next)
    };
    let fixed = |rdata: &mut Vec<u8>, pos: usize, n: usize| -> Result<usize, ParseError> {
        rdata.extend_from_slice(msg.get(pos..pos + n).ok_or(short)?);
        Ok(pos + n)
    };
    let used = match t {
        rtype::NS | rtype::CNAME | rtype::PTR | rtype::DNAME => name(&mut rdata, start)?,
        rtype::MX => {
            let p = fixed(&mut rdata, start, 2)?;
            name(&mut rdata, p)?
        }
        rtype::SRV => {
            let p = fixed(&mut rdata, start, 6)?;
            name(&mut rdata, p)?
        }
        rtype::SOA => {
            let p = name(&mut rdata, start)?;
            let p = name(&mut rdata, p)?;
            fixed(&mut rdata, p, 20)?
        }
        _ => fixed(&mut rdata, start, raw.len())?,
    };
    if used != data_end {
        return Err(ParseError::BadRdata);
    }
    Ok((
        Record {
            owner,
            rtype: t,
            class,
            ttl,
            rdata,
        },
        data_end,
    ))
}

/// A query for `name` (wire form) as a stub resolver sends it: RD set, and an OPT record
/// offering `payload` bytes when given.
pub fn query(id: u16, name: &[u8], qtype: u16, payload: Option<u16>) -> Vec<u8> {
    let mut q = Vec::with_capacity(12 + name.len() + 4 + 11);
    let h = Header {
        id,
        flags: crate::wire::flag::RD,
        qdcount: 1,
        arcount: u16::from(payload.is_some()),
        ..Header::default()
    };
    let mut hb = [0u8; 12];
    h.write(&mut hb);
    q.extend_from_slice(&hb);
    q.extend_from_slice(name);
    q.extend_from_slice(&qtype.to_be_bytes());
    q.extend_from_slice(&crate::wire::class::IN.to_be_bytes());
    if let Some(p) = payload {
        q.push(0);
        q.extend_from_slice(&rtype::OPT.to_be_bytes());
        q.extend_from_slice(&p.to_be_bytes());
        q.extend_from_slice(&[0, 0, 0, 0, 0, 0]);
    }
    q
}
