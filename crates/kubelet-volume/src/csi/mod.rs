//! CSI drivers (`pkg/volume/csi`): today their registration with the node — [`registration`] (the plugin manager's
//! `CSIPlugin` handler: versions, `NodeGetInfo`), [`nodeinfo`] (the Node's `csi.volume.kubernetes.io/nodeid`
//! annotation and topology labels, the CSINode object) and [`versions`] — and the groundwork of the volume plugin:
//! [`node`] (`NodePublishVolume` / `NodeUnpublishVolume` with upstream's error classes) and [`voldata`] (paths,
//! handles, `vol_data.json`). The volume manager's CSI part that uses them is issue 29's next part.

pub mod node;
pub mod nodeinfo;
pub mod registration;
pub mod versions;
pub mod voldata;

#[cfg(test)]
mod tests;
