//! Zones from RFC 1035 master files (section 5): `$ORIGIN`, `$TTL` (RFC 2308), `$INCLUDE`,
//! relative names and `@`, an omitted owner meaning the previous one, TTL and class in either
//! order, parentheses across lines, comments and quoted strings.
//!
//! The parser does no I/O of its own: the caller hands it a function that reads a file, so a
//! server reads from disk and a test from memory. `$INCLUDE` names a file relative to the
//! directory of the file that includes it.

use std::collections::HashMap;
use std::fmt;
use std::path::{Path, PathBuf};

use crate::name::{self, Name};
use crate::rdata;
use crate::wire::{rtype, type_from_name};

/// A zone file the server refuses, with where and why.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct ZoneError {
    pub file: PathBuf,
    pub line: usize,
    pub reason: String,
}

impl fmt::Display for ZoneError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}:{}: {}", self.file.display(), self.line, self.reason)
    }
}

impl std::error::Error for ZoneError {}

/// The records of one name and type. RFC 2181 section 5.2 asks that their TTLs agree; where
/// a file gives them different ones, each record keeps its own, as NSD serves them.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct RRset {
    pub rtype: u16,
    /// The first record's TTL.
    pub ttl: u32,
    /// Each record's TTL, in the order of `rdatas`.
    pub ttls: Vec<u32>,
    /// Each record's data in wire form, names uncompressed.
    pub rdatas: Vec<Box<[u8]>>,
}

/// A name in the zone: its record sets in the order the file first gave each type (an empty
/// list is an empty non-terminal, a name that exists only because names below it do).
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Node {
    pub rrsets: Vec<RRset>,
}

impl Node {
    pub fn get(&self, t: u16) -> Option<&RRset> {
        self.rrsets.iter().find(|s| s.rtype == t)
    }
}

/// One zone: its origin and every name at or below it, keyed by the lowercased wire name.
#[derive(Clone, Debug)]
pub struct Zone {
    origin: Name,
    nodes: HashMap<Box<[u8]>, Node, crate::hash::BuildFxHasher>,
    /// The TTL negative answers give the SOA: the lesser of its own TTL and its MINIMUM field
    /// (RFC 2308 section 3).
    negative_ttl: u32,
}

impl Zone {
    pub fn origin(&self) -> &Name {
        &self.origin
    }

    pub fn node(&self, lower_name: &[u8]) -> Option<&Node> {
        self.nodes.get(lower_name)
    }

    pub fn apex(&self) -> &Node {
        &self.nodes[self.origin.wire()]
    }

    pub fn soa(&self) -> &RRset {
        self.apex().get(rtype::SOA).expect("a zone has its SOA")
    }

    pub fn negative_ttl(&self) -> u32 {
        self.negative_ttl
    }

    /// Every name with its node, for tools and tests.
    pub fn nodes(&self) -> impl Iterator<Item = (&[u8], &Node)> {
        self.nodes.iter().map(|(k, v)| (&k[..], v))
    }

    /// Parses the zone file at `path` through `read`. `origin` is the zone's name when the
    /// caller knows it; otherwise the file must set `$ORIGIN` before its first record, and
    /// the zone is the owner of its SOA.
    pub fn load(
        path: &Path,
        origin: Option<Name>,
        read: &mut dyn FnMut(&Path) -> std::io::Result<String>,
    ) -> Result<Zone, ZoneError> {
        let mut p = Parser {
            read,
            records: Vec::new(),
            default_ttl: None,
            last_ttl: None,
            depth: 0,
        };
        let origin = origin.map(|o| o.lowercased());
        p.file(path, origin.clone(), None)?;
        build(path, origin, p.records)
    }
}

/// A record as the file gave it, with where it came from.
struct Parsed {
    file: PathBuf,
    line: usize,
    owner: Name,
    rtype: u16,
    ttl: u32,
    rdata: Vec<u8>,
}

struct Parser<'r> {
    read: &'r mut dyn FnMut(&Path) -> std::io::Result<String>,
    records: Vec<Parsed>,
    default_ttl: Option<u32>,
    last_ttl: Option<u32>,
    depth: usize,
}

/// Deepest `$INCLUDE` nesting, so that a file including itself fails instead of recursing.
const MAX_INCLUDE_DEPTH: usize = 16;

/// One word of a line: its text (escapes left in, for the field's own parser) and whether it
/// was quoted.
#[derive(Debug)]
struct Token {
    text: String,
    quoted: bool,
}

/// An entry: the tokens of one line, parentheses joining lines into one.
struct Entry {
    line: usize,
    /// The line began with blank space: the owner is the previous entry's.
    blank_owner: bool,
    tokens: Vec<Token>,
}

fn err(file: &Path, line: usize, reason: impl Into<String>) -> ZoneError {
    ZoneError {
        file: file.to_path_buf(),
        line,
        reason: reason.into(),
    }
}

/// Splits a file into entries.
fn entries(file: &Path, text: &str) -> Result<Vec<Entry>, ZoneError> {
    let mut out = Vec::new();
    let bytes = text.as_bytes();
    let mut i = 0;
    let mut line = 1;
    let mut depth = 0usize;
    let mut paren_line = 0;
    let mut cur: Option<Entry> = None;
    let mut at_line_start = true;
    while i < bytes.len() {
        let c = bytes[i];
        if at_line_start && depth == 0 {
            at_line_start = false;
            if let Some(e) = cur.take()
                && !e.tokens.is_empty()
            {
                out.push(e);
            }
            cur = Some(Entry {
                line,
                blank_owner: c == b' ' || c == b'\t',
                tokens: Vec::new(),
            });
        }
        let entry = cur.as_mut().expect("an entry is open");
        match c {
            b'\n' => {
                line += 1;
                // Inside parentheses a new line continues the entry.
                at_line_start = depth == 0;
                i += 1;
            }
            b' ' | b'\t' | b'\r' => i += 1,
            b';' => {
                while i < bytes.len() && bytes[i] != b'\n' {
                    i += 1;
                }
            }
            b'(' => {
                if depth == 0 {
                    paren_line = line;
                }
                depth += 1;
                i += 1;
            }
            b')' => {
                if depth == 0 {
                    return Err(err(file, line, "')' without '('"));
                }
                depth -= 1;
                i += 1;
            }
            b'"' => {
                let start_line = line;
                let mut s = Vec::new();
                i += 1;
                loop {
                    match bytes.get(i) {
                        None => return Err(err(file, start_line, "unterminated quoted string")),
                        Some(b'"') => {
                            i += 1;
                            break;
                        }
                        Some(b'\\') if i + 1 < bytes.len() => {
                            s.extend_from_slice(&bytes[i..i + 2]);
                            i += 2;
                        }
                        Some(&b) => {
                            if b == b'\n' {
                                line += 1;
                            }
                            s.push(b);
                            i += 1;
                        }
                    }
                }
                entry.tokens.push(Token {
                    text: String::from_utf8_lossy(&s).into_owned(),
                    quoted: true,
                });
            }
            _ => {
                let start = i;
                while i < bytes.len() {
                    match bytes[i] {
                        b' ' | b'\t' | b'\r' | b'\n' | b';' | b'(' | b')' | b'"' => break,
                        b'\\' => i = (i + 2).min(bytes.len()),
                        _ => i += 1,
                    }
                }
                entry.tokens.push(Token {
                    text: String::from_utf8_lossy(&bytes[start..i]).into_owned(),
                    quoted: false,
                });
            }
        }
    }
    if depth > 0 {
        return Err(err(file, paren_line, "'(' never closed"));
    }
    if let Some(e) = cur
        && !e.tokens.is_empty()
    {
        out.push(e);
    }
    Ok(out)
}

/// A TTL: seconds, or BIND's units (`1w2d3h4m5s`), at most 2^31 - 1 (RFC 2181 section 8).
pub fn parse_ttl(s: &str) -> Option<u32> {
    if s.is_empty() {
        return None;
    }
    if s.bytes().all(|b| b.is_ascii_digit()) {
        return s.parse::<u32>().ok().filter(|&v| v <= i32::MAX as u32);
    }
    let mut total: u64 = 0;
    let mut num: Option<u64> = None;
    for b in s.bytes() {
        if b.is_ascii_digit() {
            num = Some(num.unwrap_or(0).checked_mul(10)? + u64::from(b - b'0'));
            if num? > u64::from(u32::MAX) {
                return None;
            }
            continue;
        }
        let unit = match b.to_ascii_lowercase() {
            b's' => 1,
            b'm' => 60,
            b'h' => 3600,
            b'd' => 86400,
            b'w' => 604800,
            _ => return None,
        };
        total += num.take()? * unit;
    }
    if num.is_some() {
        return None;
    }
    u32::try_from(total).ok().filter(|&v| v <= i32::MAX as u32)
}

fn starts_with_digit(s: &str) -> bool {
    s.as_bytes().first().is_some_and(u8::is_ascii_digit)
}

fn is_class(s: &str) -> bool {
    ["IN", "CH", "CS", "HS", "ANY", "NONE"]
        .iter()
        .any(|c| c.eq_ignore_ascii_case(s))
        || s.get(..5).is_some_and(|p| p.eq_ignore_ascii_case("CLASS"))
}

impl Parser<'_> {
    /// Parses one file; `from` is the file and line that included it.
    fn file(
        &mut self,
        path: &Path,
        origin: Option<Name>,
        from: Option<(&Path, usize)>,
    ) -> Result<(), ZoneError> {
        let text = (self.read)(path).map_err(|e| {
            let (f, l) = from.unwrap_or((path, 0));
            err(f, l, format!("cannot read {}: {e}", path.display()))
        })?;
        let mut origin = origin;
        let mut owner: Option<Name> = None;
        for e in entries(path, &text)? {
            let l = e.line;
            let first = &e.tokens[0];
            if !e.blank_owner && !first.quoted && first.text.starts_with('$') {
                let args: Vec<&str> = e.tokens[1..].iter().map(|t| t.text.as_str()).collect();
                match first.text.to_ascii_uppercase().as_str() {
                    "$ORIGIN" => {
                        let [o] = args[..] else {
                            return Err(err(path, l, "$ORIGIN takes one name"));
                        };
                        let o = Name::parse(o, origin.as_ref()).map_err(|r| err(path, l, r))?;
                        origin = Some(o.lowercased());
                    }
                    "$TTL" => {
                        let [t] = args[..] else {
                            return Err(err(path, l, "$TTL takes one TTL"));
                        };
                        let ttl =
                            parse_ttl(t).ok_or_else(|| err(path, l, format!("bad TTL {t:?}")))?;
                        self.default_ttl = Some(ttl);
                    }
                    "$INCLUDE" => {
                        let (file, inc_origin) = match args[..] {
                            [f] => (f, origin.clone()),
                            [f, o] => (
                                f,
                                Some(
                                    Name::parse(o, origin.as_ref())
                                        .map_err(|r| err(path, l, r))?
                                        .lowercased(),
                                ),
                            ),
                            _ => {
                                return Err(err(path, l, "$INCLUDE takes a file and an origin"));
                            }
                        };
                        if self.depth >= MAX_INCLUDE_DEPTH {
                            return Err(err(path, l, "$INCLUDE nested too deep"));
                        }
                        let inc = path.parent().unwrap_or(Path::new(".")).join(file);
                        self.depth += 1;
                        self.file(&inc, inc_origin, Some((path, l)))?;
                        self.depth -= 1;
                    }
                    other => return Err(err(path, l, format!("unknown directive {other}"))),
                }
                continue;
            }
            let mut toks = e.tokens.iter().peekable();
            if !e.blank_owner {
                let t = toks.next().expect("an entry has a token");
                let o = Name::parse(&t.text, origin.as_ref()).map_err(|r| err(path, l, r))?;
                owner = Some(o.lowercased());
            }
            let owner = owner
                .clone()
                .ok_or_else(|| err(path, l, "record with no owner name before it"))?;
            let mut ttl = None;
            let mut class_seen = false;
            let type_tok = loop {
                let t = toks
                    .next()
                    .ok_or_else(|| err(path, l, "record with no type"))?;
                if ttl.is_none() && starts_with_digit(&t.text) {
                    ttl = Some(
                        parse_ttl(&t.text)
                            .ok_or_else(|| err(path, l, format!("bad TTL {:?}", t.text)))?,
                    );
                } else if !class_seen && is_class(&t.text) {
                    if !t.text.eq_ignore_ascii_case("IN") {
                        return Err(err(
                            path,
                            l,
                            format!("class {} is not served; only IN", t.text),
                        ));
                    }
                    class_seen = true;
                } else {
                    break t;
                }
            };
            let t = type_from_name(&type_tok.text)
                .ok_or_else(|| err(path, l, format!("unknown type {:?}", type_tok.text)))?;
            let ttl = match ttl {
                Some(v) => {
                    self.last_ttl = Some(v);
                    v
                }
                None => self.default_ttl.or(self.last_ttl).ok_or_else(|| {
                    err(path, l, "no TTL: give one, or $TTL before the first record")
                })?,
            };
            let fields: Vec<(&str, bool)> = toks.map(|t| (t.text.as_str(), t.quoted)).collect();
            let rdata = rdata::from_text(t, &fields, origin.as_ref())
                .map_err(|r| err(path, l, format!("{} record: {r}", type_tok.text)))?;
            self.records.push(Parsed {
                file: path.to_path_buf(),
                line: l,
                owner,
                rtype: t,
                ttl,
                rdata,
            });
        }
        Ok(())
    }
}

/// Checks the records make a zone and indexes them by name.
fn build(path: &Path, origin: Option<Name>, records: Vec<Parsed>) -> Result<Zone, ZoneError> {
    let origin = match origin {
        Some(o) => o,
        None => {
            let soa = records
                .iter()
                .find(|r| r.rtype == rtype::SOA)
                .ok_or_else(|| err(path, 1, "no SOA record"))?;
            soa.owner.clone()
        }
    };
    let mut nodes: HashMap<Box<[u8]>, Node, crate::hash::BuildFxHasher> = HashMap::default();
    let mut soa_count = 0;
    // Where each name's CNAME (true) or other data (false) was first given, for the
    // conflict message.
    type Key = (Box<[u8]>, bool);
    let mut first_line: HashMap<Key, (PathBuf, usize)> = HashMap::new();
    for r in &records {
        let here = |reason: String| err(&r.file, r.line, reason);
        if !r.owner.is_below_or_at(&origin) {
            return Err(here(format!(
                "{} is outside the zone {}",
                r.owner,
                origin.clone()
            )));
        }
        match r.rtype {
            rtype::SOA => {
                if r.owner != origin {
                    return Err(here(format!("SOA for {} in zone {origin}", r.owner)));
                }
                soa_count += 1;
                if soa_count > 1 {
                    return Err(here("a second SOA record".into()));
                }
            }
            rtype::DNAME => return Err(here("DNAME records are not supported".into())),
            rtype::OPT | rtype::ANY | rtype::AXFR | rtype::IXFR => {
                return Err(here(format!(
                    "{} is not a type a zone can hold",
                    crate::wire::type_name(r.rtype)
                )));
            }
            rtype::CNAME if r.owner == origin => {
                return Err(here("CNAME at the zone apex".into()));
            }
            _ => {}
        }
        let key: Box<[u8]> = r.owner.wire().into();
        let is_cname = r.rtype == rtype::CNAME;
        first_line
            .entry((key.clone(), is_cname))
            .or_insert((r.file.clone(), r.line));
        if let Some((f, l)) = first_line.get(&(key.clone(), !is_cname)) {
            return Err(here(format!(
                "{} has a CNAME and other data (the other at {}:{l})",
                r.owner,
                f.display()
            )));
        }
        let node = nodes.entry(key).or_default();
        match node.rrsets.iter_mut().find(|s| s.rtype == r.rtype) {
            Some(set) => {
                if is_cname {
                    return Err(here(format!("{} has more than one CNAME", r.owner)));
                }
                if !set.rdatas.iter().any(|d| **d == r.rdata[..]) {
                    set.rdatas.push(r.rdata.clone().into());
                    set.ttls.push(r.ttl);
                }
            }
            None => node.rrsets.push(RRset {
                rtype: r.rtype,
                ttl: r.ttl,
                ttls: vec![r.ttl],
                rdatas: vec![r.rdata.clone().into()],
            }),
        }
    }
    if soa_count == 0 {
        return Err(err(path, 1, format!("zone {origin} has no SOA record")));
    }
    // Every name between a record's owner and the apex exists, if only as an empty
    // non-terminal (RFC 4592 section 2.2.2).
    let owners: Vec<Box<[u8]>> = nodes.keys().cloned().collect();
    for o in owners {
        for s in name::suffixes(&o).skip(1) {
            if s.len() < origin.wire().len() {
                break;
            }
            nodes.entry(s.into()).or_default();
        }
    }
    let apex = &nodes[origin.wire()];
    let soa = apex.get(rtype::SOA).expect("checked above");
    let minimum = crate::wire::u32_at(&soa.rdatas[0], soa.rdatas[0].len() - 4).unwrap_or(0);
    let negative_ttl = soa.ttl.min(minimum);
    Ok(Zone {
        origin,
        nodes,
        negative_ttl,
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    fn load(files: &[(&str, &str)], origin: Option<&str>) -> Result<Zone, ZoneError> {
        let files: HashMap<PathBuf, String> = files
            .iter()
            .map(|(p, t)| (PathBuf::from(p), t.to_string()))
            .collect();
        let mut read = |p: &Path| {
            files
                .get(p)
                .cloned()
                .ok_or_else(|| std::io::Error::from(std::io::ErrorKind::NotFound))
        };
        Zone::load(
            Path::new(files.keys().find(|p| p.ends_with("main")).unwrap()),
            origin.map(|o| Name::parse(o, None).unwrap()),
            &mut read,
        )
    }

    fn key(s: &str) -> Vec<u8> {
        Name::parse(s, None).unwrap().wire().to_vec()
    }

    const BASIC: &str = "$ORIGIN Example.COM.\n$TTL 1h\n\
        @ IN SOA ns1 host.master ( 1 2 3 4\n 60 ) ; trailing comment\n\
        \tNS ns1\n\
        ns1 300 IN A 192.0.2.1\n\
        \tIN 200 AAAA 2001:db8::1\n\
        txt TXT \"a;b\" c \"d\\\"e\"\n\
        a.b.c A 192.0.2.3\n";

    #[test]
    fn parses_a_basic_zone() {
        let z = load(&[("z/main", BASIC)], None).unwrap();
        assert_eq!(z.origin().to_string(), "example.com.");
        let soa = z.soa();
        assert_eq!(soa.ttl, 3600);
        assert_eq!(z.negative_ttl(), 60);
        let ns1 = z.node(&key("ns1.example.com.")).unwrap();
        assert_eq!(ns1.get(rtype::A).unwrap().ttl, 300);
        assert_eq!(&*ns1.get(rtype::A).unwrap().rdatas[0], &[192, 0, 2, 1]);
        assert_eq!(ns1.get(rtype::AAAA).unwrap().ttl, 200);
        let txt = z.node(&key("txt.example.com.")).unwrap().get(rtype::TXT);
        assert_eq!(&*txt.unwrap().rdatas[0], b"\x03a;b\x01c\x03d\"e");
        // b.c and c are empty non-terminals; nothing above the apex is added.
        assert_eq!(z.node(&key("b.c.example.com.")).unwrap().rrsets, vec![]);
        assert_eq!(z.node(&key("c.example.com.")).unwrap().rrsets, vec![]);
        assert!(z.node(&key("com.")).is_none());
    }

    #[test]
    fn includes_files_with_their_own_origin() {
        let main =
            "$TTL 60\n@ SOA ns hm 1 2 3 4 5\n$INCLUDE inc sub.example.org.\nback A 192.0.2.9\n";
        let inc = "@ TXT x\nhost A 192.0.2.8\n";
        let z = load(&[("d/main", main), ("d/inc", inc)], Some("example.org.")).unwrap();
        assert!(z.node(&key("host.sub.example.org.")).is_some());
        assert!(
            z.node(&key("sub.example.org."))
                .unwrap()
                .get(rtype::TXT)
                .is_some()
        );
        assert!(z.node(&key("back.example.org.")).is_some());
    }

    #[test]
    fn errors_name_the_file_line_and_reason() {
        let cases = [
            (
                "$TTL 60\n@ SOA ns hm 1 2 3 4 5\nx A 300.1.1.1\n",
                3,
                "A record",
            ),
            (
                "$TTL 60\n@ SOA ns hm 1 2 3 4 5\nx BOGUS 1\n",
                3,
                "unknown type",
            ),
            (
                "$TTL 60\n@ SOA ns hm 1 2 3 4 5\nx CNAME a\nx A 1.2.3.4\n",
                4,
                "CNAME and other",
            ),
            (
                "$TTL 60\n@ SOA ns hm 1 2 3 4 5\nx.example.net. A 1.2.3.4\n",
                3,
                "outside",
            ),
            (
                "$TTL 60\n@ SOA ns hm 1 2 3 4 5\nx A (1.2.3.4\n\n",
                3,
                "never closed",
            ),
            (
                "$TTL 60\n@ SOA ns hm 1 2 3 4 5\nx TXT \"open\n",
                3,
                "unterminated",
            ),
            ("@ SOA ns hm 1 2 3 4 5\n", 1, "no TTL"),
            ("$TTL 60\nx A 1.2.3.4\n", 1, "no SOA"),
            (
                "$TTL 60\n@ SOA ns hm 1 2 3 4 5\n$INCLUDE missing\n",
                3,
                "cannot read",
            ),
            ("$TTL 60\n@ CH SOA ns hm 1 2 3 4 5\n", 2, "only IN"),
            ("$TTL 60\n@ SOA ns hm 1 2 3 4 5\nx DNAME y\n", 3, "DNAME"),
        ];
        for (text, line, why) in cases {
            let e = load(&[("z/main", text)], Some("example.com.")).unwrap_err();
            assert_eq!(e.line, line, "{text:?}: {e}");
            assert!(e.reason.contains(why), "{text:?}: {e}");
            assert!(e.to_string().starts_with("z/main:"), "{e}");
        }
    }

    #[test]
    fn a_self_including_file_fails_instead_of_recursing() {
        let e = load(
            &[("z/main", "$TTL 60\n@ SOA ns hm 1 2 3 4 5\n$INCLUDE main\n")],
            Some("example.com."),
        )
        .unwrap_err();
        assert!(e.reason.contains("too deep"), "{e}");
    }

    #[test]
    fn ttl_units() {
        assert_eq!(parse_ttl("3600"), Some(3600));
        assert_eq!(parse_ttl("1h30m"), Some(5400));
        assert_eq!(parse_ttl("1W"), Some(604800));
        assert_eq!(parse_ttl("2147483648"), None);
        assert_eq!(parse_ttl("1x"), None);
        assert_eq!(parse_ttl("5m3"), None);
    }
}
