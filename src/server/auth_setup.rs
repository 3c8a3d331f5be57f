//! Turns the options' auth blocks into an [`Authenticator`] and creates the configured accounts.
//!
//! Precedence follows nats-server: operator mode (`operator`/`trusted_keys`) excludes the
//! `authorization`/`accounts` users; otherwise a token, or the single user/password, or the
//! users lists (global and per account).

use std::sync::Arc;

use tracing::warn;

use crate::auth::permissions::{Permissions, Rules};
use crate::auth::{Authenticator, Trust, UserEntry};
use crate::config::accounts::{Permissions as ConfigPermissions, UserConfig};
use crate::config::options::{ResolverConfig, ServerOptions};

use super::account::{Account, Registry};
use super::ServerError;

fn permissions(p: &Option<ConfigPermissions>) -> Option<Arc<Permissions>> {
    let p = p.as_ref()?;
    let rules = |r: &Option<crate::config::accounts::SubjectPermission>| {
        r.as_ref().map(|r| Rules::new(&r.allow, &r.deny))
    };
    let responses = p
        .allow_responses
        .as_ref()
        .map(|r| (u32::try_from(r.max.max(1)).unwrap_or(u32::MAX), r.expires));
    Some(Arc::new(Permissions {
        publish: rules(&p.publish),
        subscribe: rules(&p.subscribe),
        responses,
    }))
}

fn entry(u: &UserConfig, account: Option<&str>) -> UserEntry {
    UserEntry {
        user: u.user.clone(),
        password: u.password.clone(),
        nkey: u.nkey.clone(),
        account: account.map(str::to_owned).or_else(|| u.account.clone()),
        permissions: permissions(&u.permissions),
        allowed_connection_types: u.allowed_connection_types.clone(),
    }
}

/// Builds the authenticator.
///
/// # Errors
/// [`ServerError::Config`] when the operator configuration is unusable.
pub(crate) fn build(
    opts: &ServerOptions,
    registry: &Registry,
) -> Result<Authenticator, ServerError> {
    if !opts.operator.is_empty() || !opts.trusted_keys.is_empty() {
        if opts.authorization.token.is_some()
            || !opts.authorization.users.is_empty()
            || !opts.accounts.is_empty()
        {
            return Err(ServerError::Config(
                "operator mode (operator/trusted_keys) cannot be combined with authorization users or accounts".into(),
            ));
        }
        let mut trust = Trust::new(
            &opts.operator,
            &opts.trusted_keys,
            &opts.resolver_preload,
            opts.system_account.clone(),
        )
        .map_err(|e| ServerError::Config(e.to_string()))?;
        match &opts.resolver {
            None | Some(ResolverConfig::Memory) => {}
            Some(ResolverConfig::Dir { dir, .. }) => {
                trust = trust
                    .with_directory(dir)
                    .map_err(|e| ServerError::Config(e.to_string()))?;
            }
            Some(ResolverConfig::Url(u)) => {
                return Err(ServerError::Config(format!(
                    "resolver URL({u}) is not supported; use MEMORY or a directory resolver"
                )));
            }
        }
        return Ok(Authenticator::operator(trust));
    }
    let a = &opts.authorization;
    if let Some(token) = &a.token {
        return Ok(Authenticator::token(token.clone()));
    }
    let mut users = Vec::new();
    if let (Some(u), Some(p)) = (&a.user, &a.password) {
        users.push(UserEntry {
            user: Some(u.clone()),
            password: Some(p.clone()),
            ..UserEntry::default()
        });
    }
    for u in &a.users {
        users.push(entry(u, None));
    }
    for acc in &opts.accounts {
        registry.create(&acc.name);
        for u in &acc.users {
            users.push(entry(u, Some(&acc.name)));
        }
    }
    install_routes(opts, registry);
    for u in &users {
        if u.user.is_none() && u.nkey.is_none() {
            warn!("a user entry has neither a user name nor an nkey and can never log in");
        }
    }
    Ok(Authenticator::users(users, opts.no_auth_user.clone()))
}

/// Builds each account's cross-account routes from the config's exports and imports (the
/// config layer has already checked that every import names a matching, permitted export).
fn install_routes(opts: &ServerOptions, registry: &Registry) {
    use crate::config::accounts::{ExportKind, ResponseType};
    use crate::subject::filter_is_subset_of;

    use super::account::imports::{ServiceRoute, StreamRoute};

    for importer in &opts.accounts {
        let Some(importer_acc) = registry.get(&importer.name) else {
            continue;
        };
        for imp in &importer.imports {
            let Some(exporter_acc) = registry.get(&imp.account) else {
                warn!(account = %importer.name, exporter = %imp.account, "import from an unknown account ignored");
                continue;
            };
            match imp.kind {
                ExportKind::Stream => Account::add_stream_import(
                    &exporter_acc,
                    StreamRoute {
                        pattern: imp.subject.clone(),
                        importer: Arc::clone(&importer_acc),
                        prefix: imp.prefix.clone(),
                        to: imp.to.clone(),
                    },
                ),
                ExportKind::Service => {
                    let singleton = opts
                        .accounts
                        .iter()
                        .find(|a| a.name == imp.account)
                        .and_then(|a| {
                            a.exports.iter().find(|e| {
                                e.kind == ExportKind::Service
                                    && filter_is_subset_of(
                                        imp.subject.as_bytes(),
                                        e.subject.as_bytes(),
                                    )
                            })
                        })
                        .is_none_or(|e| e.response_type == ResponseType::Singleton);
                    importer_acc.routes_init().add_service(ServiceRoute {
                        local: imp.to.clone().unwrap_or_else(|| imp.subject.clone()),
                        remote: imp.subject.clone(),
                        exporter: Arc::clone(&exporter_acc),
                        singleton,
                    });
                    // The exporter needs a reply table even if it imports nothing itself.
                    exporter_acc.routes_init();
                }
            }
        }
    }
}

/// Operator mode: installs the cross-account routes an account JWT declares (its imports,
/// each checked against a matching export in the exporter's JWT), the first time a user of
/// the account logs in. Account updates rebuild them ([`reinstall_jwt_routes`]).
pub(crate) fn install_jwt_routes(
    trust: &crate::auth::Trust,
    registry: &Registry,
    account: &Arc<super::account::Account>,
) {
    if !account.claim_jwt_routes() {
        return;
    }
    add_jwt_routes(trust, registry, account);
}

/// After an account JWT update: rebuilds the JWT routes of every account that has them
/// installed — the updated account's imports may have changed, and so may the exports other
/// accounts import from it. A removed export or import stops the flow at once.
pub(crate) fn reinstall_jwt_routes(trust: &crate::auth::Trust, registry: &Registry) {
    let installed: Vec<Arc<super::account::Account>> = registry
        .names()
        .iter()
        .filter_map(|n| registry.get(n))
        .filter(|a| a.has_jwt_routes())
        .collect();
    let all: Vec<Arc<super::account::Account>> = registry
        .names()
        .iter()
        .filter_map(|n| registry.get(n))
        .collect();
    for importer in &installed {
        importer.forget_stream_imports();
        for exporter in &all {
            if let Some(r) = exporter.routes() {
                r.forget_importer(importer, Arc::ptr_eq(exporter, importer));
            }
        }
    }
    for importer in &installed {
        add_jwt_routes(trust, registry, importer);
    }
}

fn add_jwt_routes(
    trust: &crate::auth::Trust,
    registry: &Registry,
    account: &Arc<super::account::Account>,
) {
    use super::account::imports::{ServiceRoute, StreamRoute};
    use crate::subject::filter_is_subset_of;

    let Some(claims) = trust.account(&account.name) else {
        return;
    };
    for imp in &claims.nats.imports {
        let Some(exporter_claims) = trust.account(&imp.account) else {
            warn!(account = %account.name, exporter = %imp.account, "import from an unknown account ignored");
            continue;
        };
        let Some(export) = exporter_claims.nats.exports.iter().find(|e| {
            e.kind.eq_ignore_ascii_case(&imp.kind)
                && filter_is_subset_of(imp.subject.as_bytes(), e.subject.as_bytes())
        }) else {
            warn!(account = %account.name, subject = %imp.subject, "import without a matching export ignored");
            continue;
        };
        if export.token_req {
            warn!(account = %account.name, subject = %imp.subject, "import of a token-required export ignored (activation tokens are not supported)");
            continue;
        }
        let exporter = registry.create(&imp.account);
        if imp.kind.eq_ignore_ascii_case("stream") {
            Account::add_stream_import(
                &exporter,
                StreamRoute {
                    pattern: imp.subject.clone(),
                    importer: Arc::clone(account),
                    prefix: None,
                    to: imp.local_subject.clone(),
                },
            );
        } else {
            exporter.routes_init();
            let singleton = export
                .response_type
                .as_deref()
                .is_none_or(|t| t.eq_ignore_ascii_case("singleton"));
            account.routes_init().add_service(ServiceRoute {
                local: imp
                    .local_subject
                    .clone()
                    .unwrap_or_else(|| imp.subject.clone()),
                remote: imp.subject.clone(),
                exporter,
                singleton,
            });
        }
    }
}
