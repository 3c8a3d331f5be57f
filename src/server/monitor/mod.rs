//! The HTTP monitoring port (`-m`, `http_port`, `http: host:port`).
//!
//! Endpoints keep nats-server's paths and JSON field names so existing dashboards, exporters and
//! client test harnesses read them unchanged: `/varz`, `/connz`, `/subsz`, `/routez`, `/healthz`
//! and an index at `/`. Every response is indented JSON with `Access-Control-Allow-Origin: *`;
//! a bad query value is a 400 with a plain-text reason.
//!
//! The HTTP/1.1 framing is hyper's; this module only maps paths to documents built from
//! [`Shared`](super::Shared).

mod jsz;
mod varz;

use std::collections::HashMap;
use std::convert::Infallible;
use std::sync::Arc;

use bytes::Bytes;
use http_body_util::Full;
use hyper::body::Incoming;
use hyper::server::conn::http1;
use hyper::service::service_fn;
use hyper::{Method, Request, Response, StatusCode};
use hyper_util::rt::TokioIo;
use serde_json::Value;
use tokio::net::TcpListener;
use tokio_util::sync::CancellationToken;
use tracing::debug;

use super::{listener, ServerError, Shared};

/// The host the monitoring listeners bind: `http_host`, else the client host.
pub(crate) fn host(shared: &Shared) -> &str {
    if shared.opts.http_host.is_empty() {
        &shared.opts.host
    } else {
        &shared.opts.http_host
    }
}

/// The document a system-account `$SYS.REQ.SERVER.PING.<KIND>` asks every server for (how
/// `nats server report` reads a whole cluster), built as its HTTP endpoint builds it; `None`
/// for a kind not served. `options` is the request's JSON body (nats-server's event options:
/// `{"accounts":true,"streams":true,"account":"A"}` for `JSZ`). It may wait on stream
/// workers: call it off the runtime's threads.
pub(crate) fn document(shared: &Shared, kind: &str, options: &[u8]) -> Option<Value> {
    let q = query_of(options);
    Some(match kind {
        "VARZ" => varz::varz(shared),
        "CONNZ" => varz::connz(shared, &q).unwrap_or_else(|e| serde_json::json!({ "error": e })),
        "SUBSZ" => varz::subsz(shared),
        "ROUTEZ" => varz::routez(shared, &q),
        "JSZ" => jsz::jsz(shared, &q),
        "ACCOUNTZ" => jsz::accountz(shared, &q),
        "HEALTHZ" => varz::healthz(shared, &q).1,
        _ => return None,
    })
}

/// A request body's options as the HTTP query the endpoints read: `true` for flags, the
/// value's text otherwise; the events' `account` is the endpoints' `acc`.
fn query_of(options: &[u8]) -> HashMap<String, String> {
    let Ok(Value::Object(map)) = serde_json::from_slice::<Value>(options) else {
        return HashMap::new();
    };
    map.into_iter()
        .filter_map(|(k, v)| {
            let v = match v {
                Value::Bool(false) | Value::Null => return None,
                Value::String(s) => s,
                other => other.to_string(),
            };
            let k = if k == "account" { "acc".to_owned() } else { k };
            Some((k, v))
        })
        .collect()
}

/// Binds the monitoring listener if one is configured.
pub(crate) async fn bind(shared: &Shared) -> Result<Option<TcpListener>, ServerError> {
    let Some(port) = shared.opts.http_port else {
        return Ok(None);
    };
    listener::bind(host(shared), port, "http monitoring")
        .await
        .map(Some)
}

/// Binds the HTTPS monitoring listener if `https_port` is configured.
pub(crate) async fn bind_https(shared: &Shared) -> Result<Option<TcpListener>, ServerError> {
    let Some(port) = shared.opts.https_port else {
        return Ok(None);
    };
    listener::bind(host(shared), port, "https monitoring")
        .await
        .map(Some)
}

/// Serves monitoring requests until `stop` is cancelled (over TLS when `tls` is given).
pub(crate) async fn serve(
    l: TcpListener,
    shared: Arc<Shared>,
    stop: CancellationToken,
    tls: Option<Arc<super::tls::TlsSetup>>,
) {
    loop {
        let (stream, _) = tokio::select! {
            _ = stop.cancelled() => break,
            r = l.accept() => match r {
                Ok(s) => s,
                Err(e) => {
                    debug!(error = %e, "monitor accept failed");
                    tokio::time::sleep(std::time::Duration::from_millis(50)).await;
                    continue;
                }
            },
        };
        let shared = Arc::clone(&shared);
        let tls = tls.clone();
        tokio::spawn(async move {
            let svc = service_fn(move |req| handle(Arc::clone(&shared), req));
            let result = match tls {
                None => {
                    http1::Builder::new()
                        .serve_connection(TokioIo::new(stream), svc)
                        .await
                }
                Some(tls) => {
                    match tokio::time::timeout(tls.opts.timeout, tls.acceptor().accept(stream))
                        .await
                    {
                        Ok(Ok(s)) => {
                            http1::Builder::new()
                                .serve_connection(TokioIo::new(s), svc)
                                .await
                        }
                        _ => {
                            debug!("monitor TLS handshake failed");
                            return;
                        }
                    }
                }
            };
            if let Err(e) = result {
                debug!(error = %e, "monitor connection error");
            }
        });
    }
}

type Resp = Response<Full<Bytes>>;

/// The one rule for tenants' names on the monitoring port (which has no authentication of
/// its own): account, stream, consumer and connection names are shown only when the server
/// serves a single tenant, or when the operator sets `monitor_tenant_details: true`. Every
/// endpoint (`/connz`, `/subsz`, `/accountz`, `/jsz`, `/metrics`) asks this; totals are
/// always shown.
pub(crate) fn tenant_details_allowed(shared: &Shared) -> bool {
    if shared.opts.monitor_tenant_details {
        return true;
    }
    let system = shared.system.as_ref().map(|s| s.account.name.as_str());
    let tenants = shared
        .accounts
        .names()
        .into_iter()
        .filter(|n| Some(n.as_str()) != system && n != crate::server::account::GLOBAL_ACCOUNT)
        .count();
    tenants <= 1
}

/// What hidden tenant details say instead.
pub(crate) const TENANT_DETAILS_HIDDEN: &str =
    "hidden: several tenants share this server (set monitor_tenant_details: true)";

fn respond(status: StatusCode, content_type: &str, body: impl Into<Bytes>) -> Resp {
    let mut r = Response::new(Full::new(body.into()));
    *r.status_mut() = status;
    let h = r.headers_mut();
    if let Ok(v) = content_type.parse() {
        h.insert(hyper::header::CONTENT_TYPE, v);
    }
    h.insert(
        hyper::header::ACCESS_CONTROL_ALLOW_ORIGIN,
        hyper::header::HeaderValue::from_static("*"),
    );
    r
}

fn json(status: StatusCode, v: &serde_json::Value) -> Resp {
    let body = serde_json::to_vec_pretty(v).unwrap_or_default();
    respond(status, "application/json", body)
}

fn query(req: &Request<Incoming>) -> HashMap<String, String> {
    req.uri()
        .query()
        .unwrap_or("")
        .split('&')
        .filter(|kv| !kv.is_empty())
        .map(|kv| match kv.split_once('=') {
            Some((k, v)) => (k.to_owned(), v.to_owned()),
            None => (kv.to_owned(), String::new()),
        })
        .collect()
}

async fn handle(shared: Arc<Shared>, req: Request<Incoming>) -> Result<Resp, Infallible> {
    if req.method() != Method::GET && req.method() != Method::HEAD {
        return Ok(respond(
            StatusCode::METHOD_NOT_ALLOWED,
            "text/plain",
            "method not allowed\n",
        ));
    }
    let base = shared.opts.http_base_path.trim_end_matches('/');
    let path = req.uri().path();
    let Some(path) = path.strip_prefix(base) else {
        return Ok(respond(
            StatusCode::NOT_FOUND,
            "text/plain",
            "404 page not found\n",
        ));
    };
    let path = if path.is_empty() { "/" } else { path };
    let endpoint = path.trim_end_matches('/');
    let endpoint = if endpoint.is_empty() { "/" } else { endpoint };
    {
        let mut s = shared
            .http_req_stats
            .lock()
            .unwrap_or_else(|p| p.into_inner());
        *s.entry(endpoint.to_owned()).or_insert(0) += 1;
    }
    let q = query(&req);
    let resp = match endpoint {
        "/" => respond(StatusCode::OK, "text/html; charset=utf-8", index_html(base)),
        "/varz" => json(StatusCode::OK, &varz::varz(&shared)),
        "/connz" => match varz::connz(&shared, &q) {
            Ok(v) => json(StatusCode::OK, &v),
            Err(msg) => respond(StatusCode::BAD_REQUEST, "text/plain", msg),
        },
        "/subsz" | "/subscriptionsz" => json(StatusCode::OK, &varz::subsz(&shared)),
        "/routez" => json(StatusCode::OK, &varz::routez(&shared, &q)),
        "/jsz" => {
            let sh = Arc::clone(&shared);
            let q2 = q.clone();
            match tokio::task::spawn_blocking(move || jsz::jsz(&sh, &q2)).await {
                Ok(v) => json(StatusCode::OK, &v),
                Err(_) => respond(
                    StatusCode::INTERNAL_SERVER_ERROR,
                    "text/plain",
                    "jsz failed\n",
                ),
            }
        }
        "/accountz" => json(StatusCode::OK, &jsz::accountz(&shared, &q)),
        "/metrics" => {
            let sh = Arc::clone(&shared);
            match tokio::task::spawn_blocking(move || jsz::metrics(&sh)).await {
                Ok(text) => respond(
                    StatusCode::OK,
                    "text/plain; version=0.0.4; charset=utf-8",
                    text,
                ),
                Err(_) => respond(
                    StatusCode::INTERNAL_SERVER_ERROR,
                    "text/plain",
                    "metrics failed\n",
                ),
            }
        }
        "/healthz" => {
            let (status, v) = varz::healthz(&shared, &q);
            json(status, &v)
        }
        _ => respond(StatusCode::NOT_FOUND, "text/plain", "404 page not found\n"),
    };
    Ok(resp)
}

fn index_html(base: &str) -> String {
    let links: String = [
        "varz", "connz", "subsz", "routez", "accountz", "jsz", "healthz", "metrics",
    ]
    .iter()
    .map(|p| format!("<a href=\"{base}/{p}\">{p}</a><br/>\n"))
    .collect();
    format!(
        "<html><head><title>sealstream monitoring</title></head><body>\n{links}</body></html>\n"
    )
}
