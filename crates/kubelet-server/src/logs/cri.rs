//! Reading CRI container log files (`staging/src/k8s.io/cri-client/pkg/logs/logs.go`, `tail.go`).
//!
//! A line is `<RFC3339Nano timestamp> <stdout|stderr> <P|F>[:tags] <content>\n`; a `P` (partial) fragment is
//! written without its newline, so fragments join by themselves. Lines that do not parse are skipped (and
//! logged), as upstream; Docker's JSON format is not read (no CRI runtime writes it).

use chrono::{DateTime, FixedOffset, Utc};

/// Which streams a reader wants (`stream=` of PodLogOptions).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub enum Streams {
    /// Both, interleaved in file order.
    #[default]
    All,
    /// `Stdout`.
    Stdout,
    /// `Stderr`.
    Stderr,
}

/// One parsed line.
#[derive(Debug, PartialEq, Eq)]
pub struct LogLine<'a> {
    /// When the runtime wrote it.
    pub time: DateTime<FixedOffset>,
    /// `stdout` (true) or `stderr` (false).
    pub stdout: bool,
    /// A `P` fragment: the content has no newline.
    pub partial: bool,
    /// The content, with its newline unless partial.
    pub content: &'a [u8],
}

/// Parses a CRI log line (including its trailing newline, when there is one).
pub fn parse(line: &[u8]) -> Option<LogLine<'_>> {
    let mut parts = line.splitn(4, |b| *b == b' ');
    let ts = std::str::from_utf8(parts.next()?).ok()?;
    let stream = parts.next()?;
    let tags = parts.next()?;
    let mut content = parts.next()?;
    let time = DateTime::parse_from_rfc3339(ts).ok()?;
    let stdout = match stream {
        b"stdout" => true,
        b"stderr" => false,
        _ => return None,
    };
    let partial = tags.split(|b| *b == b':').next() == Some(b"P");
    if partial && content.last() == Some(&b'\n') {
        content = &content[..content.len() - 1];
    }
    Some(LogLine { time, stdout, partial, content })
}

/// Go's `2006-01-02T15:04:05.000000000Z07:00`: fixed nine fractional digits, `Z` for UTC.
pub fn format_timestamp(t: &DateTime<FixedOffset>) -> String {
    if t.offset().local_minus_utc() == 0 {
        t.format("%Y-%m-%dT%H:%M:%S%.9fZ").to_string()
    } else {
        t.format("%Y-%m-%dT%H:%M:%S%.9f%:z").to_string()
    }
}

/// What to write of a log.
#[derive(Clone, Debug, Default)]
pub struct ReadOptions {
    /// Prefix each line with its timestamp.
    pub timestamps: bool,
    /// Skip lines written before this time.
    pub since: Option<DateTime<Utc>>,
    /// Stop after this many bytes (timestamps included).
    pub limit_bytes: Option<u64>,
    /// Which streams.
    pub streams: Streams,
}

/// Turns log lines into the response bytes, honouring [`ReadOptions`]; remembers whether the last byte written
/// ended a line (a fragment after a partial one gets no timestamp).
#[derive(Debug)]
pub struct LineWriter {
    opts: ReadOptions,
    written: u64,
    at_line_start: bool,
}

impl LineWriter {
    /// A writer for `opts`.
    pub fn new(opts: ReadOptions) -> Self {
        LineWriter { opts, written: 0, at_line_start: true }
    }

    /// Whether `limitBytes` is used up.
    pub fn full(&self) -> bool {
        self.opts.limit_bytes.is_some_and(|l| self.written >= l)
    }

    /// Appends what `raw` (one file line) contributes to `out`. Returns false for a line that does not parse.
    pub fn push(&mut self, raw: &[u8], out: &mut Vec<u8>) -> bool {
        let Some(l) = parse(raw) else { return false };
        if self.opts.since.is_some_and(|s| l.time < s) {
            return true;
        }
        match self.opts.streams {
            Streams::Stdout if !l.stdout => return true,
            Streams::Stderr if l.stdout => return true,
            _ => {}
        }
        let mut line = Vec::with_capacity(l.content.len() + 32);
        if self.opts.timestamps && self.at_line_start {
            line.extend_from_slice(format_timestamp(&l.time).as_bytes());
            line.push(b' ');
        }
        line.extend_from_slice(l.content);
        if let Some(limit) = self.opts.limit_bytes {
            let room = limit.saturating_sub(self.written) as usize;
            line.truncate(room);
        }
        self.written += line.len() as u64;
        if let Some(last) = line.last() {
            self.at_line_start = *last == b'\n';
        }
        out.extend_from_slice(&line);
        true
    }
}

/// The offset where the last `n` lines of a file of `len` bytes start (`findTailLineStartIndex`), reading
/// backwards in blocks: an incomplete last line is not counted; `n = 0` starts at the end.
pub async fn tail_offset<F>(f: &mut F, len: u64, n: usize) -> std::io::Result<u64>
where
    F: tokio::io::AsyncRead + tokio::io::AsyncSeek + Unpin,
{
    use tokio::io::{AsyncReadExt, AsyncSeekExt};
    if n == 0 {
        return Ok(len);
    }
    let mut buf = vec![0u8; 64 * 1024];
    let (mut pos, mut seen, mut last_line_end) = (len, 0, false);
    while pos > 0 {
        let start = pos.saturating_sub(buf.len() as u64);
        let size = (pos - start) as usize;
        f.seek(std::io::SeekFrom::Start(start)).await?;
        f.read_exact(&mut buf[..size]).await?;
        for i in (0..size).rev() {
            if buf[i] != b'\n' {
                continue;
            }
            if !last_line_end {
                // The newline that ends the last complete line.
                last_line_end = true;
                continue;
            }
            seen += 1;
            if seen == n {
                return Ok(start + i as u64 + 1);
            }
        }
        pos = start;
    }
    Ok(0)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn ts(s: &str) -> DateTime<FixedOffset> {
        DateTime::parse_from_rfc3339(s).unwrap()
    }

    #[test]
    fn lines_parse_as_the_runtime_writes_them() {
        let l = parse(b"2016-10-06T00:17:09.669794202Z stdout P log content 1\n").unwrap();
        assert_eq!(
            l,
            LogLine {
                time: ts("2016-10-06T00:17:09.669794202Z"),
                stdout: true,
                partial: true,
                content: b"log content 1"
            }
        );
        let l = parse(b"2016-10-06T00:17:09.669794203Z stderr F log content 2\n").unwrap();
        assert!(!l.stdout && !l.partial);
        assert_eq!(l.content, b"log content 2\n");
        assert_eq!(parse(b"2016-10-06T00:17:09Z stdout F:x empty tag\n").unwrap().content, b"empty tag\n");
        assert!(parse(b"not a log line\n").is_none());
        assert!(parse(b"2016-10-06T00:17:09Z stdin F x\n").is_none());
    }

    #[test]
    fn timestamps_have_nine_digits_and_only_start_lines() {
        let mut w = LineWriter::new(ReadOptions { timestamps: true, ..Default::default() });
        let mut out = vec![];
        w.push(b"2024-01-02T03:04:05.5Z stdout P abc\n", &mut out);
        w.push(b"2024-01-02T03:04:06Z stdout F def\n", &mut out);
        w.push(b"2024-01-02T03:04:07.123456789+02:00 stderr F ghi\n", &mut out);
        assert_eq!(
            String::from_utf8(out).unwrap(),
            "2024-01-02T03:04:05.500000000Z abcdef\n2024-01-02T03:04:07.123456789+02:00 ghi\n"
        );
    }

    #[test]
    fn since_streams_and_limit_bytes_filter_and_cut() {
        let lines: [&[u8]; 3] = [
            b"2024-01-02T03:04:05Z stdout F one\n",
            b"2024-01-02T03:04:06Z stderr F two\n",
            b"2024-01-02T03:04:07Z stdout F three\n",
        ];
        let run = |opts: ReadOptions| {
            let mut w = LineWriter::new(opts);
            let mut out = vec![];
            for l in lines {
                if w.full() {
                    break;
                }
                w.push(l, &mut out);
            }
            String::from_utf8(out).unwrap()
        };
        let since = Some(ts("2024-01-02T03:04:06Z").with_timezone(&Utc));
        assert_eq!(run(ReadOptions { since, ..Default::default() }), "two\nthree\n");
        assert_eq!(run(ReadOptions { streams: Streams::Stdout, ..Default::default() }), "one\nthree\n");
        assert_eq!(run(ReadOptions { streams: Streams::Stderr, ..Default::default() }), "two\n");
        assert_eq!(run(ReadOptions { limit_bytes: Some(6), ..Default::default() }), "one\ntw");
        assert_eq!(
            run(ReadOptions { limit_bytes: Some(25), timestamps: true, ..Default::default() }),
            "2024-01-02T03:04:05.00000"
        );
    }

    async fn tail(d: &[u8], n: usize) -> String {
        let at = tail_offset(&mut std::io::Cursor::new(d.to_vec()), d.len() as u64, n).await.unwrap();
        String::from_utf8(d[at as usize..].to_vec()).unwrap()
    }

    #[tokio::test]
    async fn tail_counts_complete_lines_from_the_end() {
        let d = b"a\nb\nc\npartial";
        assert_eq!(tail(d, 1).await, "c\npartial");
        assert_eq!(tail(d, 2).await, "b\nc\npartial");
        assert_eq!(tail(d, 3).await, "a\nb\nc\npartial");
        assert_eq!(tail(d, 10).await, "a\nb\nc\npartial");
        assert_eq!(tail(d, 0).await, "");
        assert_eq!(tail(b"x\ny\n", 1).await, "y\n");
        // Across blocks: 100 000 lines of 10 bytes.
        let big: Vec<u8> = (0..100_000).flat_map(|i| format!("{i:09}\n").into_bytes()).collect();
        assert_eq!(tail(&big, 2).await, "000099998\n000099999\n");
        assert_eq!(tail(&big, 7000).await.len(), 70_000);
    }
}
