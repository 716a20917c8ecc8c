//! Upstream's checkpoint checksum (`pkg/kubelet/checkpointmanager/checksum`): FNV-32a of go-spew's `%#v` of the
//! checkpoint (each manager spells out its own type's spew form).

/// FNV-32a, as Go's `hash/fnv.New32a`.
pub fn fnv32a(bytes: &[u8]) -> u32 {
    bytes.iter().fold(0x811c_9dc5_u32, |h, b| (h ^ u32::from(*b)).wrapping_mul(0x0100_0193))
}
