//! The sections of the daemon's configuration that its state
//! ([`crate::app::App`]) holds, as they are read: the warm pools, the
//! tokens' default quotas, how long stopped sandboxes are kept. What each
//! does is its own module's ([`crate::pools`], [`crate::quota`],
//! [`crate::retention`]), which are built on the app; these shapes depend
//! on nothing of it.

use serde::Deserialize;
use std::time::Duration;

/// One pool of the daemon's configuration.
#[derive(Debug, Clone, PartialEq, Eq, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct PoolSpec {
    /// A profile by name (`warden profile list`).
    pub profile: String,
    /// How many started sandboxes wait for a create (with `max`: the
    /// fewest).
    pub size: usize,
    /// Autoscale: the pool follows demand, keeping ready as many
    /// sandboxes as creates of its profile came within the last
    /// `window_seconds`, no fewer than `size` and no more than `max`.
    #[serde(default)]
    pub max: Option<usize>,
    /// Autoscale: how far back creates are counted (default 60 s).
    #[serde(default)]
    pub window_seconds: Option<u64>,
}

impl PoolSpec {
    /// A pool of a fixed size.
    pub fn fixed(profile: &str, size: usize) -> PoolSpec {
        PoolSpec {
            profile: profile.to_string(),
            size,
            max: None,
            window_seconds: None,
        }
    }

    /// How far back creates are counted, when the pool autoscales.
    pub fn window(&self) -> Option<Duration> {
        self.max
            .map(|_| Duration::from_secs(self.window_seconds.unwrap_or(DEFAULT_WINDOW.as_secs())))
    }

    /// How many sandboxes to keep ready after `demand` creates within
    /// the window.
    pub fn target(&self, demand: usize) -> usize {
        match self.max {
            Some(max) => demand.clamp(self.size, max.max(self.size)),
            None => self.size,
        }
    }

    /// Why this pool cannot be kept, if it cannot.
    pub fn check(&self) -> Result<(), String> {
        if self.size == 0 || self.size > MAX_POOL_SIZE {
            return Err(format!(
                "size {} is not between 1 and {MAX_POOL_SIZE}",
                self.size
            ));
        }
        if let Some(max) = self.max {
            if max < self.size || max > MAX_POOL_SIZE {
                return Err(format!(
                    "max {max} is not between size {} and {MAX_POOL_SIZE}",
                    self.size
                ));
            }
        } else if self.window_seconds.is_some() {
            return Err("window_seconds is for a pool that autoscales: give max as well".into());
        }
        if let Some(w) = self.window_seconds {
            if w == 0 || w > MAX_WINDOW.as_secs() {
                return Err(format!(
                    "window_seconds {w} is not between 1 and {}",
                    MAX_WINDOW.as_secs()
                ));
            }
        }
        Ok(())
    }
}

/// The largest pool: each waiting sandbox holds a supervisor and an init.
pub const MAX_POOL_SIZE: usize = 256;

/// How far back an autoscaled pool counts creates, unless told.
pub const DEFAULT_WINDOW: Duration = Duration::from_secs(60);

/// The longest window an autoscaled pool may count over.
pub const MAX_WINDOW: Duration = Duration::from_secs(24 * 3600);

/// The owner's default quotas for tokens whose records set none
/// (`quotas:` in the daemon's configuration).
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, serde::Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Quotas {
    /// Sandboxes one token may have at once (16 when not given).
    #[serde(default)]
    pub sandboxes: Option<u64>,
    /// Memory limits of one token's sandboxes together (eight sandboxes
    /// of the host's default when not given).
    #[serde(default, deserialize_with = "size")]
    pub memory: Option<u64>,
    /// Disk budgets of one token's sandboxes together (eight sandboxes of
    /// the host's default when not given).
    #[serde(default, deserialize_with = "size")]
    pub disk: Option<u64>,
    /// Processes and threads of one token's sandboxes together, each
    /// counted at its `resources.pids` (sixteen sandboxes of the host's
    /// default when not given).
    #[serde(default)]
    pub pids: Option<u64>,
}

impl Quotas {
    /// Zero for any of them would refuse every token's first sandbox.
    pub fn check(&self) -> Result<(), String> {
        if [self.sandboxes, self.memory, self.disk, self.pids].contains(&Some(0)) {
            return Err("quotas: sandboxes, memory, disk and pids are above 0 when given".into());
        }
        Ok(())
    }
}

fn size<'de, D: serde::Deserializer<'de>>(d: D) -> Result<Option<u64>, D::Error> {
    let text: Option<String> = serde::Deserialize::deserialize(d)?;
    text.map(|t| warden_policy::parse_size(&t).map_err(serde::de::Error::custom))
        .transpose()
}

/// The defaults: a day for a stopped sandbox, E2B's thirty days for one
/// paused to its files.
const STOPPED: Duration = Duration::from_secs(24 * 3600);
const PAUSED: Duration = Duration::from_secs(30 * 24 * 3600);
/// `retention:` in the daemon's configuration file: `{stopped: 24h,
/// paused: 30d}`; `never` keeps them.
#[derive(Debug, Clone, Copy, PartialEq, Eq, serde::Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Retention {
    /// A stopped sandbox the daemon made is removed after this long
    /// (`None`: never).
    #[serde(default = "stopped", deserialize_with = "period")]
    pub stopped: Option<Duration>,
    /// One the E2B door paused to its files, after this long.
    #[serde(default = "paused", deserialize_with = "period")]
    pub paused: Option<Duration>,
}

fn stopped() -> Option<Duration> {
    Some(STOPPED)
}

fn paused() -> Option<Duration> {
    Some(PAUSED)
}

impl Default for Retention {
    fn default() -> Self {
        Retention {
            stopped: stopped(),
            paused: paused(),
        }
    }
}

fn period<'de, D: serde::Deserializer<'de>>(d: D) -> Result<Option<Duration>, D::Error> {
    let text: String = serde::Deserialize::deserialize(d)?;
    if text == "never" {
        return Ok(None);
    }
    match warden_policy::parse_duration(&text) {
        Ok(d) if !d.is_zero() => Ok(Some(d)),
        _ => Err(serde::de::Error::custom(format!(
            "{text:?} is not a period: give one such as 30m, 24h or 30d, or never"
        ))),
    }
}
