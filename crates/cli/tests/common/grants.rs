//! The owner's grant a token's sandboxes are held to in the grant tests:
//! profile `withbind`, binding a planted host directory read-only, and
//! the owner taking the bind back out of it.
#![allow(dead_code, clippy::unwrap_used, clippy::expect_used, clippy::panic)]

use super::daemon::json;
use super::TempDir;
use std::path::{Path, PathBuf};

/// What the secret file of [`team_data`] holds: a sandbox that prints it
/// read the host's directory.
pub const SECRET: &str = "GRANTED-ONCE-ONLY";

/// A state directory for a daemon, a host directory `teamdata` in it
/// holding `secret.txt` ([`SECRET`]), and the owner's configuration
/// directory (for `XDG_CONFIG_HOME`) whose profile `withbind` binds it.
pub struct TeamData {
    pub state: TempDir,
    pub data: PathBuf,
    pub config: PathBuf,
}

impl TeamData {
    pub fn plant(tag: &str) -> TeamData {
        let state = TempDir::new(tag);
        let data = state.path().join("teamdata");
        std::fs::create_dir_all(&data).unwrap();
        std::fs::write(data.join("secret.txt"), format!("{SECRET}\n")).unwrap();
        let config = state.path().join("config");
        profile_binding(&config, &data);
        TeamData {
            state,
            data,
            config,
        }
    }

    /// An exec body that prints the secret file when it can be read.
    pub fn read(&self) -> String {
        format!(
            r#"{{"shell":"cat {}/secret.txt; true"}}"#,
            self.data.display()
        )
    }
}

/// The owner's catalogue with profile `withbind` binding `dir` read-only.
pub fn profile_binding(config: &Path, dir: &Path) {
    let profiles = config.join("warden/profiles");
    std::fs::create_dir_all(&profiles).unwrap();
    std::fs::write(
        profiles.join("withbind.yaml"),
        format!(
            "description: the team's data, read-only\nfilesystem:\n  read_only: [\"{}\"]\n",
            dir.display()
        ),
    )
    .unwrap();
}

/// The owner takes the bind out of profile `withbind`.
pub fn profile_without_bind(config: &Path) {
    std::fs::write(
        config.join("warden/profiles/withbind.yaml"),
        "description: the team's profile, without the data now\n",
    )
    .unwrap();
}

/// The `stdout` of an exec's answer.
pub fn stdout_of(b: &str) -> String {
    json(b)["stdout"].as_str().unwrap_or_default().to_string()
}
