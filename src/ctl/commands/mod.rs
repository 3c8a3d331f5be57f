//! One module per `sealctl` command.

pub mod bench;
