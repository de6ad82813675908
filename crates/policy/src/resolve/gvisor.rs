//! What `isolation gvisor` cannot give, refused while the request is
//! resolved, before anything is made, with the field at fault and a
//! reason code of its own, so that every door words it (the jail's gVisor
//! backend refuses the same spec again, should one reach it).

use super::ResolveError;
use crate::error::Problem;
use crate::fields::Field;
use crate::volumes::VolumeMount;
use crate::{CacheMount, Isolation};

/// Refuse what runsc would write on the host past the sandbox's disk
/// budget: caches and volumes (its file server binds them whole), and,
/// when warden runs without root, a kept workspace layer or home (`keeps`:
/// the budget is a tmpfs of a mount namespace only root makes); and a
/// desktop, whose display is reached through a Unix socket of the
/// sandbox's tree, which a connection into runsc's sandbox cannot open.
pub(super) fn check(
    isolation: Isolation,
    rootless: bool,
    keeps: bool,
    caches: &[CacheMount],
    volumes: &[VolumeMount],
    desktop: bool,
) -> Result<(), ResolveError> {
    if isolation != Isolation::Gvisor {
        return Ok(());
    }
    if desktop {
        return Err(Field::Desktop.invalid(Problem::DesktopWithGvisor));
    }
    if !caches.is_empty() {
        return Err(Field::Caches.invalid(Problem::CachesWithGvisor));
    }
    if !volumes.is_empty() {
        return Err(Field::Volumes.invalid(Problem::VolumesWithGvisor));
    }
    if rootless && keeps {
        return Err(Field::Isolation.invalid(Problem::GvisorKeptLayerRootless));
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use crate::*;

    /// The field and reason of resolving `flags` (a command, a named
    /// sandbox's kept home, a directory of caches), rootless or not.
    fn refusal(flags: &[(Field, &str)], rootless: bool) -> Option<(Field, &'static str)> {
        let placement = Placement {
            home_dir: Some("/state/sandboxes/g/home".into()),
            cache_dir: Some("/state/caches/default".into()),
            rootless,
            ..Placement::default()
        };
        super::super::tests::refusal(flags, &placement)
    }

    #[test]
    fn caches_volumes_and_a_desktop_under_gvisor_are_refused_at_their_own_field_with_their_own_code(
    ) {
        let gvisor = (Field::Isolation, "gvisor");
        assert_eq!(
            refusal(&[gvisor, (Field::Caches, "pip")], false),
            Some((Field::Caches, "caches_with_gvisor"))
        );
        assert_eq!(
            refusal(&[gvisor, (Field::Volumes, "/srv/data:/mnt/data")], false),
            Some((Field::Volumes, "volumes_with_gvisor"))
        );
        assert_eq!(
            refusal(&[gvisor, (Field::Desktop, "true")], false),
            Some((Field::Desktop, "desktop_with_gvisor"))
        );
        // The process backend holds both within the disk budget.
        assert_eq!(refusal(&[(Field::Caches, "pip")], true), None);
    }

    #[test]
    fn a_kept_home_under_gvisor_is_refused_rootless_only_at_the_isolation() {
        let gvisor = (Field::Isolation, "gvisor");
        assert_eq!(
            refusal(&[gvisor], true),
            Some((Field::Isolation, "gvisor_kept_layer_rootless"))
        );
        assert_eq!(refusal(&[gvisor], false), None);
        assert_eq!(refusal(&[(Field::Isolation, "process")], true), None);
    }
}
