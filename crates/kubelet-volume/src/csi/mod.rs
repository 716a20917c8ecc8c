//! CSI drivers (`pkg/volume/csi`): today their registration with the node — [`registration`] (the plugin manager's
//! `CSIPlugin` handler: versions, `NodeGetInfo`), [`nodeinfo`] (the Node's `csi.volume.kubernetes.io/nodeid`
//! annotation and topology labels, the CSINode object) and [`versions`]. Staging and publishing volumes come with
//! the volume manager's CSI part (issue 29's next parts).

pub mod nodeinfo;
pub mod registration;
pub mod versions;

#[cfg(test)]
mod tests;
