//! The command line, as runc takes it: global flags before the verb.

use clap::{Args, Parser, Subcommand};
use std::path::PathBuf;

/// Where containers' state lives when `--root` is not given.
pub const DEFAULT_ROOT: &str = "/run/warden-oci";

#[derive(Parser, Debug)]
#[command(
    name = "warden-oci",
    version,
    about = "warden as an OCI runtime: the runc command line, each container a warden sandbox"
)]
pub struct Cli {
    /// Directory for the containers' state (a warden state store)
    #[arg(long, global = true, default_value = DEFAULT_ROOT)]
    pub root: PathBuf,
    /// File that errors are written to (as well as stderr)
    #[arg(long, global = true)]
    pub log: Option<PathBuf>,
    /// Format of --log: text or json (a JSON object per line, as runc writes)
    #[arg(long, global = true, default_value = "text")]
    pub log_format: String,
    /// Accepted for runc compatibility: warden makes and names each
    /// sandbox's cgroup itself, with or without systemd
    #[arg(long, global = true)]
    pub systemd_cgroup: bool,
    /// More detail in the log
    #[arg(long, global = true)]
    pub debug: bool,
    /// Accepted for runc compatibility (rootless runs are detected)
    #[arg(long, global = true)]
    pub rootless: Option<String>,
    /// Accepted for runc compatibility (no criu: no checkpoints)
    #[arg(long, global = true)]
    pub criu: Option<String>,
    #[command(subcommand)]
    pub verb: Verb,
}

#[derive(Subcommand, Debug)]
pub enum Verb {
    /// Create a container from a bundle; its process waits for `start`
    Create(CreateArgs),
    /// Start the process of a created container
    Start { id: String },
    /// Create and start a container, and wait for it (unless --detach)
    Run(RunArgs),
    /// The container's state as OCI state JSON
    State { id: String },
    /// Send a signal to the container's process (with --all, to all of them)
    Kill {
        id: String,
        #[arg(default_value = "SIGTERM")]
        signal: String,
        #[arg(long, short = 'a')]
        all: bool,
    },
    /// Remove a container (with --force, a running one too)
    Delete {
        id: String,
        #[arg(long, short = 'f')]
        force: bool,
    },
    /// Run another process in a running container
    Exec(ExecArgs),
    /// The container's processes
    Ps {
        id: String,
        #[arg(long, short = 'f', default_value = "table")]
        format: String,
    },
    /// What this runtime supports, as OCI features JSON
    Features,
    /// Freeze the container's processes (its cgroup's freezer)
    Pause { id: String },
    /// Thaw a paused container
    Resume { id: String },
    /// Not supported: a container's limits are fixed when it is created
    Update {
        id: String,
        #[arg(long, short = 'r')]
        resources: Option<PathBuf>,
    },
    /// Not supported yet
    Events {
        id: String,
        #[arg(long)]
        stats: bool,
    },
}

#[derive(Args, Debug)]
pub struct CreateArgs {
    pub id: String,
    /// The bundle directory (holding config.json); the current directory by default
    #[arg(long, short = 'b', default_value = ".")]
    pub bundle: PathBuf,
    /// Write the PID of the process whose exit is the container's exit here
    #[arg(long)]
    pub pid_file: Option<PathBuf>,
    /// Unix socket that receives the terminal's master side
    #[arg(long)]
    pub console_socket: Option<PathBuf>,
    /// Accepted for runc compatibility
    #[arg(long)]
    pub no_pivot: bool,
    /// Accepted for runc compatibility
    #[arg(long)]
    pub no_new_keyring: bool,
    /// Accepted for runc compatibility (descriptors beyond stdio are not passed)
    #[arg(long, default_value_t = 0)]
    pub preserve_fds: u32,
}

#[derive(Args, Debug)]
pub struct RunArgs {
    #[command(flatten)]
    pub create: CreateArgs,
    /// Return once the container runs
    #[arg(long, short = 'd')]
    pub detach: bool,
}

#[derive(Args, Debug)]
pub struct ExecArgs {
    pub id: String,
    /// The process, as the `process` object of config.json
    #[arg(long, short = 'p')]
    pub process: Option<PathBuf>,
    /// Return once the process runs
    #[arg(long, short = 'd')]
    pub detach: bool,
    /// Write the PID of the process whose exit is the exec's exit here
    #[arg(long)]
    pub pid_file: Option<PathBuf>,
    /// Unix socket that receives the terminal's master side
    #[arg(long)]
    pub console_socket: Option<PathBuf>,
    /// Give the process a terminal
    #[arg(long, short = 't')]
    pub tty: bool,
    /// Working directory inside
    #[arg(long)]
    pub cwd: Option<String>,
    /// NAME=VALUE, added to the environment
    #[arg(long, short = 'e')]
    pub env: Vec<String>,
    /// The command, when no --process is given
    #[arg(trailing_var_arg = true)]
    pub command: Vec<String>,
}
