//! Dynamic resource allocation (`pkg/kubelet/cm/dra`): the kubelet's side of DRA. Today its state only:
//! [`checkpoint`], the `dra_manager_state` file in upstream's format and checksum, so claims prepared by the Go
//! kubelet are known to rkubelet after an upgrade and the reverse. The manager (claim info cache, the `DRAPlugin`
//! handler, `NodePrepareResources` / `NodeUnprepareResources`) is issue 28's next part.

pub mod checkpoint;
