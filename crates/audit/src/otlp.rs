//! OpenTelemetry export (feature `otlp`): every event becomes one OTLP log
//! record, sent over OTLP/HTTP with the JSON encoding to
//! `ENDPOINT/v1/logs`, the path every collector serves. Records are sent in
//! batches (and whatever is left when the sink is dropped); a collector that
//! cannot be reached is reported once and never stops the sandbox.

use crate::{Event, EventSink};
use serde_json::{json, Value};

/// Records sent per request.
const BATCH: usize = 64;

/// Why the exporter cannot be set up.
#[derive(Debug, thiserror::Error)]
pub enum OtlpError {
    #[error("`otlp_endpoint` {0:?} must be an http:// URL of an OTLP/HTTP collector, e.g. http://127.0.0.1:4318 (TLS to a collector is not built in: run a local collector or a sidecar)")]
    BadEndpoint(String),
}

/// Sends events to an OTLP/HTTP collector.
pub struct OtlpSink {
    url: String,
    pending: Vec<Value>,
    failed: bool,
}

impl OtlpSink {
    pub fn new(endpoint: &str) -> Result<OtlpSink, OtlpError> {
        let trimmed = endpoint.trim_end_matches('/');
        if !trimmed.starts_with("http://") || trimmed.len() <= "http://".len() {
            return Err(OtlpError::BadEndpoint(endpoint.to_string()));
        }
        Ok(OtlpSink {
            url: format!("{trimmed}/v1/logs"),
            pending: Vec::new(),
            failed: false,
        })
    }

    fn record(event: &Event) -> Value {
        let body = serde_json::to_string(event).unwrap_or_default();
        let kind = event.kind.name();
        let denied = event.is_denial();
        json!({
            "timeUnixNano": (u128::from(event.ts_ms) * 1_000_000).to_string(),
            "severityNumber": if denied { 13 } else { 9 },
            "severityText": if denied { "WARN" } else { "INFO" },
            "body": { "stringValue": body },
            "attributes": [
                { "key": "warden.event", "value": { "stringValue": kind } },
                { "key": "warden.sandbox", "value": { "stringValue": event.sandbox } },
            ],
        })
    }

    /// The OTLP/HTTP JSON request body for `records`.
    pub fn payload(records: &[Value]) -> Value {
        json!({
            "resourceLogs": [{
                "resource": { "attributes": [
                    { "key": "service.name", "value": { "stringValue": "warden" } },
                ]},
                "scopeLogs": [{
                    "scope": { "name": "warden", "version": env!("CARGO_PKG_VERSION") },
                    "logRecords": records,
                }],
            }],
        })
    }

    fn flush(&mut self) {
        if self.pending.is_empty() {
            return;
        }
        let body = Self::payload(&self.pending).to_string();
        self.pending.clear();
        let sent = ureq::post(&self.url)
            .header("Content-Type", "application/json")
            .send(body.as_bytes());
        if let Err(e) = sent {
            if !self.failed {
                self.failed = true;
                tracing::warn!("cannot send events to {}: {e}", self.url);
            }
        }
    }
}

impl EventSink for OtlpSink {
    fn emit(&mut self, event: &Event) {
        self.pending.push(Self::record(event));
        if self.pending.len() >= BATCH {
            self.flush();
        }
    }
}

impl Drop for OtlpSink {
    fn drop(&mut self) {
        self.flush();
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::EventKind;

    #[test]
    fn events_become_otlp_log_records() {
        let e = Event {
            ts_ms: 1_700_000_000_123,
            sandbox: "sb".into(),
            kind: EventKind::Started { pid: 7 },
        };
        let p = OtlpSink::payload(&[OtlpSink::record(&e)]);
        let rec = &p["resourceLogs"][0]["scopeLogs"][0]["logRecords"][0];
        assert_eq!(rec["timeUnixNano"], "1700000000123000000");
        assert_eq!(rec["attributes"][0]["value"]["stringValue"], "started");
        assert!(rec["body"]["stringValue"]
            .as_str()
            .unwrap()
            .contains("\"pid\":7"));
    }

    #[test]
    fn denials_are_warnings() {
        let blocked = Event::now(
            "sb",
            EventKind::Secret {
                name: "TOKEN".into(),
                host: "evil.example".into(),
                action: crate::SecretAction::Blocked,
                detail: String::new(),
                reason: None,
            },
        );
        assert_eq!(OtlpSink::record(&blocked)["severityText"], "WARN");
        let started = Event::now("sb", EventKind::Started { pid: 1 });
        assert_eq!(OtlpSink::record(&started)["severityText"], "INFO");
    }

    #[test]
    fn a_bad_endpoint_is_refused() {
        assert!(OtlpSink::new("127.0.0.1:4318").is_err());
        assert!(OtlpSink::new("http://").is_err());
        assert!(OtlpSink::new("https://collector:4318").is_err());
        assert!(OtlpSink::new("http://127.0.0.1:4318/").is_ok());
    }
}
