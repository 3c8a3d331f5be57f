//! A tenant's client over TLS with NATS JWT credentials: the end of the onboarding flow.
//!
//! ```sh
//! # operator side (once)
//! sealctl operator init && sealctl account add TENANT && sealctl user add TENANT app
//! sealctl server config > tenants.conf        # plus a tls { cert_file, key_file } block
//! sealstream-server -c tenants.conf
//! # tenant side
//! cargo run --example tls_tenant -- --url tls://127.0.0.1:4222 \
//!     --creds sealstream-keys/accounts/TENANT/users/app.creds --ca ca.pem
//! ```

use std::path::PathBuf;

use futures::StreamExt;

struct Args {
    url: String,
    creds: PathBuf,
    ca: Option<PathBuf>,
}

fn args() -> Result<Args, String> {
    let mut url = "tls://127.0.0.1:4222".to_owned();
    let (mut creds, mut ca) = (None, None);
    let mut it = std::env::args().skip(1);
    while let Some(a) = it.next() {
        let mut value = || it.next().ok_or_else(|| format!("{a} needs a value"));
        match a.as_str() {
            "--url" => url = value()?,
            "--creds" => creds = Some(PathBuf::from(value()?)),
            "--ca" => ca = Some(PathBuf::from(value()?)),
            other => return Err(format!("unknown argument {other}")),
        }
    }
    Ok(Args {
        url,
        creds: creds.ok_or("--creds is required")?,
        ca,
    })
}

#[tokio::main]
async fn main() -> Result<(), async_nats::Error> {
    let a = args()
        .map_err(|e| format!("{e}\nusage: tls_tenant --url URL --creds FILE [--ca ca.pem]"))?;
    let mut opts = async_nats::ConnectOptions::with_credentials_file(a.creds)
        .await?
        .require_tls(true);
    if let Some(ca) = a.ca {
        opts = opts.add_root_certificates(ca);
    }
    let client = opts.connect(&a.url).await?;
    println!("connected over TLS as {:?}", client.server_info().client_id);
    let mut sub = client.subscribe("tenant.hello").await?;
    client
        .publish("tenant.hello", "sealed in transit".into())
        .await?;
    client.flush().await?;
    if let Some(m) = sub.next().await {
        println!("{}: {}", m.subject, String::from_utf8_lossy(&m.payload));
    }
    Ok(())
}
