//! Dynamic resource allocation (`pkg/kubelet/cm/dra`): the kubelet's side of DRA. Today its groundwork only:
//! [`checkpoint`], the `dra_manager_state` file in upstream's format and checksum, so claims prepared by the Go
//! kubelet are known to rkubelet after an upgrade and the reverse, and [`plugin`], which gRPC service a driver is
//! spoken to through (the API is `kubelet_proto::dra`). The manager (claim info cache, the `DRAPlugin` handler,
//! `NodePrepareResources` / `NodeUnprepareResources`) is issue 28's next part; nothing calls these yet.

pub mod checkpoint;
pub mod plugin;
