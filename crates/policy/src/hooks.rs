//! Switches only a test may turn, as one typed value: [`TestHooks`].
//!
//! Tests of warden's binaries need to weaken a layer (to prove that
//! `warden selftest` notices), shorten the wait of a question, force the
//! copy that replaces an overlay, or pin what the host's resolver answers.
//! Library code never reads these from the environment: a binary reads them
//! once, at the top of its `main` ([`TestHooks::from_vars`]), installs them
//! ([`TestHooks::install`]), and the code that honours one asks
//! [`TestHooks::current`], or is handed them by its caller where that is
//! cheap: the egress proxy takes them in its `Hooks`, from the runtime
//! that starts it, and reads nothing itself. A release build has none: `from_vars` gives the
//! empty value whatever the environment says, so a release binary cannot be
//! weakened by anyone who can set its environment.

use std::sync::OnceLock;
use std::time::Duration;

/// The environment variables a debug build's binary reads into
/// [`TestHooks`], and what each does.
pub const VARS: &[(&str, &str)] = &[
    (
        "WARDEN_TEST_WEAKEN",
        "a comma list of layers switched off in every sandbox: `seccomp`, `landlock`",
    ),
    (
        "WARDEN_TEST_ASK_TIMEOUT_MS",
        "how long a question of the ask desk waits, in milliseconds",
    ),
    (
        "WARDEN_TEST_NO_OVERLAY",
        "set: an overlay workspace is a copy, as on a kernel without overlayfs in user namespaces",
    ),
    (
        "WARDEN_TEST_RESOLVE",
        "names the egress proxy resolves as given (`NAME=IP,...`), not through the host",
    ),
    (
        "WARDEN_TEST_ASK_LOOPBACK",
        "set: a name an answer allowed may resolve to a loopback address",
    ),
    (
        "WARDEN_TEST_VM_TOOLS",
        "the only directories (`:` separated) the VM backend looks for its image tools in",
    ),
    (
        "WARDEN_TEST_SUPERVISOR_CONNECTIONS",
        "how many connections a sandbox's supervisor serves before its bound (not those kept back for a stop)",
    ),
];

/// What a test switched on. The default is what every release build has:
/// nothing.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct TestHooks {
    /// No seccomp filter in the sandbox.
    pub weaken_seccomp: bool,
    /// No Landlock ruleset in the sandbox.
    pub weaken_landlock: bool,
    /// How long a question waits instead of the desk's two minutes.
    pub ask_timeout: Option<Duration>,
    /// An overlay workspace is made as a copy.
    pub no_overlay: bool,
    /// The egress proxy's pinned answers, as written (`NAME=IP,...`); the
    /// proxy parses them.
    pub resolve: Option<String>,
    /// A name an answer allowed may resolve to a loopback address.
    pub ask_loopback: bool,
    /// The only directories the VM backend looks for `mkfs.erofs` and
    /// `mkfs.ext4` in (`:` separated), to play a host without them.
    pub vm_tools: Option<String>,
    /// The supervisor's connection bound, lowered so that a test fills it
    /// with a few commands instead of hundreds.
    pub supervisor_connections: Option<usize>,
}

static INSTALLED: OnceLock<TestHooks> = OnceLock::new();
static NONE: TestHooks = TestHooks {
    weaken_seccomp: false,
    weaken_landlock: false,
    ask_timeout: None,
    no_overlay: false,
    resolve: None,
    ask_loopback: false,
    vm_tools: None,
    supervisor_connections: None,
};

impl TestHooks {
    /// The hooks `get` (a binary's environment) asks for, in a debug build;
    /// none in a release build, whatever `get` says.
    pub fn from_vars(get: impl Fn(&str) -> Option<String>) -> TestHooks {
        if !cfg!(debug_assertions) {
            return TestHooks::default();
        }
        let weaken = get("WARDEN_TEST_WEAKEN").unwrap_or_default();
        let weakened = |layer: &str| weaken.split(',').any(|x| x.trim() == layer);
        TestHooks {
            weaken_seccomp: weakened("seccomp"),
            weaken_landlock: weakened("landlock"),
            ask_timeout: get("WARDEN_TEST_ASK_TIMEOUT_MS")
                .and_then(|v| v.trim().parse::<u64>().ok())
                .map(Duration::from_millis),
            no_overlay: get("WARDEN_TEST_NO_OVERLAY").is_some(),
            resolve: get("WARDEN_TEST_RESOLVE"),
            ask_loopback: get("WARDEN_TEST_ASK_LOOPBACK").is_some(),
            vm_tools: get("WARDEN_TEST_VM_TOOLS"),
            supervisor_connections: get("WARDEN_TEST_SUPERVISOR_CONNECTIONS")
                .and_then(|v| v.trim().parse::<usize>().ok())
                .filter(|n| *n > 0),
        }
    }

    /// Make these the hooks of this process, once, before any sandbox
    /// exists. A second call changes nothing and says so (`false`).
    pub fn install(self) -> bool {
        INSTALLED.set(self).is_ok()
    }

    /// The hooks installed in this process; none when its binary installed
    /// none (a library's own tests, a release build).
    pub fn current() -> &'static TestHooks {
        INSTALLED.get().unwrap_or(&NONE)
    }

    /// Is any hook on?
    pub fn any(&self) -> bool {
        *self != TestHooks::default()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn vars(pairs: &'static [(&'static str, &'static str)]) -> impl Fn(&str) -> Option<String> {
        move |name| {
            pairs
                .iter()
                .find(|(n, _)| *n == name)
                .map(|(_, v)| v.to_string())
        }
    }

    #[test]
    fn a_debug_build_reads_each_hook_and_nothing_else() {
        let h = TestHooks::from_vars(vars(&[
            ("WARDEN_TEST_WEAKEN", "landlock, other"),
            ("WARDEN_TEST_ASK_TIMEOUT_MS", "250"),
            ("WARDEN_TEST_NO_OVERLAY", ""),
            ("WARDEN_TEST_RESOLVE", "a.test=127.0.0.1"),
            ("WARDEN_WEAKEN", "seccomp"),
        ]));
        if !cfg!(debug_assertions) {
            assert!(!h.any(), "a release build reads no hook");
            return;
        }
        assert_eq!(
            h,
            TestHooks {
                weaken_seccomp: false,
                weaken_landlock: true,
                ask_timeout: Some(Duration::from_millis(250)),
                no_overlay: true,
                resolve: Some("a.test=127.0.0.1".into()),
                ask_loopback: false,
                vm_tools: None,
                supervisor_connections: None,
            }
        );
        assert!(h.any());
        assert!(!TestHooks::from_vars(vars(&[])).any());
    }

    #[test]
    fn every_variable_read_is_listed() {
        let read = std::cell::RefCell::new(Vec::new());
        TestHooks::from_vars(|name| {
            read.borrow_mut().push(name.to_string());
            None
        });
        let mut read = read.into_inner();
        read.sort();
        let mut listed: Vec<String> = VARS.iter().map(|(n, _)| n.to_string()).collect();
        listed.sort();
        assert_eq!(read, listed);
    }
}
