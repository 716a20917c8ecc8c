//! Fault drills: placeholder, filled in by this work.

mod common;
