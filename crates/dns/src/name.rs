//! Domain names in wire form: length-prefixed labels ending with the root's empty label, at
//! most 255 bytes (RFC 1035 section 3.1). Zone data keeps owner names lowercased so that a
//! lookup is a byte comparison; names inside record data keep the case the zone file gave.

use std::fmt;

/// Longest name in wire form, the root's zero byte included.
pub const MAX_NAME: usize = 255;
/// Longest label.
pub const MAX_LABEL: usize = 63;

/// An owned name in wire form.
#[derive(Clone, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct Name(Box<[u8]>);

impl Name {
    pub fn root() -> Name {
        Name(Box::new([0]))
    }

    /// Wraps wire bytes already known to be a well-formed uncompressed name.
    pub fn from_wire(wire: &[u8]) -> Name {
        debug_assert!(is_valid(wire));
        Name(wire.into())
    }

    pub fn wire(&self) -> &[u8] {
        &self.0
    }

    /// The same name in lower case, as zone lookups key it.
    pub fn lowercased(&self) -> Name {
        let mut v = self.0.to_vec();
        lowercase_in_place(&mut v);
        Name(v.into())
    }

    /// Parses a name in presentation form: `@` is `origin`, a name without a final dot is
    /// relative to `origin`, and `\.` or `\DDD` escape a byte inside a label.
    pub fn parse(text: &str, origin: Option<&Name>) -> Result<Name, String> {
        if text == "@" {
            return origin
                .cloned()
                .ok_or_else(|| "@ used with no $ORIGIN".to_string());
        }
        if text == "." {
            return Ok(Name::root());
        }
        if text.is_empty() {
            return Err("empty name".into());
        }
        let bytes = text.as_bytes();
        let mut wire = Vec::with_capacity(text.len() + 2);
        let mut label = Vec::with_capacity(MAX_LABEL);
        let mut absolute = false;
        let mut i = 0;
        while i < bytes.len() {
            match bytes[i] {
                b'.' => {
                    if label.is_empty() {
                        return Err(format!("empty label in {text:?}"));
                    }
                    push_label(&mut wire, &label, text)?;
                    label.clear();
                    if i + 1 == bytes.len() {
                        absolute = true;
                    }
                    i += 1;
                }
                b'\\' => {
                    let rest = &bytes[i + 1..];
                    if rest.len() >= 3 && rest[..3].iter().all(u8::is_ascii_digit) {
                        let v = u32::from(rest[0] - b'0') * 100
                            + u32::from(rest[1] - b'0') * 10
                            + u32::from(rest[2] - b'0');
                        let v = u8::try_from(v)
                            .map_err(|_| format!("escape \\{v} above 255 in {text:?}"))?;
                        label.push(v);
                        i += 4;
                    } else if let Some(&c) = rest.first() {
                        label.push(c);
                        i += 2;
                    } else {
                        return Err(format!("name {text:?} ends in a lone backslash"));
                    }
                }
                c => {
                    label.push(c);
                    i += 1;
                }
            }
        }
        if !label.is_empty() {
            push_label(&mut wire, &label, text)?;
        }
        if !absolute {
            let origin = origin.ok_or_else(|| format!("relative name {text:?} with no $ORIGIN"))?;
            wire.extend_from_slice(origin.wire());
        } else {
            wire.push(0);
        }
        if wire.len() > MAX_NAME {
            return Err(format!("name {text:?} is longer than 255 bytes"));
        }
        Ok(Name(wire.into()))
    }

    pub fn label_count(&self) -> usize {
        label_count(&self.0)
    }

    /// Whether this name is `ancestor` or below it (both lowercased).
    pub fn is_below_or_at(&self, ancestor: &Name) -> bool {
        suffixes(&self.0).any(|s| s == ancestor.wire())
    }
}

fn push_label(wire: &mut Vec<u8>, label: &[u8], text: &str) -> Result<(), String> {
    if label.len() > MAX_LABEL {
        return Err(format!("label longer than 63 bytes in {text:?}"));
    }
    wire.push(label.len() as u8);
    wire.extend_from_slice(label);
    Ok(())
}

impl fmt::Display for Name {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write_presentation(&self.0, f)
    }
}

impl fmt::Debug for Name {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "Name({self})")
    }
}

/// Writes wire-form `name` in presentation form, escaping what a zone file would need.
pub fn write_presentation(name: &[u8], f: &mut impl fmt::Write) -> fmt::Result {
    if name == [0] {
        return f.write_char('.');
    }
    for label in labels(name) {
        for &b in label {
            match b {
                b'.' | b'\\' | b'"' | b'(' | b')' | b';' | b'@' | b'$' => {
                    write!(f, "\\{}", b as char)?
                }
                0x21..=0x7e => f.write_char(b as char)?,
                _ => write!(f, "\\{b:03}")?,
            }
        }
        f.write_char('.')?;
    }
    Ok(())
}

/// The presentation form of wire-form `name`.
pub fn to_text(name: &[u8]) -> String {
    let mut s = String::new();
    let _ = write_presentation(name, &mut s);
    s
}

/// Whether `wire` is exactly one well-formed uncompressed name.
pub fn is_valid(wire: &[u8]) -> bool {
    if wire.is_empty() || wire.len() > MAX_NAME {
        return false;
    }
    let mut i = 0;
    while i < wire.len() {
        let len = wire[i] as usize;
        if len == 0 {
            return i + 1 == wire.len();
        }
        if len > MAX_LABEL {
            return false;
        }
        i += 1 + len;
    }
    false
}

/// The labels of a well-formed wire name, leftmost first, the root left out.
pub fn labels(name: &[u8]) -> impl Iterator<Item = &[u8]> {
    let mut rest = name;
    std::iter::from_fn(move || {
        let len = *rest.first()? as usize;
        if len == 0 {
            return None;
        }
        let label = &rest[1..1 + len];
        rest = &rest[1 + len..];
        Some(label)
    })
}

/// The name itself, then each ancestor up to and including the root.
pub fn suffixes(name: &[u8]) -> impl Iterator<Item = &[u8]> {
    let mut next = Some(name);
    std::iter::from_fn(move || {
        let cur = next?;
        next = match cur.first() {
            Some(&0) | None => None,
            Some(&len) => Some(&cur[1 + len as usize..]),
        };
        Some(cur)
    })
}

/// Labels in a well-formed wire name, the root not counted.
pub fn label_count(name: &[u8]) -> usize {
    labels(name).count()
}

/// ASCII-lowercases the label bytes of a well-formed wire name, leaving the length bytes
/// (which never fall in `A..=Z` below 64 anyway, but stay untouched on principle).
pub fn lowercase_in_place(name: &mut [u8]) {
    let mut i = 0;
    while i < name.len() {
        let len = name[i] as usize;
        if len == 0 {
            break;
        }
        name[i + 1..i + 1 + len].make_ascii_lowercase();
        i += 1 + len;
    }
}

/// Case-insensitive equality of two well-formed wire names.
pub fn eq_ignore_case(a: &[u8], b: &[u8]) -> bool {
    a.eq_ignore_ascii_case(b)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn n(s: &str) -> Name {
        Name::parse(s, None).unwrap()
    }

    #[test]
    fn parses_absolute_relative_and_escaped_names() {
        let origin = n("example.com.");
        assert_eq!(
            n("www.example.com.").wire(),
            b"\x03www\x07example\x03com\x00"
        );
        assert_eq!(
            Name::parse("www", Some(&origin)).unwrap(),
            n("www.example.com.")
        );
        assert_eq!(Name::parse("@", Some(&origin)).unwrap(), origin);
        assert_eq!(n("a\\.b.c.").wire(), b"\x03a.b\x01c\x00");
        assert_eq!(n("\\065.c.").wire(), b"\x01A\x01c\x00");
        assert_eq!(n(".").wire(), b"\x00");
        assert_eq!(n("a\\.b.c.").to_string(), "a\\.b.c.");
    }

    #[test]
    fn refuses_bad_names() {
        assert!(Name::parse("a..b.", None).is_err());
        assert!(Name::parse("www", None).is_err());
        assert!(Name::parse(&format!("{}.", "x".repeat(64)), None).is_err());
        let long = format!("{}.", vec!["y".repeat(63); 4].join("."));
        assert!(Name::parse(&long, None).is_err());
        assert!(Name::parse("\\256.", None).is_err());
    }

    #[test]
    fn suffixes_walk_to_the_root() {
        let name = n("a.b.");
        let all: Vec<&[u8]> = suffixes(name.wire()).collect();
        assert_eq!(all, vec![&b"\x01a\x01b\x00"[..], b"\x01b\x00", b"\x00"]);
        assert!(name.is_below_or_at(&n("b.")));
        assert!(!n("ab.").is_below_or_at(&n("b.")));
    }
}
