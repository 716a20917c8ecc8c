//! CSI drivers (`pkg/volume/csi`): their registration with the node — [`registration`] (the plugin manager's
//! `CSIPlugin` handler: versions, `NodeGetInfo`), [`nodeinfo`] (the Node's `csi.volume.kubernetes.io/nodeid`
//! annotation and topology labels, the CSINode object) and [`versions`] — and the volume plugin: [`plugin`] (inline
//! ephemeral volumes published and unpublished for pods; with `stage.rs`, PersistentVolumes staged once per node),
//! [`persistent`] (a pod's claim resolved to its PersistentVolume), [`node`] (the calls of the driver's Node service with
//! upstream's error classes) and [`voldata`] (paths, handles, `vol_data.json`).

pub mod block;
pub mod node;
pub mod nodeinfo;
pub mod persistent;
pub mod plugin;
pub mod registration;
mod stage;
pub mod versions;
pub mod voldata;

#[cfg(test)]
mod persistent_tests;
#[cfg(test)]
mod plugin_tests;
#[cfg(test)]
mod stub;
#[cfg(test)]
mod tests;
