//! Shell-style glob matching of one host label, as Go's `path/filepath.Match` on Unix.
//!
//! Upstream's `URLsMatch` (`pkg/credentialprovider/keyring.go`) matches each `.`-separated label of a credential
//! or `matchImages` host against the image's label with `filepath.Match`. This module ports that function
//! (`src/path/filepath/match.go`): `*` matches any run of non-`/` characters, `?` one non-`/` character,
//! `[a-z]` / `[^a-z]` a character class, `\` escapes the next character. A malformed pattern is
//! [`BadPattern`], reported even when the name has already failed to match, as Go does.

/// `filepath.ErrBadPattern`: the pattern is malformed.
#[derive(Debug, Clone, Copy, PartialEq, Eq, thiserror::Error)]
#[error("syntax error in pattern")]
pub struct BadPattern;

const SEPARATOR: char = '/';

/// Reports whether `name` matches the shell pattern `pattern` (Go's `filepath.Match`).
pub fn glob_match(pattern: &str, name: &str) -> Result<bool, BadPattern> {
    let mut pattern = pattern;
    let mut name = name;
    'pattern: while !pattern.is_empty() {
        let (star, chunk, rest) = scan_chunk(pattern);
        pattern = rest;
        if star && chunk.is_empty() {
            // A trailing star matches the rest of the name unless it has a separator.
            return Ok(!name.contains(SEPARATOR));
        }
        // Look for a match at the current position.
        let (t, ok, err) = match_chunk(chunk, name);
        // The last chunk must exhaust the name, otherwise the star may still match more.
        if ok && (t.is_empty() || !pattern.is_empty()) {
            name = t;
            continue;
        }
        if let Some(err) = err {
            return Err(err);
        }
        if star {
            // Look for a match skipping i+1 bytes; a star cannot skip a separator.
            for (i, c) in name.char_indices() {
                if c == SEPARATOR {
                    break;
                }
                let skip = i + c.len_utf8();
                let (t, ok, err) = match_chunk(chunk, &name[skip..]);
                if ok {
                    if pattern.is_empty() && !t.is_empty() {
                        continue;
                    }
                    name = t;
                    continue 'pattern;
                }
                if let Some(err) = err {
                    return Err(err);
                }
            }
        }
        // Before returning false, check that the rest of the pattern is well formed.
        while !pattern.is_empty() {
            let (_, chunk, rest) = scan_chunk(pattern);
            pattern = rest;
            if let (_, _, Some(err)) = match_chunk(chunk, "") {
                return Err(err);
            }
        }
        return Ok(false);
    }
    Ok(name.is_empty())
}

/// Splits off the leading stars and the chunk up to the next star outside a class.
fn scan_chunk(pattern: &str) -> (bool, &str, &str) {
    let trimmed = pattern.trim_start_matches('*');
    let star = trimmed.len() != pattern.len();
    let bytes = trimmed.as_bytes();
    let mut in_range = false;
    let mut i = 0;
    while i < bytes.len() {
        match bytes[i] {
            b'\\' if i + 1 < bytes.len() => i += 1,
            b'[' => in_range = true,
            b']' => in_range = false,
            b'*' if !in_range => break,
            _ => {}
        }
        i += 1;
    }
    (star, &trimmed[..i], &trimmed[i..])
}

/// Matches one star-free chunk at the start of `s`: the rest of `s`, whether it matched, and a pattern error.
/// After a mismatch the chunk is still walked to the end so that a malformed pattern is reported.
fn match_chunk<'a>(mut chunk: &str, mut s: &'a str) -> (&'a str, bool, Option<BadPattern>) {
    let mut failed = false;
    while let Some(first) = chunk.chars().next() {
        if !failed && s.is_empty() {
            failed = true;
        }
        match first {
            '[' => {
                let mut r = '\0';
                if !failed {
                    let c = s.chars().next().unwrap_or('\0');
                    r = c;
                    s = &s[c.len_utf8()..];
                }
                chunk = &chunk[1..];
                let negated = chunk.starts_with('^');
                if negated {
                    chunk = &chunk[1..];
                }
                let mut matched = false;
                let mut nrange = 0;
                loop {
                    if nrange > 0 && chunk.starts_with(']') {
                        chunk = &chunk[1..];
                        break;
                    }
                    let (lo, rest) = match get_esc(chunk) {
                        Ok(v) => v,
                        Err(e) => return ("", false, Some(e)),
                    };
                    chunk = rest;
                    let mut hi = lo;
                    if let Some(after_dash) = chunk.strip_prefix('-') {
                        match get_esc(after_dash) {
                            Ok((h, rest)) => {
                                hi = h;
                                chunk = rest;
                            }
                            Err(e) => return ("", false, Some(e)),
                        }
                    }
                    if lo <= r && r <= hi {
                        matched = true;
                    }
                    nrange += 1;
                }
                if matched == negated {
                    failed = true;
                }
            }
            '?' => {
                if !failed {
                    let c = s.chars().next().unwrap_or('\0');
                    if c == SEPARATOR {
                        failed = true;
                    }
                    s = &s[c.len_utf8()..];
                }
                chunk = &chunk[1..];
            }
            _ => {
                if first == '\\' {
                    chunk = &chunk[1..];
                    if chunk.is_empty() {
                        return ("", false, Some(BadPattern));
                    }
                }
                let literal = chunk.chars().next().unwrap_or('\0');
                if !failed {
                    // Go compares bytes here; comparing the leading characters is the same for valid UTF-8.
                    match s.chars().next() {
                        Some(c) if c == literal => s = &s[c.len_utf8()..],
                        _ => failed = true,
                    }
                }
                chunk = &chunk[literal.len_utf8()..];
            }
        }
    }
    if failed { ("", false, None) } else { (s, true, None) }
}

/// One possibly escaped character of a class, and what follows it (which must not be empty).
fn get_esc(chunk: &str) -> Result<(char, &str), BadPattern> {
    let mut chunk = chunk;
    if chunk.is_empty() || chunk.starts_with('-') || chunk.starts_with(']') {
        return Err(BadPattern);
    }
    if let Some(rest) = chunk.strip_prefix('\\') {
        chunk = rest;
        if chunk.is_empty() {
            return Err(BadPattern);
        }
    }
    let c = chunk.chars().next().ok_or(BadPattern)?;
    let rest = &chunk[c.len_utf8()..];
    if rest.is_empty() {
        return Err(BadPattern);
    }
    Ok((c, rest))
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Cases from Go's `src/path/filepath/match_test.go` (`matchTests`).
    #[test]
    fn matches_as_go_filepath_match() {
        let cases: &[(&str, &str, Result<bool, BadPattern>)] = &[
            ("abc", "abc", Ok(true)),
            ("*", "abc", Ok(true)),
            ("*c", "abc", Ok(true)),
            ("a*", "a", Ok(true)),
            ("a*", "abc", Ok(true)),
            ("a*", "ab/c", Ok(false)),
            ("a*/b", "abc/b", Ok(true)),
            ("a*/b", "a/c/b", Ok(false)),
            ("a*b*c*d*e*/f", "axbxcxdxe/f", Ok(true)),
            ("a*b*c*d*e*/f", "axbxcxdxexxx/f", Ok(true)),
            ("a*b*c*d*e*/f", "axbxcxdxe/xxx/f", Ok(false)),
            ("a*b*c*d*e*/f", "axbxcxdxexxx/fff", Ok(false)),
            ("a*b?c*x", "abxbbxdbxebxczzx", Ok(true)),
            ("a*b?c*x", "abxbbxdbxebxczzy", Ok(false)),
            ("ab[c]", "abc", Ok(true)),
            ("ab[b-d]", "abc", Ok(true)),
            ("ab[e-g]", "abc", Ok(false)),
            ("ab[^c]", "abc", Ok(false)),
            ("ab[^b-d]", "abc", Ok(false)),
            ("ab[^e-g]", "abc", Ok(true)),
            ("a\\*b", "a*b", Ok(true)),
            ("a\\*b", "ab", Ok(false)),
            ("a?b", "a☺b", Ok(true)),
            ("a[^a]b", "a☺b", Ok(true)),
            ("a???b", "a☺b", Ok(false)),
            ("a[^a][^a][^a]b", "a☺b", Ok(false)),
            ("[a-ζ]*", "α", Ok(true)),
            ("*[a-ζ]", "A", Ok(false)),
            ("a?b", "a/b", Ok(false)),
            ("a*b", "a/b", Ok(false)),
            ("[\\]a]", "]", Ok(true)),
            ("[\\-]", "-", Ok(true)),
            ("[x\\-]", "x", Ok(true)),
            ("[x\\-]", "-", Ok(true)),
            ("[x\\-]", "z", Ok(false)),
            ("[\\-x]", "x", Ok(true)),
            ("[\\-x]", "-", Ok(true)),
            ("[\\-x]", "a", Ok(false)),
            ("[]a]", "]", Err(BadPattern)),
            ("[-]", "-", Err(BadPattern)),
            ("[x-]", "x", Err(BadPattern)),
            ("[x-]", "-", Err(BadPattern)),
            ("[x-]", "z", Err(BadPattern)),
            ("[-x]", "x", Err(BadPattern)),
            ("[-x]", "-", Err(BadPattern)),
            ("[-x]", "a", Err(BadPattern)),
            ("\\", "a", Err(BadPattern)),
            ("[a-b-c]", "a", Err(BadPattern)),
            ("[", "a", Err(BadPattern)),
            ("[^", "a", Err(BadPattern)),
            ("[^bc", "a", Err(BadPattern)),
            ("a[", "a", Err(BadPattern)),
            ("a[", "ab", Err(BadPattern)),
            ("a[", "x", Err(BadPattern)),
            ("a/b[", "x", Err(BadPattern)),
            ("*x", "xxx", Ok(true)),
        ];
        for (pattern, name, want) in cases {
            assert_eq!(glob_match(pattern, name), *want, "pattern {pattern:?} name {name:?}");
        }
    }
}
