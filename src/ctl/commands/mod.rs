//! One module per `sealctl` command.

pub mod bench;
pub mod tenant;
