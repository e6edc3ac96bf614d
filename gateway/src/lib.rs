//! The infergate sidecar gateway: canary splits, per-caller quotas, retries, timeouts and HTTP/1.1-to-h2 bridging.
