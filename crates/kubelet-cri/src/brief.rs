//! Brief views of `ListPodSandbox` and `ListContainers` for the PLEG relist, which runs every second over every
//! sandbox and container of the node and needs only who is what and in which state.
//!
//! The messages are the CRI's own on the wire (same RPCs, same requests); the responses are decoded into these
//! types, which declare only the fields the relist reads, with the CRI's field numbers. Protobuf decoding skips
//! the others (a sandbox's labels and annotations — the pod's labels and annotations —, a container's
//! annotations, image and metadata) without allocating for them. [`crate::RemoteRuntime`] decodes them straight
//! off the wire; other runtimes get them converted from the full lists.

use std::collections::HashMap;

use crate::api;

/// The fields of a `PodSandbox` the relist reads.
#[derive(Clone, PartialEq, prost::Message)]
pub struct BriefSandbox {
    /// `id = 1`.
    #[prost(string, tag = "1")]
    pub id: String,
    /// `metadata = 2`: the pod's name, namespace and UID.
    #[prost(message, optional, tag = "2")]
    pub metadata: Option<api::PodSandboxMetadata>,
    /// `state = 3`.
    #[prost(enumeration = "api::PodSandboxState", tag = "3")]
    pub state: i32,
    /// `created_at = 4`.
    #[prost(int64, tag = "4")]
    pub created_at: i64,
}

/// The fields of a `Container` the relist reads.
#[derive(Clone, PartialEq, prost::Message)]
pub struct BriefContainer {
    /// `id = 1`.
    #[prost(string, tag = "1")]
    pub id: String,
    /// `state = 6`.
    #[prost(enumeration = "api::ContainerState", tag = "6")]
    pub state: i32,
    /// `created_at = 7`.
    #[prost(int64, tag = "7")]
    pub created_at: i64,
    /// `labels = 8`: the kubelet's pod and container identity labels.
    #[prost(map = "string, string", tag = "8")]
    pub labels: HashMap<String, String>,
}

/// `ListPodSandboxResponse` with brief items.
#[derive(Clone, PartialEq, prost::Message)]
pub struct BriefListPodSandboxResponse {
    /// `items = 1`.
    #[prost(message, repeated, tag = "1")]
    pub items: Vec<BriefSandbox>,
}

/// `ListContainersResponse` with brief items.
#[derive(Clone, PartialEq, prost::Message)]
pub struct BriefListContainersResponse {
    /// `containers = 1`.
    #[prost(message, repeated, tag = "1")]
    pub containers: Vec<BriefContainer>,
}

impl From<api::PodSandbox> for BriefSandbox {
    fn from(s: api::PodSandbox) -> Self {
        Self { id: s.id, metadata: s.metadata, state: s.state, created_at: s.created_at }
    }
}

impl From<api::Container> for BriefContainer {
    fn from(c: api::Container) -> Self {
        Self { id: c.id, state: c.state, created_at: c.created_at, labels: c.labels }
    }
}

#[cfg(test)]
mod tests {
    use prost::Message;

    use super::*;

    #[test]
    fn full_messages_decode_into_the_brief_ones() {
        let c = api::Container {
            id: "c1".into(),
            pod_sandbox_id: "s1".into(),
            state: api::ContainerState::ContainerRunning as i32,
            created_at: 42,
            labels: [("io.kubernetes.pod.uid".to_string(), "u1".to_string())].into(),
            annotations: [("io.kubernetes.container.hash".to_string(), "abc".to_string())].into(),
            image_ref: "sha256:1".into(),
            ..Default::default()
        };
        let bytes = api::ListContainersResponse { containers: vec![c.clone()] }.encode_to_vec();
        let brief = BriefListContainersResponse::decode(bytes.as_slice()).unwrap();
        assert_eq!(brief.containers, vec![BriefContainer::from(c)]);

        let s = api::PodSandbox {
            id: "s1".into(),
            metadata: Some(api::PodSandboxMetadata { name: "web".into(), uid: "u1".into(), ..Default::default() }),
            state: api::PodSandboxState::SandboxReady as i32,
            created_at: 7,
            labels: [("app".to_string(), "web".to_string())].into(),
            ..Default::default()
        };
        let bytes = api::ListPodSandboxResponse { items: vec![s.clone()] }.encode_to_vec();
        let brief = BriefListPodSandboxResponse::decode(bytes.as_slice()).unwrap();
        assert_eq!(brief.items, vec![BriefSandbox::from(s)]);
    }
}
