//! Reads the pod's own accounts: a Prometheus text page (`/metrics`) or a JSON admin page, fetched over
//! loopback, and the sum of one metric's series. The drills check what the gateway and the backends say
//! about a fault (a rejected config, a retry, an ejection, a rollback) beside what the clients saw.

use std::collections::BTreeMap;
use std::time::Duration;

use bytes::Bytes;
use http_body_util::{BodyExt, Empty};
use hyper_util::client::legacy::Client as HyperClient;
use hyper_util::client::legacy::connect::HttpConnector;
use hyper_util::rt::TokioExecutor;

use crate::target::Target;

/// `GET http://target/path`: the body of a 200 answer, or why there is none.
pub async fn get(target: Target, path: &str) -> Result<String, String> {
    let client: HyperClient<HttpConnector, Empty<Bytes>> =
        HyperClient::builder(TokioExecutor::new()).build(HttpConnector::new());
    let uri = format!("{}{path}", target.base_uri());
    let uri: http::Uri = uri.parse().map_err(|e| format!("{uri}: {e}"))?;
    let resp = tokio::time::timeout(Duration::from_secs(5), client.get(uri.clone()))
        .await
        .map_err(|_| format!("GET {uri}: no answer in 5 s"))?
        .map_err(|e| format!("GET {uri}: {e}"))?;
    let status = resp.status();
    let body = resp
        .into_body()
        .collect()
        .await
        .map_err(|e| format!("GET {uri}: {e}"))?
        .to_bytes();
    if !status.is_success() {
        return Err(format!("GET {uri}: status {status}"));
    }
    Ok(String::from_utf8_lossy(&body).into_owned())
}

/// The sum of the samples of `name` whose labels include every one of `labels`; 0 when there is none
/// (a counter that has not moved yet).
pub fn sum(text: &str, name: &str, labels: &BTreeMap<String, String>) -> f64 {
    text.lines()
        .filter(|l| !l.starts_with('#'))
        .filter_map(|l| {
            let (series, value) = l.rsplit_once(' ')?;
            let (metric, rest) = match series.split_once('{') {
                Some((m, rest)) => (m, rest.strip_suffix('}')?),
                None => (series, ""),
            };
            if metric != name {
                return None;
            }
            let has = |k: &str, v: &str| {
                rest.split(',')
                    .filter_map(|kv| kv.split_once('='))
                    .any(|(lk, lv)| lk.trim() == k && lv.trim().trim_matches('"') == v)
            };
            if !labels.iter().all(|(k, v)| has(k, v)) {
                return None;
            }
            value.trim().parse::<f64>().ok()
        })
        .sum()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn series_are_summed_by_name_and_labels() {
        let text = "# HELP x_total help\n# TYPE x_total counter\n\
                    x_total{route=\"a\",result=\"rejected\"} 3\n\
                    x_total{route=\"b\",result=\"rejected\"} 2\n\
                    x_total{route=\"a\",result=\"applied\"} 7\n\
                    x_total_other 100\ny 1.5\n";
        let mut labels = BTreeMap::new();
        assert_eq!(sum(text, "x_total", &labels), 12.0);
        assert_eq!(sum(text, "y", &labels), 1.5);
        labels.insert("result".to_owned(), "rejected".to_owned());
        assert_eq!(sum(text, "x_total", &labels), 5.0);
        labels.insert("route".to_owned(), "a".to_owned());
        assert_eq!(sum(text, "x_total", &labels), 3.0);
        assert_eq!(sum(text, "absent_total", &labels), 0.0);
    }
}
