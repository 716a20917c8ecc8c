//! Typed CRI errors: tonic status codes are mapped here and nowhere else.

use thiserror::Error;

/// Result of a CRI call.
pub type CriResult<T> = Result<T, CriError>;

/// Why a CRI call failed.
#[derive(Debug, Clone, Error, PartialEq, Eq)]
pub enum CriError {
    /// The object does not exist (gRPC NotFound).
    #[error("cri {op}: not found: {message}")]
    NotFound {
        /// The CRI method.
        op: &'static str,
        /// The runtime's message.
        message: String,
    },
    /// The runtime cannot be reached (no socket, connection refused, runtime restarting).
    #[error("cri {op}: runtime unavailable: {message}; is the container runtime running?")]
    Unavailable {
        /// The CRI method.
        op: &'static str,
        /// The transport's message.
        message: String,
    },
    /// The call took longer than `runtimeRequestTimeout`.
    #[error("cri {op}: timed out after {seconds}s")]
    DeadlineExceeded {
        /// The CRI method.
        op: &'static str,
        /// The timeout.
        seconds: u64,
    },
    /// The runtime does not implement the method.
    #[error("cri {op}: not implemented by the runtime")]
    Unimplemented {
        /// The CRI method.
        op: &'static str,
    },
    /// Any other failure reported by the runtime.
    #[error("cri {op}: {code}: {message}")]
    Other {
        /// The CRI method.
        op: &'static str,
        /// The gRPC code, as text.
        code: String,
        /// The runtime's message.
        message: String,
    },
}

impl CriError {
    /// Whether the object did not exist.
    pub fn is_not_found(&self) -> bool {
        matches!(self, CriError::NotFound { .. })
    }

    /// Whether the runtime could not be reached (worth a retry with back-off).
    pub fn is_unavailable(&self) -> bool {
        matches!(self, CriError::Unavailable { .. } | CriError::DeadlineExceeded { .. })
    }

    /// The runtime's own message.
    pub fn message(&self) -> String {
        match self {
            CriError::NotFound { message, .. }
            | CriError::Unavailable { message, .. }
            | CriError::Other { message, .. } => message.clone(),
            other => other.to_string(),
        }
    }

    /// Maps a gRPC status of method `op`.
    pub fn from_status(op: &'static str, status: tonic::Status) -> Self {
        let message = status.message().to_string();
        match status.code() {
            tonic::Code::NotFound => CriError::NotFound { op, message },
            tonic::Code::Unavailable => CriError::Unavailable { op, message },
            tonic::Code::Unimplemented => CriError::Unimplemented { op },
            tonic::Code::Unknown if message.contains("transport error") || message.contains("connect") => {
                CriError::Unavailable { op, message }
            }
            code => CriError::Other { op, code: format!("{code:?}"), message },
        }
    }

    /// The gRPC status code's name (`NotFound`, `Unavailable`, ...).
    pub fn code(&self) -> &str {
        match self {
            CriError::NotFound { .. } => "NotFound",
            CriError::Unavailable { .. } => "Unavailable",
            CriError::DeadlineExceeded { .. } => "DeadlineExceeded",
            CriError::Unimplemented { .. } => "Unimplemented",
            CriError::Other { code, .. } => code.as_str(),
        }
    }

    /// The error as Go's gRPC client prints it (`rpc error: code = NotFound desc = ...`), as upstream puts it in
    /// events and container statuses.
    pub fn grpc_text(&self) -> String {
        format!("rpc error: code = {} desc = {}", self.code(), self.message())
    }

    /// The tonic status this error stands for (for the gRPC adapter of the fake).
    pub fn to_status(&self) -> tonic::Status {
        match self {
            CriError::NotFound { message, .. } => tonic::Status::not_found(message.clone()),
            CriError::Unavailable { message, .. } => tonic::Status::unavailable(message.clone()),
            CriError::DeadlineExceeded { .. } => tonic::Status::deadline_exceeded(self.to_string()),
            CriError::Unimplemented { .. } => tonic::Status::unimplemented(self.to_string()),
            CriError::Other { message, .. } => tonic::Status::unknown(message.clone()),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn status_codes_map_to_kinds() {
        assert!(CriError::from_status("ContainerStatus", tonic::Status::not_found("x")).is_not_found());
        assert!(CriError::from_status("Version", tonic::Status::unavailable("refused")).is_unavailable());
        let e = CriError::from_status("CreateContainer", tonic::Status::internal("boom"));
        assert_eq!(e.to_string(), "cri CreateContainer: Internal: boom");
    }
}
