//! The committed development key set (`keys/dev-insecure`) still works: a server started from
//! its `server.conf` admits both users, and the role template applies.
#![allow(clippy::unwrap_used, reason = "test code: a panic is a failed test")]

mod support;

use std::time::Duration;

use futures::StreamExt;
use support::{repo_path, TestServer};

#[tokio::test]
async fn dev_key_set_admits_its_users_with_their_permissions() {
    let conf = std::fs::read_to_string(repo_path("keys/dev-insecure/server.conf")).unwrap();
    let s = TestServer::with_config(&conf);
    let users = repo_path("keys/dev-insecure/accounts/DEMO/users");
    let app = async_nats::ConnectOptions::with_credentials_file(users.join("app.creds"))
        .await
        .unwrap()
        .connect(s.url())
        .await
        .unwrap();
    let svc = async_nats::ConnectOptions::with_credentials_file(users.join("orders-svc.creds"))
        .await
        .unwrap()
        .connect(s.url())
        .await
        .unwrap();
    let mut orders = svc.subscribe("orders.new").await.unwrap();
    support::sync(&svc).await;
    app.publish("orders.new", "o-1".into()).await.unwrap();
    app.flush().await.unwrap();
    let m = tokio::time::timeout(Duration::from_secs(5), orders.next())
        .await
        .unwrap()
        .unwrap();
    assert_eq!(m.payload, "o-1".as_bytes());
}
