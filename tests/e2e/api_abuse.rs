//! The kubelet API under abuse: placeholder, filled in by this work.

mod common;
