//! The exact `-ERR` texts of the NATS protocol.
//!
//! Clients match these strings (nats-py lower-cases them and closes on anything it does not
//! recognise), so they are byte-exact copies of what the reference server sends and nothing else
//! is ever sent as `-ERR`. Whether each one closes the connection is recorded next to it.

/// Unknown op, or bytes after a payload that are not CRLF. Closes.
pub const UNKNOWN_PROTOCOL_OPERATION: &str = "Unknown Protocol Operation";
/// A control line longer than `max_control_line`. Closes. (Lower case, as the reference sends it.)
pub const MAX_CONTROL_LINE_EXCEEDED: &str = "maximum control line exceeded";
/// A PUB/HPUB size above `max_payload`. Closes.
pub const MAX_PAYLOAD_VIOLATION: &str = "Maximum Payload Violation";
/// Bad or missing credentials, or any op before CONNECT on a server that requires auth. Closes.
pub const AUTHORIZATION_VIOLATION: &str = "Authorization Violation";
/// No CONNECT within the auth timeout. Closes.
pub const AUTHENTICATION_TIMEOUT: &str = "Authentication Timeout";
/// A user JWT expired while connected. Closes.
pub const USER_AUTHENTICATION_EXPIRED: &str = "User Authentication Expired";
/// The user's account JWT expired while connected. Closes.
pub const ACCOUNT_AUTHENTICATION_EXPIRED: &str = "Account Authentication Expired";
/// An account update revoked the connected user. Closes.
pub const USER_AUTHENTICATION_REVOKED: &str = "User Authentication Revoked";
/// Too many unanswered server PINGs. Closes.
pub const STALE_CONNECTION: &str = "Stale Connection";
/// CONNECT with a `protocol` other than 0 or 1. Closes.
pub const INVALID_CLIENT_PROTOCOL: &str = "invalid client protocol";
/// CONNECT asking for no_responders without headers. Closes.
pub const NO_RESPONDERS_REQUIRES_HEADERS: &str = "no responders requires headers support";
/// The server is at `max_connections`. Closes.
pub const MAX_CONNECTIONS_EXCEEDED: &str = "maximum connections exceeded";
/// The account is at its connection limit. Closes.
pub const MAX_ACCOUNT_CONNECTIONS_EXCEEDED: &str = "maximum account active connections exceeded";
/// A SUB with a malformed subject. The connection stays open.
pub const INVALID_SUBJECT: &str = "Invalid Subject";
/// A PUB to a wildcard or malformed subject in pedantic mode. The connection stays open.
pub const INVALID_PUBLISH_SUBJECT: &str = "Invalid Publish Subject";
/// A SUB past `max_subscriptions`. The connection stays open.
pub const MAX_SUBSCRIPTIONS_EXCEEDED: &str = "maximum subscriptions exceeded";

/// `Permissions Violation for Publish to "<subject>"` (connection stays open).
pub fn publish_violation(subject: &str) -> String {
    format!("Permissions Violation for Publish to \"{subject}\"")
}

/// `Permissions Violation for Publish with Reply of "<reply>"` (connection stays open).
pub fn publish_reply_violation(reply: &str) -> String {
    format!("Permissions Violation for Publish with Reply of \"{reply}\"")
}

/// `Permissions Violation for Subscription to "<subject>"[ using queue "<queue>"]`.
pub fn subscription_violation(subject: &str, queue: Option<&str>) -> String {
    match queue {
        Some(q) => {
            format!("Permissions Violation for Subscription to \"{subject}\" using queue \"{q}\"")
        }
        None => format!("Permissions Violation for Subscription to \"{subject}\""),
    }
}

/// A client dialed the route port (its CONNECT has `lang`).
pub const ROUTE_PORT_CLIENT: &str = "attempted to connect to route port";

/// A route whose CONNECT names another cluster.
pub fn cluster_name_mismatch(theirs: &str, ours: &str) -> String {
    format!("Rejecting connection, cluster name {theirs:?} does not match {ours:?}")
}
