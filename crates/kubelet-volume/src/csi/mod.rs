//! CSI drivers (`pkg/volume/csi`): their registration with the node — [`registration`] (the plugin manager's
//! `CSIPlugin` handler: versions, `NodeGetInfo`), [`nodeinfo`] (the Node's `csi.volume.kubernetes.io/nodeid`
//! annotation and topology labels, the CSINode object) and [`versions`] — and the volume plugin: [`plugin`] (inline
//! ephemeral volumes published and unpublished for pods), [`node`] (the calls of the driver's Node service with
//! upstream's error classes) and [`voldata`] (paths, handles, `vol_data.json`).

pub mod node;
pub mod nodeinfo;
pub mod plugin;
pub mod registration;
pub mod versions;
pub mod voldata;

#[cfg(test)]
mod plugin_tests;
#[cfg(test)]
mod stub;
#[cfg(test)]
mod tests;
