//! Validation of the component-base parts of a [`KubeletConfiguration`]: `logging`
//! (`logsapi.Validate` and `validateFormatOptions` in
//! `staging/src/k8s.io/component-base/logs/api/v1/options.go`) and `tracing`
//! (`ValidateTracingConfiguration` in
//! `staging/src/k8s.io/component-base/tracing/api/v1/config.go`).
//!
//! The registered log formats are the kubelet's: `text` (stable) and `json`
//! (`LoggingBetaOptions`). Upstream's check that a non-text format is not combined with
//! klog flags is a command-line concern and is left to the flag parser.

use super::checks::tracing_endpoint_error;
use super::gates;
use super::quantity::quantity_is_zero;
use super::types::KubeletConfiguration;
use super::validation::Errors;

/// klog only accepts verbosities that fit in an `int32`.
const MAX_INT32: u32 = i32::MAX as u32;

impl KubeletConfiguration {
    /// `logsapi.Validate` with the kubelet's log format registry.
    pub(super) fn validate_logging(&self, errs: &mut Errors) {
        let logging = &self.logging;
        let format = logging.format.as_str();
        match format {
            "text" => {}
            "json" => {
                if self.feature_gate(gates::LOGGING_BETA_OPTIONS) == Some(false) {
                    errs.add(
                        "logging.format",
                        "logging.format: log format json is disabled, see LoggingBetaOptions feature",
                    );
                }
            }
            other => errs.add("logging.format", format_args!("logging.format {other:?}: unsupported log format")),
        }
        if logging.verbosity > MAX_INT32 {
            errs.add(
                "logging.verbosity",
                format_args!("logging.verbosity {}: must be <= {MAX_INT32}", logging.verbosity),
            );
        }
        if !logging.vmodule.is_empty() && !format.is_empty() && format != "text" {
            errs.add("logging.vmodule", "logging.vmodule: only supported for text log format");
        }
        for (i, item) in logging.vmodule.iter().enumerate() {
            let field = format!("logging.vmodule[{i}]");
            if item.file_pattern.is_empty() {
                errs.add(&field, format_args!("{field}: file pattern must not be empty"));
            }
            if item.file_pattern.contains(['=', ',']) {
                errs.add(
                    &field,
                    format_args!("{field} {:?}: file pattern must not contain equal sign or comma", item.file_pattern),
                );
            }
            if item.verbosity > MAX_INT32 {
                errs.add(&field, format_args!("{field} verbosity {}: must be <= {MAX_INT32}", item.verbosity));
            }
        }
        if self.feature_gate(gates::LOGGING_ALPHA_OPTIONS) == Some(false) {
            for (name, options) in [("text", &logging.options.text), ("json", &logging.options.json)] {
                if options.split_stream {
                    let field = format!("logging.options.{name}.splitStream");
                    errs.add(&field, format_args!("{field}: feature LoggingAlphaOptions is disabled"));
                }
                let size = options.info_buffer_size.as_str();
                if !size.is_empty() && !quantity_is_zero(size).unwrap_or(true) {
                    let field = format!("logging.options.{name}.infoBufferSize");
                    errs.add(&field, format_args!("{field} {size:?}: feature LoggingAlphaOptions is disabled"));
                }
            }
        }
    }

    /// `ValidateTracingConfiguration`.
    pub(super) fn validate_tracing(&self, errs: &mut Errors) {
        let Some(tracing) = &self.tracing else {
            return;
        };
        if let Some(rate) = tracing.sampling_rate_per_million {
            let field = "tracing.samplingRatePerMillion";
            if rate < 0 {
                errs.add(field, format_args!("{field} {rate}: sampling rate must be positive"));
            }
            if rate > 1_000_000 {
                errs.add(
                    field,
                    format_args!("{field} {rate}: sampling rate per million must be less than or equal to one million"),
                );
            }
        }
        if let Some(endpoint) = &tracing.endpoint
            && let Some(err) = tracing_endpoint_error(endpoint)
        {
            errs.add("tracing.endpoint", format_args!("tracing.endpoint {endpoint:?}: {err}"));
        }
    }
}
