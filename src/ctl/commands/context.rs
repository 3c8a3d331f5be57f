//! `sealctl context`: named connection settings saved as JSON files.
//!
//! Operators switch between servers and identities (dev, staging, a tenant's creds) many times
//! a day; a context saves the URL, credentials file and TLS files once, and the selected one is
//! used whenever `--server` is not given. Files live in `$XDG_CONFIG_HOME/sealctl/contexts/`
//! (or `~/.config/sealctl/contexts/`), one `<name>.json` each, written 0600 because they may
//! hold a password; the selection is `sealctl/context.txt`.

use std::path::PathBuf;

use anyhow::{anyhow, bail, Context as _};
use serde::{Deserialize, Serialize};

use super::util::print_table;
use crate::ctl::args::{ConnArgs, ContextCmd};

/// The URL given on the command line, and whether it was given at all (otherwise the selected
/// context's URL wins over the built-in default).
#[derive(Debug, Clone)]
pub struct Target {
    /// `--server` (or `NATS_URL`, or the default).
    pub url: String,
    /// True when the user set `--server` or `NATS_URL`.
    pub explicit: bool,
}

/// One saved context.
#[derive(Debug, Clone, Default, Serialize, Deserialize)]
pub struct SavedContext {
    /// Context name (the file name).
    #[serde(default)]
    pub name: String,
    /// Free text.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub description: Option<String>,
    /// Server URL(s).
    #[serde(default)]
    pub url: String,
    /// `.creds` file.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub creds: Option<PathBuf>,
    /// User name.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub user: Option<String>,
    /// Password.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub password: Option<String>,
    /// CA bundle.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub tlsca: Option<PathBuf>,
    /// Client certificate.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub tlscert: Option<PathBuf>,
    /// Client key.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub tlskey: Option<PathBuf>,
}

fn config_dir() -> anyhow::Result<PathBuf> {
    if let Some(x) = std::env::var_os("XDG_CONFIG_HOME").filter(|x| !x.is_empty()) {
        return Ok(PathBuf::from(x).join("sealctl"));
    }
    let home = std::env::var_os("HOME")
        .filter(|x| !x.is_empty())
        .ok_or_else(|| anyhow!("neither XDG_CONFIG_HOME nor HOME is set"))?;
    Ok(PathBuf::from(home).join(".config").join("sealctl"))
}

fn contexts_dir() -> anyhow::Result<PathBuf> {
    Ok(config_dir()?.join("contexts"))
}

fn check_name(name: &str) -> anyhow::Result<()> {
    if name.is_empty()
        || !name
            .chars()
            .all(|c| c.is_ascii_alphanumeric() || matches!(c, '-' | '_' | '.'))
        || name.starts_with('.')
    {
        bail!("invalid context name {name:?} (letters, digits, '-', '_', '.')");
    }
    Ok(())
}

fn path_of(name: &str) -> anyhow::Result<PathBuf> {
    check_name(name)?;
    Ok(contexts_dir()?.join(format!("{name}.json")))
}

/// Loads a context by name.
///
/// # Errors
/// Unknown context, unreadable or invalid file.
pub fn load(name: &str) -> anyhow::Result<SavedContext> {
    let p = path_of(name)?;
    let text = std::fs::read_to_string(&p).map_err(|e| match e.kind() {
        std::io::ErrorKind::NotFound => anyhow!("unknown context {name:?}"),
        _ => anyhow!("read {}: {e}", p.display()),
    })?;
    let mut c: SavedContext =
        serde_json::from_str(&text).with_context(|| format!("parse {}", p.display()))?;
    c.name = name.to_owned();
    Ok(c)
}

fn selected_name() -> anyhow::Result<Option<String>> {
    let p = config_dir()?.join("context.txt");
    match std::fs::read_to_string(&p) {
        Ok(s) if !s.trim().is_empty() => Ok(Some(s.trim().to_owned())),
        Ok(_) => Ok(None),
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => Ok(None),
        Err(e) => Err(anyhow!("read {}: {e}", p.display())),
    }
}

/// The selected context, if any.
///
/// # Errors
/// The selection names a context that cannot be read.
pub fn selected() -> anyhow::Result<Option<SavedContext>> {
    match selected_name()? {
        Some(n) => load(&n).map(Some),
        None => Ok(None),
    }
}

fn write_private(path: &std::path::Path, text: &str) -> anyhow::Result<()> {
    use std::io::Write;
    use std::os::unix::fs::OpenOptionsExt;
    if let Some(dir) = path.parent() {
        std::fs::create_dir_all(dir).with_context(|| format!("create {}", dir.display()))?;
    }
    let mut f = std::fs::OpenOptions::new()
        .write(true)
        .create(true)
        .truncate(true)
        .mode(0o600)
        .open(path)
        .with_context(|| format!("write {}", path.display()))?;
    f.write_all(text.as_bytes())?;
    Ok(())
}

fn select(name: &str) -> anyhow::Result<()> {
    load(name)?;
    write_private(&config_dir()?.join("context.txt"), &format!("{name}\n"))
}

fn all() -> anyhow::Result<Vec<SavedContext>> {
    let dir = contexts_dir()?;
    let mut out = Vec::new();
    let rd = match std::fs::read_dir(&dir) {
        Ok(rd) => rd,
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Ok(out),
        Err(e) => return Err(anyhow!("read {}: {e}", dir.display())),
    };
    for ent in rd {
        let ent = ent?;
        let fname = ent.file_name().to_string_lossy().into_owned();
        if let Some(name) = fname.strip_suffix(".json") {
            if check_name(name).is_ok() {
                out.push(load(name)?);
            }
        }
    }
    out.sort_by(|a, b| a.name.cmp(&b.name));
    Ok(out)
}

fn redacted(c: &SavedContext) -> serde_json::Value {
    let mut v = serde_json::to_value(c).unwrap_or_default();
    if c.password.is_some() {
        v["password"] = "*****".into();
    }
    v
}

/// Runs a `context` command; `target` is the global `--server`.
///
/// # Errors
/// File system errors, unknown contexts.
pub fn run(target: &Target, cmd: ContextCmd) -> anyhow::Result<()> {
    match cmd {
        ContextCmd::Add {
            name,
            description,
            select: sel,
            conn,
        } => add(target, &name, description, sel, &conn),
        ContextCmd::Ls { json } => {
            let list = all()?;
            let current = selected_name()?;
            if json {
                let v: Vec<serde_json::Value> = list
                    .iter()
                    .map(|c| {
                        let mut v = redacted(c);
                        v["selected"] = (current.as_deref() == Some(c.name.as_str())).into();
                        v
                    })
                    .collect();
                println!("{}", serde_json::to_string_pretty(&v)?);
                return Ok(());
            }
            if list.is_empty() {
                println!("No contexts defined (sealctl context add NAME --server URL)");
                return Ok(());
            }
            let rows: Vec<Vec<String>> = list
                .iter()
                .map(|c| {
                    let mark = if current.as_deref() == Some(c.name.as_str()) {
                        "*"
                    } else {
                        ""
                    };
                    vec![
                        format!("{}{mark}", c.name),
                        c.url.clone(),
                        c.description.clone().unwrap_or_default(),
                    ]
                })
                .collect();
            print_table(&["Name", "Server", "Description"], &rows);
            Ok(())
        }
        ContextCmd::Select { name } => {
            select(&name)?;
            println!("Selected context {name}");
            Ok(())
        }
        ContextCmd::Info { name, json } => {
            let c = match name {
                Some(n) => load(&n)?,
                None => selected()?.ok_or_else(|| anyhow!("no context selected"))?,
            };
            if json {
                println!("{}", serde_json::to_string_pretty(&redacted(&c))?);
            } else {
                let v = redacted(&c);
                if let Some(m) = v.as_object() {
                    for (k, val) in m {
                        println!(
                            "{k}: {}",
                            val.as_str().map_or(val.to_string(), str::to_owned)
                        );
                    }
                }
            }
            Ok(())
        }
        ContextCmd::Rm { name } => {
            let p = path_of(&name)?;
            std::fs::remove_file(&p).map_err(|e| match e.kind() {
                std::io::ErrorKind::NotFound => anyhow!("unknown context {name:?}"),
                _ => anyhow!("remove {}: {e}", p.display()),
            })?;
            if selected_name()?.as_deref() == Some(name.as_str()) {
                let _ = std::fs::remove_file(config_dir()?.join("context.txt"));
            }
            println!("Removed context {name}");
            Ok(())
        }
    }
}

fn add(
    target: &Target,
    name: &str,
    description: Option<String>,
    sel: bool,
    conn: &ConnArgs,
) -> anyhow::Result<()> {
    let abs = |p: &Option<PathBuf>| -> Option<PathBuf> {
        p.as_ref()
            .map(|p| std::path::absolute(p).unwrap_or_else(|_| p.clone()))
    };
    let c = SavedContext {
        name: name.to_owned(),
        description,
        url: target.url.clone(),
        creds: abs(&conn.creds),
        user: conn.user.clone(),
        password: conn.password.clone(),
        tlsca: abs(&conn.tlsca),
        tlscert: abs(&conn.tlscert),
        tlskey: abs(&conn.tlskey),
    };
    let p = path_of(name)?;
    write_private(&p, &serde_json::to_string_pretty(&c)?)?;
    let first = selected_name()?.is_none();
    if sel || first {
        select(name)?;
    }
    println!(
        "Saved context {name} ({}){}",
        c.url,
        if sel || first { ", selected" } else { "" }
    );
    Ok(())
}
