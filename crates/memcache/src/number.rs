//! Numbers as memcached 1.6.18 reads them: through C's `strtoull`/`strtol` on a 64-bit host,
//! then `safe_strto*`'s checks, then (for the 32-bit readers) a silent truncation. Matching these
//! quirks is what keeps replies identical to memcached's for odd input such as `+5`, `5\t` or an
//! out-of-range flags value.

fn is_c_space(b: u8) -> bool {
    matches!(b, b' ' | b'\t' | b'\n' | 0x0b | 0x0c | b'\r')
}

/// What `strtoull`/`strtoll` saw: the magnitude, the sign, and where the digits ended.
struct Scan {
    negative: bool,
    magnitude: u128,
    end: usize,
}

fn scan(token: &[u8]) -> Option<Scan> {
    let mut i = 0;
    while i < token.len() && is_c_space(token[i]) {
        i += 1;
    }
    let mut negative = false;
    if i < token.len() && (token[i] == b'+' || token[i] == b'-') {
        negative = token[i] == b'-';
        i += 1;
    }
    let digits_start = i;
    let mut magnitude: u128 = 0;
    while i < token.len() && token[i].is_ascii_digit() {
        magnitude = (magnitude * 10 + u128::from(token[i] - b'0')).min(u128::from(u64::MAX) + 2);
        i += 1;
    }
    if i == digits_start {
        return None; // str == endptr
    }
    // The C string ends where the token ends; the next byte must be a space or that end.
    if i < token.len() && !is_c_space(token[i]) {
        return None;
    }
    Some(Scan {
        negative,
        magnitude,
        end: i,
    })
}

/// `safe_strtoull`: 64-bit unsigned; a leading `-` is accepted only while the result stays
/// below 2^63, as memcached's check does.
pub fn parse_u64(token: &[u8]) -> Option<u64> {
    let s = scan(token)?;
    if s.magnitude > u128::from(u64::MAX) {
        return None; // ERANGE
    }
    let value = if s.negative {
        (s.magnitude as u64).wrapping_neg()
    } else {
        s.magnitude as u64
    };
    if (value as i64) < 0 && token.contains(&b'-') {
        return None;
    }
    let _ = s.end;
    Some(value)
}

/// `safe_strtoul` into a `uint32_t`: read as 64 bits, then truncated.
pub fn parse_u32(token: &[u8]) -> Option<u32> {
    parse_u64(token).map(|v| v as u32)
}

/// `safe_strtol` into an `int32_t`: read as a 64-bit `long`, then truncated.
pub fn parse_i32(token: &[u8]) -> Option<i32> {
    let s = scan(token)?;
    let limit = if s.negative {
        1u128 << 63
    } else {
        (1u128 << 63) - 1
    };
    if s.magnitude > limit {
        return None; // ERANGE
    }
    let wide = if s.negative {
        (s.magnitude as i128).wrapping_neg() as i64
    } else {
        s.magnitude as i64
    };
    Some(wide as i32)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn reads_like_c() {
        assert_eq!(parse_u64(b"42"), Some(42));
        assert_eq!(parse_u64(b"+42"), Some(42));
        assert_eq!(parse_u64(b"42\tx"), Some(42));
        assert_eq!(parse_u64(b"42x"), None);
        assert_eq!(parse_u64(b""), None);
        assert_eq!(parse_u64(b"-1"), None);
        assert_eq!(parse_u64(b"-0"), Some(0));
        assert_eq!(parse_u64(b"18446744073709551615"), Some(u64::MAX));
        assert_eq!(parse_u64(b"18446744073709551616"), None);
        assert_eq!(parse_u32(b"4294967296"), Some(0));
        assert_eq!(parse_i32(b"-1"), Some(-1));
        assert_eq!(parse_i32(b"4294967297"), Some(1));
        assert_eq!(parse_i32(b"9223372036854775808"), None);
        assert_eq!(parse_i32(b"-9223372036854775808"), Some(0));
    }
}
