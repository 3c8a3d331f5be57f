//! One module per `sealctl` command.

pub mod audit;
pub mod bench;
pub mod conn;
pub mod consumer;
pub mod context;
pub mod kv;
pub mod msg;
pub mod server;
pub mod stream;
pub mod tenant;
pub mod util;
