//! What `isolation vm` cannot hold to the sandbox's disk budget, refused
//! while the request is resolved, before anything is made, with the field
//! at fault and a reason code of its own (the VM backend refuses the same
//! spec again, should one reach it: `warden_vm::disk`).

use super::ResolveError;
use crate::error::Problem;
use crate::fields::Field;
use crate::Isolation;

/// Refuse a kept workspace layer (`keeps`: every named sandbox's) when
/// warden runs without root: the guest's writes to it are held in a tmpfs
/// of the budget that the supervisor makes detached, which only root can;
/// rootless, the VMM would write the layer on the host's disk unbounded.
pub(super) fn check(isolation: Isolation, rootless: bool, keeps: bool) -> Result<(), ResolveError> {
    if isolation == Isolation::Vm && rootless && keeps {
        return Err(Field::Isolation.invalid(Problem::VmKeptLayerRootless));
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use crate::*;

    /// The field and reason of resolving `flags` for a named sandbox
    /// (its layer kept in the state), rootless or not.
    fn refusal(flags: &[(Field, &str)], rootless: bool) -> Option<(Field, &'static str)> {
        let placement = Placement {
            workspace: Some(KeptWorkspace::Overlay(OverlayDirs {
                upper: "/state/sandboxes/v/upper".into(),
                work: "/state/sandboxes/v/work".into(),
            })),
            rootless,
            ..Placement::default()
        };
        super::super::tests::refusal(flags, &placement)
    }

    #[test]
    fn a_kept_layer_in_a_vm_is_refused_rootless_only_at_the_isolation() {
        let named = [(Field::Isolation, "vm"), (Field::Workspace, "/srv/ws")];
        assert_eq!(
            refusal(&named, true),
            Some((Field::Isolation, "vm_kept_layer_rootless"))
        );
        assert_eq!(refusal(&named, false), None);
        // The process backend holds the layer rootless too.
        assert_eq!(
            refusal(
                &[(Field::Isolation, "process"), (Field::Workspace, "/srv/ws")],
                true
            ),
            None
        );
    }
}
