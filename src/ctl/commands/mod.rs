//! One module per `sealctl` command.

pub mod audit;
pub mod bench;
pub mod tenant;
