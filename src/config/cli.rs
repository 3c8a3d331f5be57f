//! nats-server's command line: Go `flag`-package parsing into [`CliArgs`], and
//! [`ServerOptions::apply_cli`] to lay the flags over the configuration file.
//!
//! Go flag rules, which client test harnesses rely on: `-x` and `--x` are the same flag; a
//! value follows as the next word or after `=` (`-p 4222`, `--port=4222`, `-p -1`: the next
//! word is taken even when it starts with `-`); boolean flags take no word, only an optional
//! `=value` (`-js`, `-T=false`); parsing stops at `--` or at the first word that is not a
//! flag. Every setting in [`CliArgs`] is an `Option` (or an explicit flag list), so only what
//! was given overrides the file.

use std::path::PathBuf;

use super::cluster::{parse_route_url, RouteUrl};

use super::options::ServerOptions;
use super::tls::TlsOptions;

/// Help text for `-h` (sealstream's own wording; the flags are nats-server's).
pub const USAGE: &str = "\
Usage: sealstream-server [options]

Server:
  -a, --addr, --net <host>       Client listen address (default 0.0.0.0)
  -p, --port <port>              Client port; -1 picks a free port (default 4222)
  -n, --name, --server_name <n>  Server name, no spaces (default: the server id)
  -m, --http_port <port>         HTTP monitoring port
  -ms, --https_port <port>       HTTPS monitoring port (needs a tls block)
  -c, --config <file>            Configuration file (nats-server syntax)
  -t                             Check the configuration and exit (0 = valid)
  -P, --pid <file>               Write the process id to this file
      --ports_file_dir <dir>     Write <exe>_<pid>.ports with the listen URLs here
      --client_advertise <url>   Client URL to advertise
  -sl, --signal <cmd>[=<pid>]    Signal a running server: stop, quit, term, reopen,
                                 reload or ldm; <pid> is a pid or a pid file

Logging:
  -l, --log <file>               Log to this file instead of stderr
  -T, --logtime                  Timestamp log lines (default true; -T=false to disable)
      --logtime_utc              Timestamps in UTC
  -s, --syslog                   Log to syslog
  -r, --remote_syslog <url>      Log to a remote syslog (udp://host:514)
  -D, --debug                    Debug logging
  -V, --trace                    Trace protocol lines
  -VV                            Verbose trace (includes the system account)
  -DV                            Debug and trace
  -DVV                           Debug and verbose trace
      --log_size_limit <bytes>   Rotate the log file at this size
      --max_traced_msg_len <n>   Truncate traced messages to n bytes

JetStream:
  -js, --jetstream               Enable JetStream
  -sd, --store_dir <dir>         Storage root; data goes in <dir>/jetstream

Authorization:
      --user <user>              Single user name for all clients
      --pass <password>          Password for --user
      --auth <token>             Single token for all clients

TLS:
      --tls                      Enable TLS without client verification
      --tlscert <file>           Server certificate (PEM)
      --tlskey <file>            Server private key (PEM)
      --tlsverify                Enable TLS and require verified client certificates
      --tlscacert <file>         CA bundle for client certificates

Cluster:
      --routes <url,url>         Routes to solicit and connect
      --cluster <url>            Cluster URL for solicited routes (alias --cluster_listen)
      --cluster_name <name>      Cluster name (default: generated)
      --cluster_advertise <addr> Route address advertised to the other members
      --no_advertise             Do not advertise the other members' URLs to clients
      --connect_retries <n>      Retries for gossiped routes (default 0)

Not supported yet (accepted and ignored):
      --profile

Other:
  -h, --help                     Show this help
      --help_tls                 Show TLS help
  -v, --version                  Show the version
";

/// A `--signal` request.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct SignalRequest {
    /// What to tell the server.
    pub command: SignalCommand,
    /// A pid or a pid file, when given as `cmd=<pid>`.
    pub target: Option<String>,
}

/// The signals `--signal` can send.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum SignalCommand {
    /// Fast shutdown.
    Stop,
    /// Graceful shutdown.
    Quit,
    /// Graceful shutdown (SIGTERM).
    Term,
    /// Reopen the log file.
    Reopen,
    /// Reload the configuration.
    Reload,
    /// Enter lame-duck mode.
    Ldm,
}

/// What the command line said. `None` / `false` / empty means "not given".
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct CliArgs {
    /// `-a`, `--addr`, `--net`.
    pub host: Option<String>,
    /// `-p`, `--port`.
    pub port: Option<i32>,
    /// `-n`, `--name`, `--server_name`.
    pub server_name: Option<String>,
    /// `-m`, `--http_port`.
    pub http_port: Option<i32>,
    /// `-ms`, `--https_port`.
    pub https_port: Option<i32>,
    /// `-c`, `--config`.
    pub config_file: Option<PathBuf>,
    /// `-t`: check the configuration and exit.
    pub check_config: bool,
    /// `-P`, `--pid`.
    pub pid_file: Option<PathBuf>,
    /// `--ports_file_dir`.
    pub ports_file_dir: Option<PathBuf>,
    /// `--client_advertise`.
    pub client_advertise: Option<String>,
    /// `-sl`, `--signal`.
    pub signal: Option<SignalRequest>,
    /// `-l`, `--log`.
    pub log_file: Option<PathBuf>,
    /// `-T`, `--logtime`.
    pub logtime: Option<bool>,
    /// `--logtime_utc`.
    pub logtime_utc: Option<bool>,
    /// `-s`, `--syslog`.
    pub syslog: Option<bool>,
    /// `-r`, `--remote_syslog`.
    pub remote_syslog: Option<String>,
    /// `-D`, `--debug` (and `-DV`, `-DVV`).
    pub debug: Option<bool>,
    /// `-V`, `--trace` (and `-VV`, `-DV`, `-DVV`).
    pub trace: Option<bool>,
    /// `-VV`, `-DVV`.
    pub trace_verbose: Option<bool>,
    /// `--log_size_limit`.
    pub log_size_limit: Option<i64>,
    /// `--max_traced_msg_len`.
    pub max_traced_msg_len: Option<i64>,
    /// `-js`, `--jetstream`.
    pub jetstream: Option<bool>,
    /// `-sd`, `--store_dir`.
    pub store_dir: Option<PathBuf>,
    /// `--user`.
    pub user: Option<String>,
    /// `--pass`.
    pub password: Option<String>,
    /// `--auth`.
    pub token: Option<String>,
    /// `--tls`.
    pub tls: Option<bool>,
    /// `--tlscert`.
    pub tls_cert: Option<PathBuf>,
    /// `--tlskey`.
    pub tls_key: Option<PathBuf>,
    /// `--tlscacert`.
    pub tls_ca_cert: Option<PathBuf>,
    /// `--tlsverify`.
    pub tls_verify: Option<bool>,
    /// `-v`, `--version`.
    pub show_version: bool,
    /// `-h`, `--help`.
    pub show_help: bool,
    /// `--help_tls`.
    pub show_tls_help: bool,
    /// `--routes`: seed route URLs.
    pub routes: Option<Vec<String>>,
    /// `--cluster`, `--cluster_listen`: the route listener (`Some(None)`: clustering off).
    pub cluster_listen: Option<Option<RouteUrl>>,
    /// `--cluster_name`.
    pub cluster_name: Option<String>,
    /// `--cluster_advertise`.
    pub cluster_advertise: Option<String>,
    /// `--connect_retries`.
    pub connect_retries: Option<i64>,
    /// `--no_advertise`.
    pub no_advertise: Option<bool>,
    /// Unsupported flags that were given (`--routes`, `--profile`, ...), as `-name`.
    pub unsupported: Vec<String>,
    /// Words after `--` or after the first non-flag word.
    pub rest: Vec<String>,
}

/// A command-line error; `Display` matches Go's `flag` package messages.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[non_exhaustive]
pub enum CliError {
    /// A flag nobody defined.
    #[error("flag provided but not defined: -{0}")]
    UnknownFlag(String),
    /// A value flag at the end of the line.
    #[error("flag needs an argument: -{0}")]
    MissingValue(String),
    /// A value that does not parse.
    #[error("invalid value \"{value}\" for flag -{flag}: {reason}")]
    InvalidValue {
        /// The flag as given, without dashes.
        flag: String,
        /// The value as given.
        value: String,
        /// Why it was refused.
        reason: String,
    },
    /// `---x`, `-=x` and the like.
    #[error("bad flag syntax: {0}")]
    BadSyntax(String),
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Flag {
    Host,
    Port,
    Name,
    HttpPort,
    HttpsPort,
    Config,
    Check,
    Pid,
    PortsFileDir,
    ClientAdvertise,
    Signal,
    Log,
    Logtime,
    LogtimeUtc,
    Syslog,
    RemoteSyslog,
    Debug,
    Trace,
    VerboseTrace,
    DebugTrace,
    DebugVerboseTrace,
    LogSizeLimit,
    MaxTracedMsgLen,
    JetStream,
    StoreDir,
    User,
    Pass,
    Auth,
    Tls,
    TlsCert,
    TlsKey,
    TlsCaCert,
    TlsVerify,
    Version,
    Help,
    HelpTls,
    Routes,
    ClusterListen,
    ClusterName,
    ClusterAdvertise,
    ConnectRetries,
    NoAdvertise,
    UnsupportedValue,
}

impl Flag {
    fn is_bool(self) -> bool {
        matches!(
            self,
            Flag::Check
                | Flag::Logtime
                | Flag::LogtimeUtc
                | Flag::Syslog
                | Flag::Debug
                | Flag::Trace
                | Flag::VerboseTrace
                | Flag::DebugTrace
                | Flag::DebugVerboseTrace
                | Flag::JetStream
                | Flag::Tls
                | Flag::TlsVerify
                | Flag::Version
                | Flag::Help
                | Flag::HelpTls
                | Flag::NoAdvertise
        )
    }
}

fn lookup(name: &str) -> Option<Flag> {
    Some(match name {
        "a" | "addr" | "net" => Flag::Host,
        "p" | "port" => Flag::Port,
        "n" | "name" | "server_name" => Flag::Name,
        "m" | "http_port" => Flag::HttpPort,
        "ms" | "https_port" => Flag::HttpsPort,
        "c" | "config" => Flag::Config,
        "t" => Flag::Check,
        "P" | "pid" => Flag::Pid,
        "ports_file_dir" => Flag::PortsFileDir,
        "client_advertise" => Flag::ClientAdvertise,
        "sl" | "signal" => Flag::Signal,
        "l" | "log" => Flag::Log,
        "T" | "logtime" => Flag::Logtime,
        "logtime_utc" => Flag::LogtimeUtc,
        "s" | "syslog" => Flag::Syslog,
        "r" | "remote_syslog" => Flag::RemoteSyslog,
        "D" | "debug" => Flag::Debug,
        "V" | "trace" => Flag::Trace,
        "VV" => Flag::VerboseTrace,
        "DV" => Flag::DebugTrace,
        "DVV" => Flag::DebugVerboseTrace,
        "log_size_limit" => Flag::LogSizeLimit,
        "max_traced_msg_len" => Flag::MaxTracedMsgLen,
        "js" | "jetstream" => Flag::JetStream,
        "sd" | "store_dir" => Flag::StoreDir,
        "user" => Flag::User,
        "pass" => Flag::Pass,
        "auth" => Flag::Auth,
        "tls" => Flag::Tls,
        "tlscert" => Flag::TlsCert,
        "tlskey" => Flag::TlsKey,
        "tlscacert" => Flag::TlsCaCert,
        "tlsverify" => Flag::TlsVerify,
        "v" | "version" => Flag::Version,
        "h" | "help" => Flag::Help,
        "help_tls" => Flag::HelpTls,
        "routes" => Flag::Routes,
        "cluster" | "cluster_listen" => Flag::ClusterListen,
        "cluster_name" => Flag::ClusterName,
        "cluster_advertise" => Flag::ClusterAdvertise,
        "connect_retries" => Flag::ConnectRetries,
        "no_advertise" => Flag::NoAdvertise,
        "profile" => Flag::UnsupportedValue,
        _ => return None,
    })
}

/// Go's `strconv.ParseBool`.
fn parse_bool(flag: &str, value: &str) -> Result<bool, CliError> {
    match value {
        "1" | "t" | "T" | "true" | "TRUE" | "True" => Ok(true),
        "0" | "f" | "F" | "false" | "FALSE" | "False" => Ok(false),
        _ => Err(CliError::InvalidValue {
            flag: flag.to_string(),
            value: value.to_string(),
            reason: "parse error".into(),
        }),
    }
}

fn parse_num<T: std::str::FromStr>(flag: &str, value: &str) -> Result<T, CliError> {
    value.parse().map_err(|_| CliError::InvalidValue {
        flag: flag.to_string(),
        value: value.to_string(),
        reason: "parse error".into(),
    })
}

fn parse_signal(flag: &str, value: &str) -> Result<SignalRequest, CliError> {
    let (command, target) = match value.split_once('=') {
        Some((c, t)) => (c, Some(t.to_string())),
        None => (value, None),
    };
    let command = match command.to_ascii_lowercase().as_str() {
        "stop" => SignalCommand::Stop,
        "quit" => SignalCommand::Quit,
        "term" => SignalCommand::Term,
        "reopen" => SignalCommand::Reopen,
        "reload" => SignalCommand::Reload,
        "ldm" => SignalCommand::Ldm,
        _ => {
            return Err(CliError::InvalidValue {
                flag: flag.to_string(),
                value: value.to_string(),
                reason: "unknown signal; use stop, quit, term, reopen, reload or ldm".into(),
            })
        }
    };
    if target.as_deref() == Some("") {
        return Err(CliError::InvalidValue {
            flag: flag.to_string(),
            value: value.to_string(),
            reason: "missing pid or pid file after '='".into(),
        });
    }
    Ok(SignalRequest { command, target })
}

impl CliArgs {
    /// Parses the arguments after the program name.
    ///
    /// # Errors
    /// The first [`CliError`], worded as Go's `flag` package words it.
    pub fn parse<I, S>(args: I) -> Result<CliArgs, CliError>
    where
        I: IntoIterator<Item = S>,
        S: Into<String>,
    {
        let mut words = args.into_iter().map(Into::into);
        let mut out = CliArgs::default();
        while let Some(word) = words.next() {
            if word == "--" {
                out.rest.extend(words);
                break;
            }
            let Some(body) = word
                .strip_prefix("--")
                .or_else(|| word.strip_prefix('-'))
                .filter(|_| word.len() > 1)
            else {
                out.rest.push(word);
                out.rest.extend(words);
                break;
            };
            if body.is_empty() || body.starts_with('-') || body.starts_with('=') {
                return Err(CliError::BadSyntax(word.clone()));
            }
            let (name, inline) = match body.split_once('=') {
                Some((n, v)) => (n, Some(v.to_string())),
                None => (body, None),
            };
            let flag = lookup(name).ok_or_else(|| CliError::UnknownFlag(name.to_string()))?;
            if flag.is_bool() {
                let on = match &inline {
                    Some(v) => parse_bool(name, v)?,
                    None => true,
                };
                out.set_bool(flag, name, on);
            } else {
                let value = match inline {
                    Some(v) => v,
                    None => words
                        .next()
                        .ok_or_else(|| CliError::MissingValue(name.to_string()))?,
                };
                out.set_value(flag, name, value)?;
            }
        }
        Ok(out)
    }

    fn set_bool(&mut self, flag: Flag, name: &str, on: bool) {
        match flag {
            Flag::Check => self.check_config = on,
            Flag::Logtime => self.logtime = Some(on),
            Flag::LogtimeUtc => self.logtime_utc = Some(on),
            Flag::Syslog => self.syslog = Some(on),
            Flag::Debug => self.debug = Some(on),
            Flag::Trace => self.trace = Some(on),
            Flag::VerboseTrace => {
                self.trace = Some(on);
                self.trace_verbose = Some(on);
            }
            Flag::DebugTrace => {
                self.debug = Some(on);
                self.trace = Some(on);
            }
            Flag::DebugVerboseTrace => {
                self.debug = Some(on);
                self.trace = Some(on);
                self.trace_verbose = Some(on);
            }
            Flag::JetStream => self.jetstream = Some(on),
            Flag::Tls => self.tls = Some(on),
            Flag::TlsVerify => self.tls_verify = Some(on),
            Flag::Version => self.show_version = on,
            Flag::Help => self.show_help = on,
            Flag::HelpTls => self.show_tls_help = on,
            Flag::NoAdvertise => self.no_advertise = Some(on),
            _ => self.unsupported.push(format!("-{name}")),
        }
    }

    fn set_value(&mut self, flag: Flag, name: &str, value: String) -> Result<(), CliError> {
        match flag {
            Flag::Host => self.host = Some(value),
            Flag::Port => self.port = Some(parse_num(name, &value)?),
            Flag::Name => self.server_name = Some(value),
            Flag::HttpPort => self.http_port = Some(parse_num(name, &value)?),
            Flag::HttpsPort => self.https_port = Some(parse_num(name, &value)?),
            Flag::Config => self.config_file = Some(PathBuf::from(value)),
            Flag::Pid => self.pid_file = Some(PathBuf::from(value)),
            Flag::PortsFileDir => self.ports_file_dir = Some(PathBuf::from(value)),
            Flag::ClientAdvertise => self.client_advertise = Some(value),
            Flag::Signal => self.signal = Some(parse_signal(name, &value)?),
            Flag::Log => self.log_file = Some(PathBuf::from(value)),
            Flag::RemoteSyslog => self.remote_syslog = Some(value),
            Flag::LogSizeLimit => self.log_size_limit = Some(parse_num(name, &value)?),
            Flag::MaxTracedMsgLen => self.max_traced_msg_len = Some(parse_num(name, &value)?),
            Flag::StoreDir => self.store_dir = Some(PathBuf::from(value)),
            Flag::User => self.user = Some(value),
            Flag::Pass => self.password = Some(value),
            Flag::Auth => self.token = Some(value),
            Flag::TlsCert => self.tls_cert = Some(PathBuf::from(value)),
            Flag::TlsKey => self.tls_key = Some(PathBuf::from(value)),
            Flag::TlsCaCert => self.tls_ca_cert = Some(PathBuf::from(value)),
            Flag::Routes => {
                let routes: Vec<String> = value
                    .split(',')
                    .map(|r| r.trim().to_owned())
                    .filter(|r| !r.is_empty())
                    .collect();
                if let Some(bad) = routes.iter().find(|r| parse_route_url(r).is_none()) {
                    return Err(CliError::InvalidValue {
                        flag: name.to_string(),
                        value: value.clone(),
                        reason: format!("error parsing route url [{bad:?}]"),
                    });
                }
                self.routes = Some(routes);
            }
            Flag::ClusterListen => {
                if value.is_empty() {
                    self.cluster_listen = Some(None);
                } else {
                    let any_port = value.strip_suffix(":-1").map(|h| format!("{h}:0"));
                    let url = parse_route_url(any_port.as_deref().unwrap_or(&value)).ok_or_else(
                        || CliError::InvalidValue {
                            flag: name.to_string(),
                            value: value.clone(),
                            reason: "error parsing cluster url".into(),
                        },
                    )?;
                    if url.user.as_ref().is_some_and(|(_, p)| p.is_empty()) {
                        return Err(CliError::InvalidValue {
                            flag: name.to_string(),
                            value: value.clone(),
                            reason: "expected cluster password to be set".into(),
                        });
                    }
                    self.cluster_listen = Some(Some(url));
                }
            }
            Flag::ClusterName => self.cluster_name = Some(value),
            Flag::ClusterAdvertise => self.cluster_advertise = Some(value),
            Flag::ConnectRetries => self.connect_retries = Some(parse_num(name, &value)?),
            _ => self.unsupported.push(format!("-{name}")),
        }
        Ok(())
    }
}

impl ServerOptions {
    /// Lays the explicitly given flags over these options (flags win over the file).
    pub fn apply_cli(&mut self, args: &CliArgs) {
        fn set<T: Clone>(slot: &mut T, value: &Option<T>) {
            if let Some(v) = value {
                *slot = v.clone();
            }
        }
        fn set_some<T: Clone>(slot: &mut Option<T>, value: &Option<T>) {
            if value.is_some() {
                slot.clone_from(value);
            }
        }
        set_some(&mut self.config_file, &args.config_file);
        set(&mut self.host, &args.host);
        set(&mut self.port, &args.port);
        set_some(&mut self.server_name, &args.server_name);
        set_some(&mut self.http_port, &args.http_port);
        set_some(&mut self.https_port, &args.https_port);
        set_some(&mut self.pid_file, &args.pid_file);
        set_some(&mut self.ports_file_dir, &args.ports_file_dir);
        set_some(&mut self.client_advertise, &args.client_advertise);
        set_some(&mut self.log_file, &args.log_file);
        set(&mut self.logtime, &args.logtime);
        set(&mut self.logtime_utc, &args.logtime_utc);
        set(&mut self.syslog, &args.syslog);
        set_some(&mut self.remote_syslog, &args.remote_syslog);
        set(&mut self.debug, &args.debug);
        set(&mut self.trace, &args.trace);
        set(&mut self.trace_verbose, &args.trace_verbose);
        set(&mut self.logfile_size_limit, &args.log_size_limit);
        set(&mut self.max_traced_msg_len, &args.max_traced_msg_len);
        set(&mut self.jetstream.enabled, &args.jetstream);
        set_some(&mut self.jetstream.store_dir, &args.store_dir);
        set_some(&mut self.authorization.user, &args.user);
        set_some(&mut self.authorization.password, &args.password);
        set_some(&mut self.authorization.token, &args.token);
        self.apply_cluster_flags(args);
        let wants_tls = args.tls == Some(true)
            || args.tls_verify == Some(true)
            || args.tls_cert.is_some()
            || args.tls_key.is_some()
            || args.tls_ca_cert.is_some();
        if wants_tls {
            let tls = self.tls.get_or_insert_with(TlsOptions::default);
            set_some(&mut tls.cert_file, &args.tls_cert);
            set_some(&mut tls.key_file, &args.tls_key);
            set_some(&mut tls.ca_file, &args.tls_ca_cert);
            set(&mut tls.verify, &args.tls_verify);
        }
    }
}

impl ServerOptions {
    fn apply_cluster_flags(&mut self, args: &CliArgs) {
        let c = &mut self.cluster;
        match &args.cluster_listen {
            Some(Some(url)) => {
                c.host.clone_from(&url.host);
                c.port = if url.port == 0 {
                    -1
                } else {
                    i32::from(url.port)
                };
                if let Some((u, p)) = &url.user {
                    c.user = Some(u.clone());
                    c.password = Some(p.clone());
                }
            }
            Some(None) => c.port = 0,
            None => {}
        }
        if let Some(r) = &args.routes {
            c.routes.clone_from(r);
        }
        if args.cluster_name.is_some() {
            c.name.clone_from(&args.cluster_name);
        }
        if args.cluster_advertise.is_some() {
            c.advertise.clone_from(&args.cluster_advertise);
        }
        if let Some(n) = args.connect_retries {
            c.connect_retries = n;
        }
        if let Some(b) = args.no_advertise {
            c.no_advertise = b;
        }
    }
}

#[cfg(test)]
mod tests {
    use super::super::options::parse_str;
    use super::*;
    use std::path::Path;

    fn parse(args: &[&str]) -> CliArgs {
        CliArgs::parse(args.iter().copied()).unwrap_or_else(|e| panic!("{e}"))
    }

    fn parse_err(args: &[&str]) -> String {
        CliArgs::parse(args.iter().copied())
            .unwrap_err()
            .to_string()
    }

    #[test]
    fn single_and_double_dashes_are_the_same_flag() {
        assert_eq!(parse(&["-p", "4222"]).port, Some(4222));
        assert_eq!(parse(&["--port", "4222"]).port, Some(4222));
        assert_eq!(parse(&["--port=4222"]).port, Some(4222));
        assert_eq!(parse(&["-p=-1"]).port, Some(-1));
    }

    #[test]
    fn a_value_flag_takes_the_next_word_even_if_it_starts_with_a_dash() {
        assert_eq!(parse(&["-p", "-1"]).port, Some(-1));
        assert_eq!(parse_err(&["-p"]), "flag needs an argument: -p");
    }

    #[test]
    fn store_dir_accepts_equals_and_space_forms() {
        assert_eq!(parse(&["-sd=DIR"]).store_dir, Some(PathBuf::from("DIR")));
        assert_eq!(
            parse(&["--store_dir", "/d"]).store_dir,
            Some(PathBuf::from("/d"))
        );
    }

    #[test]
    fn boolean_flags_take_no_word_but_accept_equals_values() {
        let a = parse(&["-js", "-D", "-T=false"]);
        assert_eq!(a.jetstream, Some(true));
        assert_eq!(a.debug, Some(true));
        assert_eq!(a.logtime, Some(false));
        assert_eq!(
            parse_err(&["-T=maybe"]),
            "invalid value \"maybe\" for flag -T: parse error"
        );
    }

    #[test]
    fn trace_combinations_set_the_right_switches() {
        let a = parse(&["-DVV"]);
        assert_eq!(
            (a.debug, a.trace, a.trace_verbose),
            (Some(true), Some(true), Some(true))
        );
        let a = parse(&["-DV"]);
        assert_eq!(
            (a.debug, a.trace, a.trace_verbose),
            (Some(true), Some(true), None)
        );
        let a = parse(&["-VV"]);
        assert_eq!(
            (a.debug, a.trace, a.trace_verbose),
            (None, Some(true), Some(true))
        );
        let a = parse(&["-V"]);
        assert_eq!(
            (a.debug, a.trace, a.trace_verbose),
            (None, Some(true), None)
        );
    }

    #[test]
    fn unknown_flags_are_reported_like_go() {
        assert_eq!(parse_err(&["-x"]), "flag provided but not defined: -x");
        assert_eq!(
            parse_err(&["--bogus=1"]),
            "flag provided but not defined: -bogus"
        );
        assert_eq!(parse_err(&["---p"]), "bad flag syntax: ---p");
    }

    #[test]
    fn signals_parse_with_an_optional_pid() {
        let a = parse(&["--signal", "ldm=1234"]);
        assert_eq!(
            a.signal,
            Some(SignalRequest {
                command: SignalCommand::Ldm,
                target: Some("1234".into())
            })
        );
        let a = parse(&["-sl", "reload"]);
        assert_eq!(a.signal.unwrap().command, SignalCommand::Reload);
        assert!(parse_err(&["-sl", "explode"]).contains("unknown signal"));
    }

    #[test]
    fn clustering_flags_set_the_cluster_options() {
        let a = parse(&[
            "--routes",
            "nats://a:6222, nats-route://u:p@b:6222",
            "--cluster=nats://ru:rp@127.0.0.1:-1",
            "--cluster_name=c",
            "--no_advertise",
            "--profile",
            "6060",
        ]);
        assert_eq!(a.unsupported, ["-profile"]);
        let mut o = ServerOptions::default();
        o.apply_cli(&a);
        assert_eq!(
            o.cluster.routes,
            ["nats://a:6222", "nats-route://u:p@b:6222"]
        );
        assert_eq!((o.cluster.host.as_str(), o.cluster.port), ("127.0.0.1", -1));
        assert_eq!(o.cluster.user.as_deref(), Some("ru"));
        assert_eq!(o.cluster.name.as_deref(), Some("c"));
        assert!(o.cluster.no_advertise);
        assert!(parse_err(&["--cluster", "nats://u@h:1"]).contains("expected cluster password"));
        assert!(parse_err(&["--routes", "nats://[::1"]).contains("error parsing route url"));
    }

    #[test]
    fn parsing_stops_at_the_first_non_flag_word() {
        let a = parse(&["-D", "extra", "-p", "1"]);
        assert_eq!(a.port, None);
        assert_eq!(a.rest, ["extra", "-p", "1"]);
        let a = parse(&["--", "-p"]);
        assert_eq!(a.rest, ["-p"]);
    }

    #[test]
    fn every_documented_flag_is_accepted() {
        let a = parse(&[
            "-a",
            "127.0.0.1",
            "-n",
            "srv",
            "-m",
            "8222",
            "-ms",
            "8443",
            "-c",
            "x.conf",
            "-t",
            "-P",
            "p.pid",
            "--ports_file_dir",
            "/tmp",
            "--client_advertise",
            "h:1",
            "-l",
            "l.log",
            "--logtime_utc",
            "-s",
            "-r",
            "udp://h:514",
            "--log_size_limit",
            "100",
            "--max_traced_msg_len",
            "64",
            "--user",
            "u",
            "--pass",
            "pw",
            "--auth",
            "tok",
            "--tls",
            "--tlscert",
            "c.pem",
            "--tlskey",
            "k.pem",
            "--tlscacert",
            "ca.pem",
            "--tlsverify",
            "-v",
            "-h",
            "--help_tls",
            "--net",
            "0.0.0.0",
            "--server_name",
            "s2",
        ]);
        assert_eq!(a.host.as_deref(), Some("0.0.0.0"));
        assert_eq!(a.server_name.as_deref(), Some("s2"));
        assert_eq!(a.http_port, Some(8222));
        assert_eq!(a.https_port, Some(8443));
        assert!(a.check_config && a.show_version && a.show_help && a.show_tls_help);
        assert_eq!(a.log_size_limit, Some(100));
        assert_eq!(a.max_traced_msg_len, Some(64));
        assert_eq!(a.token.as_deref(), Some("tok"));
        assert_eq!(a.tls_verify, Some(true));
    }

    #[test]
    fn flags_override_the_file_and_only_explicit_ones_do() {
        let mut o = parse_str(
            "port: 5000\nserver_name: file\ndebug: true\njetstream { store_dir: /f }",
            Path::new("c.conf"),
        )
        .unwrap();
        o.apply_cli(&parse(&["-c", "c.conf", "-p", "14235", "-sd", "/cli"]));
        assert_eq!(o.port, 14235);
        assert_eq!(o.server_name.as_deref(), Some("file"));
        assert!(o.debug);
        assert_eq!(o.jetstream.store_dir, Some(PathBuf::from("/cli")));
        assert!(o.jetstream.enabled);
        assert_eq!(o.config_file, Some(PathBuf::from("c.conf")));
    }

    #[test]
    fn the_guide_docker_command_line_enables_jetstream_and_monitoring() {
        let mut o = ServerOptions::default();
        o.apply_cli(&parse(&["-js", "-sd", "/data", "-m", "8222"]));
        assert!(o.jetstream.enabled);
        assert_eq!(o.jetstream.store_dir, Some(PathBuf::from("/data")));
        assert_eq!(o.http_port, Some(8222));
    }

    #[test]
    fn tls_flags_build_a_tls_block() {
        let mut o = ServerOptions::default();
        o.apply_cli(&parse(&[
            "--tlsverify",
            "--tlscert",
            "c",
            "--tlskey",
            "k",
            "--tlscacert",
            "ca",
        ]));
        let t = o.tls.unwrap();
        assert!(t.verify);
        assert_eq!(t.cert_file, Some(PathBuf::from("c")));
        assert_eq!(t.ca_file, Some(PathBuf::from("ca")));
    }

    #[test]
    fn auth_flags_set_single_user_or_token() {
        let mut o = ServerOptions::default();
        o.apply_cli(&parse(&["--user", "u", "--pass", "p", "--auth", "t"]));
        assert_eq!(o.authorization.user.as_deref(), Some("u"));
        assert_eq!(o.authorization.password.as_deref(), Some("p"));
        assert_eq!(o.authorization.token.as_deref(), Some("t"));
    }

    #[test]
    fn usage_mentions_every_flag_family() {
        for flag in [
            "--port",
            "--store_dir",
            "--signal",
            "--tlsverify",
            "-DVV",
            "--routes",
        ] {
            assert!(USAGE.contains(flag), "{flag}");
        }
    }
}
