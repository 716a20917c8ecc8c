//! pprof's `profile.proto` (the messages Go's `runtime/pprof` writes and `go tool pprof` reads), the fields a
//! symbolized profile needs, and a builder that interns strings, functions and locations. Profiles are written
//! gzip-compressed, as Go writes them.

use std::collections::HashMap;
use std::io::Write as _;

#[derive(Clone, PartialEq, prost::Message)]
pub struct Profile {
    #[prost(message, repeated, tag = "1")]
    pub sample_type: Vec<ValueType>,
    #[prost(message, repeated, tag = "2")]
    pub sample: Vec<Sample>,
    #[prost(message, repeated, tag = "4")]
    pub location: Vec<Location>,
    #[prost(message, repeated, tag = "5")]
    pub function: Vec<Function>,
    #[prost(string, repeated, tag = "6")]
    pub string_table: Vec<String>,
    #[prost(int64, tag = "9")]
    pub time_nanos: i64,
    #[prost(int64, tag = "10")]
    pub duration_nanos: i64,
    #[prost(message, optional, tag = "11")]
    pub period_type: Option<ValueType>,
    #[prost(int64, tag = "12")]
    pub period: i64,
    #[prost(int64, tag = "14")]
    pub default_sample_type: i64,
}

#[derive(Clone, PartialEq, prost::Message)]
pub struct ValueType {
    #[prost(int64, tag = "1")]
    pub r#type: i64,
    #[prost(int64, tag = "2")]
    pub unit: i64,
}

#[derive(Clone, PartialEq, prost::Message)]
pub struct Sample {
    #[prost(uint64, repeated, tag = "1")]
    pub location_id: Vec<u64>,
    #[prost(int64, repeated, tag = "2")]
    pub value: Vec<i64>,
}

#[derive(Clone, PartialEq, prost::Message)]
pub struct Location {
    #[prost(uint64, tag = "1")]
    pub id: u64,
    #[prost(uint64, tag = "3")]
    pub address: u64,
    #[prost(message, repeated, tag = "4")]
    pub line: Vec<Line>,
}

#[derive(Clone, PartialEq, prost::Message)]
pub struct Line {
    #[prost(uint64, tag = "1")]
    pub function_id: u64,
    #[prost(int64, tag = "2")]
    pub line: i64,
}

#[derive(Clone, PartialEq, prost::Message)]
pub struct Function {
    #[prost(uint64, tag = "1")]
    pub id: u64,
    #[prost(int64, tag = "2")]
    pub name: i64,
    #[prost(int64, tag = "3")]
    pub system_name: i64,
    #[prost(int64, tag = "4")]
    pub filename: i64,
}

/// One frame of a stack: the function's name, its file and the line; the innermost inlined call first when one
/// address stands for several.
#[derive(Clone, Debug, PartialEq, Eq, Hash)]
pub struct Frame {
    pub name: String,
    pub file: String,
    pub line: i64,
}

/// Builds a [`Profile`].
pub struct Builder {
    profile: Profile,
    strings: HashMap<String, i64>,
    functions: HashMap<(String, String), u64>,
    locations: HashMap<(u64, Vec<Frame>), u64>,
}

impl Builder {
    /// A profile whose samples carry `sample_types` (`(type, unit)`) and whose period is `period` of
    /// `period_type`.
    pub fn new(sample_types: &[(&str, &str)], period_type: (&str, &str), period: i64) -> Self {
        let mut b = Self {
            profile: Profile { string_table: vec![String::new()], period, ..Default::default() },
            strings: HashMap::from([(String::new(), 0)]),
            functions: HashMap::new(),
            locations: HashMap::new(),
        };
        for (t, u) in sample_types {
            let v = ValueType { r#type: b.string(t), unit: b.string(u) };
            b.profile.sample_type.push(v);
        }
        b.profile.period_type = Some(ValueType { r#type: b.string(period_type.0), unit: b.string(period_type.1) });
        b
    }

    /// Which sample type a viewer shows first.
    pub fn default_sample_type(&mut self, t: &str) {
        self.profile.default_sample_type = self.string(t);
    }

    fn string(&mut self, s: &str) -> i64 {
        if let Some(i) = self.strings.get(s) {
            return *i;
        }
        let i = self.profile.string_table.len() as i64;
        self.profile.string_table.push(s.to_string());
        self.strings.insert(s.to_string(), i);
        i
    }

    fn function(&mut self, name: &str, file: &str) -> u64 {
        if let Some(id) = self.functions.get(&(name.to_string(), file.to_string())) {
            return *id;
        }
        let id = self.profile.function.len() as u64 + 1;
        let (n, f) = (self.string(name), self.string(file));
        self.profile.function.push(Function { id, name: n, system_name: n, filename: f });
        self.functions.insert((name.to_string(), file.to_string()), id);
        id
    }

    /// The location of `address` standing for `frames` (innermost first); made once.
    pub fn location(&mut self, address: u64, frames: &[Frame]) -> u64 {
        let key = (address, frames.to_vec());
        if let Some(id) = self.locations.get(&key) {
            return *id;
        }
        let id = self.profile.location.len() as u64 + 1;
        let line = frames.iter().map(|f| Line { function_id: self.function(&f.name, &f.file), line: f.line }).collect();
        self.profile.location.push(Location { id, address, line });
        self.locations.insert(key, id);
        id
    }

    /// A sample: its stack (leaf first) and one value per sample type.
    pub fn sample(&mut self, location_id: Vec<u64>, value: Vec<i64>) {
        self.profile.sample.push(Sample { location_id, value });
    }

    /// The profile, gzip-compressed.
    pub fn finish(mut self, time_nanos: i64, duration_nanos: i64) -> Vec<u8> {
        self.profile.time_nanos = time_nanos;
        self.profile.duration_nanos = duration_nanos;
        let raw = prost::Message::encode_to_vec(&self.profile);
        let mut gz = flate2::write::GzEncoder::new(Vec::new(), flate2::Compression::default());
        // Writing to a Vec cannot fail.
        let _ = gz.write_all(&raw);
        gz.finish().unwrap_or_default()
    }
}

/// Decodes a gzip-compressed profile (tests and tools).
pub fn decode(gz: &[u8]) -> Result<Profile, String> {
    use std::io::Read as _;
    let mut raw = Vec::new();
    flate2::read::GzDecoder::new(gz).read_to_end(&mut raw).map_err(|e| format!("not gzip: {e}"))?;
    <Profile as prost::Message>::decode(raw.as_slice()).map_err(|e| format!("not a profile: {e}"))
}

impl Profile {
    /// The string at `i` of the table.
    pub fn str(&self, i: i64) -> &str {
        self.string_table.get(i as usize).map_or("", String::as_str)
    }

    /// The function names of a sample's stack, leaf first.
    pub fn stack(&self, s: &Sample) -> Vec<String> {
        let mut out = vec![];
        for id in &s.location_id {
            if let Some(loc) = self.location.iter().find(|l| l.id == *id) {
                for line in &loc.line {
                    if let Some(f) = self.function.iter().find(|f| f.id == line.function_id) {
                        out.push(self.str(f.name).to_string());
                    }
                }
            }
        }
        out
    }
}
