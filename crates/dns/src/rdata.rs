//! Record data between presentation form (a zone file's fields) and wire form.

use std::fmt::Write as _;
use std::net::{Ipv4Addr, Ipv6Addr};

use crate::name::{self, Name};
use crate::wire::{rtype, u16_at, u32_at};
use crate::zone::parse_ttl;

/// Wire-form data for a record of type `t` from its fields (text, was it quoted).
pub fn from_text(
    t: u16,
    fields: &[(&str, bool)],
    origin: Option<&Name>,
) -> Result<Vec<u8>, String> {
    if fields.first().is_some_and(|(f, q)| *f == "\\#" && !q) {
        if matches!(
            t,
            rtype::NS | rtype::CNAME | rtype::PTR | rtype::MX | rtype::SOA
        ) {
            return Err("its data holds names: write it in its own syntax, not \\#".into());
        }
        return generic(&fields[1..]);
    }
    let mut out = Vec::new();
    let name = |out: &mut Vec<u8>, s: &str| -> Result<(), String> {
        out.extend_from_slice(Name::parse(s, origin)?.wire());
        Ok(())
    };
    let want = |n: usize| -> Result<(), String> {
        if fields.len() == n {
            Ok(())
        } else {
            Err(format!("{} fields where {n} belong", fields.len()))
        }
    };
    match t {
        rtype::A => {
            want(1)?;
            let a: Ipv4Addr = fields[0]
                .0
                .parse()
                .map_err(|_| format!("bad IPv4 address {:?}", fields[0].0))?;
            out.extend_from_slice(&a.octets());
        }
        rtype::AAAA => {
            want(1)?;
            let a: Ipv6Addr = fields[0]
                .0
                .parse()
                .map_err(|_| format!("bad IPv6 address {:?}", fields[0].0))?;
            out.extend_from_slice(&a.octets());
        }
        rtype::NS | rtype::CNAME | rtype::PTR | rtype::DNAME => {
            want(1)?;
            name(&mut out, fields[0].0)?;
        }
        rtype::MX => {
            want(2)?;
            out.extend_from_slice(&int::<u16>(fields[0].0, "preference")?.to_be_bytes());
            name(&mut out, fields[1].0)?;
        }
        rtype::SRV => {
            want(4)?;
            for (f, what) in fields[..3].iter().zip(["priority", "weight", "port"]) {
                out.extend_from_slice(&int::<u16>(f.0, what)?.to_be_bytes());
            }
            name(&mut out, fields[3].0)?;
        }
        rtype::SOA => {
            want(7)?;
            name(&mut out, fields[0].0)?;
            name(&mut out, fields[1].0)?;
            out.extend_from_slice(&int::<u32>(fields[2].0, "serial")?.to_be_bytes());
            for (f, what) in fields[3..]
                .iter()
                .zip(["refresh", "retry", "expire", "minimum"])
            {
                let v = parse_ttl(f.0).ok_or_else(|| format!("bad {what} {:?}", f.0))?;
                out.extend_from_slice(&v.to_be_bytes());
            }
        }
        rtype::TXT => {
            if fields.is_empty() {
                return Err("no character-strings".into());
            }
            for f in fields {
                char_string(&mut out, f.0)?;
            }
        }
        rtype::HINFO => {
            want(2)?;
            char_string(&mut out, fields[0].0)?;
            char_string(&mut out, fields[1].0)?;
        }
        rtype::CAA => {
            want(3)?;
            out.push(int::<u8>(fields[0].0, "flags")?);
            let tag = fields[1].0;
            if tag.is_empty() || tag.len() > 255 || !tag.bytes().all(|b| b.is_ascii_alphanumeric())
            {
                return Err(format!("bad tag {tag:?}"));
            }
            out.push(tag.len() as u8);
            out.extend_from_slice(tag.as_bytes());
            out.extend_from_slice(&unescape(fields[2].0)?);
        }
        _ => {
            return Err(format!(
                "{} has no presentation syntax here; write it as \\# length hex (RFC 3597)",
                crate::wire::type_name(t)
            ));
        }
    }
    Ok(out)
}

fn int<T: std::str::FromStr>(s: &str, what: &str) -> Result<T, String> {
    s.parse().map_err(|_| format!("bad {what} {s:?}"))
}

/// `\#` data: its length, then hex in as many words as the writer liked.
fn generic(fields: &[(&str, bool)]) -> Result<Vec<u8>, String> {
    let (len, hex) = fields.split_first().ok_or("\\# without a length")?;
    let len: usize = int(len.0, "length")?;
    let hex: String = hex.iter().map(|f| f.0).collect();
    if !hex.len().is_multiple_of(2) || !hex.bytes().all(|b| b.is_ascii_hexdigit()) {
        return Err(format!("bad hex {hex:?}"));
    }
    let data: Vec<u8> = (0..hex.len())
        .step_by(2)
        .map(|i| u8::from_str_radix(&hex[i..i + 2], 16).expect("checked hex"))
        .collect();
    if data.len() != len || len > u16::MAX as usize {
        return Err(format!("\\# says {len} bytes, hex holds {}", data.len()));
    }
    Ok(data)
}

/// Resolves `\X` and `\DDD` escapes.
fn unescape(s: &str) -> Result<Vec<u8>, String> {
    let b = s.as_bytes();
    let mut out = Vec::with_capacity(b.len());
    let mut i = 0;
    while i < b.len() {
        if b[i] != b'\\' {
            out.push(b[i]);
            i += 1;
            continue;
        }
        let rest = &b[i + 1..];
        if rest.len() >= 3 && rest[..3].iter().all(u8::is_ascii_digit) {
            let v = u32::from(rest[0] - b'0') * 100
                + u32::from(rest[1] - b'0') * 10
                + u32::from(rest[2] - b'0');
            out.push(u8::try_from(v).map_err(|_| format!("escape \\{v} above 255"))?);
            i += 4;
        } else if let Some(&c) = rest.first() {
            out.push(c);
            i += 2;
        } else {
            return Err("lone backslash at the end".into());
        }
    }
    Ok(out)
}

fn char_string(out: &mut Vec<u8>, s: &str) -> Result<(), String> {
    let bytes = unescape(s)?;
    if bytes.len() > 255 {
        return Err(format!(
            "character-string of {} bytes, over 255",
            bytes.len()
        ));
    }
    out.push(bytes.len() as u8);
    out.extend_from_slice(&bytes);
    Ok(())
}

fn quoted(out: &mut String, bytes: &[u8]) {
    out.push('"');
    for &b in bytes {
        match b {
            b'"' | b'\\' => {
                out.push('\\');
                out.push(b as char);
            }
            0x20..=0x7e => out.push(b as char),
            _ => {
                let _ = write!(out, "\\{b:03}");
            }
        }
    }
    out.push('"');
}

/// Presentation form of uncompressed wire data, for messages and test diffs; data that does
/// not parse as its type comes out in RFC 3597's `\#` form.
pub fn to_text(t: u16, d: &[u8]) -> String {
    typed_text(t, d).unwrap_or_else(|| {
        let mut s = format!("\\# {}", d.len());
        if !d.is_empty() {
            s.push(' ');
        }
        for b in d {
            let _ = write!(s, "{b:02x}");
        }
        s
    })
}

fn name_at(d: &[u8], pos: usize) -> Option<(String, usize)> {
    let rest = d.get(pos..)?;
    let len = crate::name_len_checked(rest)?;
    Some((name::to_text(&rest[..len]), pos + len))
}

fn typed_text(t: u16, d: &[u8]) -> Option<String> {
    let whole = |(s, end): (String, usize)| (end == d.len()).then_some(s);
    match t {
        rtype::A => Some(Ipv4Addr::from(<[u8; 4]>::try_from(d).ok()?).to_string()),
        rtype::AAAA => Some(Ipv6Addr::from(<[u8; 16]>::try_from(d).ok()?).to_string()),
        rtype::NS | rtype::CNAME | rtype::PTR | rtype::DNAME => whole(name_at(d, 0)?),
        rtype::MX => Some(format!("{} {}", u16_at(d, 0)?, whole(name_at(d, 2)?)?)),
        rtype::SRV => Some(format!(
            "{} {} {} {}",
            u16_at(d, 0)?,
            u16_at(d, 2)?,
            u16_at(d, 4)?,
            whole(name_at(d, 6)?)?
        )),
        rtype::SOA => {
            let (m, i) = name_at(d, 0)?;
            let (r, i) = name_at(d, i)?;
            if d.len() != i + 20 {
                return None;
            }
            let n: Vec<String> = (0..5)
                .map(|k| u32_at(d, i + 4 * k).unwrap_or(0).to_string())
                .collect();
            Some(format!("{m} {r} {}", n.join(" ")))
        }
        rtype::TXT | rtype::HINFO => {
            let mut s = String::new();
            let mut i = 0;
            while i < d.len() {
                let l = d[i] as usize;
                let part = d.get(i + 1..i + 1 + l)?;
                if !s.is_empty() {
                    s.push(' ');
                }
                quoted(&mut s, part);
                i += 1 + l;
            }
            (!s.is_empty()).then_some(s)
        }
        rtype::CAA => {
            let flags = *d.first()?;
            let tl = *d.get(1)? as usize;
            let tag = std::str::from_utf8(d.get(2..2 + tl)?).ok()?;
            let mut s = format!("{flags} {tag} ");
            quoted(&mut s, &d[2 + tl..]);
            Some(s)
        }
        _ => None,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn wire(t: u16, f: &[&str]) -> Result<Vec<u8>, String> {
        let origin = Name::parse("example.com.", None).unwrap();
        let fields: Vec<(&str, bool)> = f.iter().map(|s| (*s, false)).collect();
        from_text(t, &fields, Some(&origin))
    }

    #[test]
    fn round_trips_through_text() {
        let cases: &[(u16, &[&str], &str)] = &[
            (rtype::A, &["192.0.2.1"], "192.0.2.1"),
            (rtype::AAAA, &["2001:db8::1"], "2001:db8::1"),
            (rtype::NS, &["ns1"], "ns1.example.com."),
            (
                rtype::MX,
                &["10", "mail.example.org."],
                "10 mail.example.org.",
            ),
            (
                rtype::SRV,
                &["1", "2", "5060", "sip"],
                "1 2 5060 sip.example.com.",
            ),
            (
                rtype::SOA,
                &["ns", "hm", "1", "1h", "2", "3", "4"],
                "ns.example.com. hm.example.com. 1 3600 2 3 4",
            ),
            (
                rtype::TXT,
                &["a b", "c\\\"d", "\\065"],
                "\"a b\" \"c\\\"d\" \"A\"",
            ),
            (
                rtype::CAA,
                &["0", "issue", "ca.example"],
                "0 issue \"ca.example\"",
            ),
            (65000, &["\\#", "3", "0a0b", "0c"], "\\# 3 0a0b0c"),
        ];
        for (t, f, text) in cases {
            assert_eq!(to_text(*t, &wire(*t, f).unwrap()), *text);
        }
    }

    #[test]
    fn refuses_bad_data() {
        assert!(wire(rtype::A, &["1.2.3"]).is_err());
        assert!(wire(rtype::A, &["1.2.3.4", "5"]).is_err());
        assert!(wire(rtype::AAAA, &["1.2.3.4"]).is_err());
        assert!(wire(rtype::MX, &["70000", "x"]).is_err());
        assert!(wire(rtype::TXT, &[&"x".repeat(256)]).is_err());
        assert!(wire(rtype::CAA, &["0", "is-sue", "x"]).is_err());
        assert!(wire(65000, &["\\#", "2", "0a"]).is_err());
        assert!(wire(rtype::NS, &["\\#", "1", "00"]).is_err());
        assert!(wire(99, &["x"]).is_err());
    }
}
