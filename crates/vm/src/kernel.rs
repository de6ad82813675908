//! The guest kernel: a distribution kernel image with its modules, found
//! where the person put it (`WARDEN_VM_KERNEL`) or where `.ci/run` and the
//! documented step unpack the distribution's kernel package
//! (`<vm dir>/kernel`, the root of `dpkg-deb -x linux-image-*.deb`).

use std::path::{Path, PathBuf};

/// Why no guest kernel could be used.
#[derive(Debug, thiserror::Error)]
pub enum KernelError {
    #[error("no guest kernel: set WARDEN_VM_KERNEL to a vmlinuz, or unpack the distribution's kernel package (the one linux-image-amd64 depends on) into {dir}; `warden vm kernel` says how and can fetch and unpack it")]
    NotFound { dir: PathBuf },
    #[error("the guest kernel {path} is not readable")]
    Unreadable {
        path: PathBuf,
        #[source]
        source: std::io::Error,
    },
    #[error("the guest kernel {image} has no modules directory {modules}: unpack the whole kernel package (its lib/modules), or set WARDEN_VM_MODULES")]
    NoModules { image: PathBuf, modules: PathBuf },
    #[error("cannot tell the release of the guest kernel {0}: name it vmlinuz-RELEASE")]
    NoRelease(PathBuf),
}

/// Where the guest kernel came from.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum KernelSource {
    /// `WARDEN_VM_KERNEL`.
    Given,
    /// The unpacked distribution package in warden's VM directory.
    Unpacked,
}

/// A kernel image and the modules built with it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct GuestKernel {
    pub image: PathBuf,
    /// `lib/modules/RELEASE` of the same package.
    pub modules: PathBuf,
    pub release: String,
    pub source: KernelSource,
}

/// warden's directory for the VM backend: `$WARDEN_VM_DIR`, else `vm` in
/// the state directory.
pub fn vm_dir() -> Option<PathBuf> {
    if let Some(d) = &crate::Settings::current().dir {
        return Some(d.clone());
    }
    crate::state_dir().map(|d| d.join("vm"))
}

/// The guest kernel to boot.
pub fn find() -> Result<GuestKernel, KernelError> {
    let dir = vm_dir()
        .unwrap_or_else(|| PathBuf::from("/var/lib/warden/vm"))
        .join("kernel");
    if let Some(image) = &crate::Settings::current().kernel {
        return describe(image, KernelSource::Given);
    }
    let boot = dir.join("boot");
    let mut images: Vec<PathBuf> = std::fs::read_dir(&boot)
        .map(|entries| {
            entries
                .flatten()
                .map(|e| e.path())
                .filter(|p| {
                    p.file_name()
                        .and_then(|n| n.to_str())
                        .is_some_and(|n| n.starts_with("vmlinuz-"))
                })
                .collect()
        })
        .unwrap_or_default();
    images.sort();
    match images.pop() {
        Some(image) => describe(&image, KernelSource::Unpacked),
        None => Err(KernelError::NotFound { dir }),
    }
}

fn describe(image: &Path, source: KernelSource) -> Result<GuestKernel, KernelError> {
    std::fs::File::open(image).map_err(|source| KernelError::Unreadable {
        path: image.to_path_buf(),
        source,
    })?;
    let release = image
        .file_name()
        .and_then(|n| n.to_str())
        .and_then(|n| n.strip_prefix("vmlinuz-"))
        .filter(|r| !r.is_empty())
        .ok_or_else(|| KernelError::NoRelease(image.to_path_buf()))?
        .to_string();
    let modules = match &crate::Settings::current().modules {
        Some(m) => m.clone(),
        None => {
            // boot/vmlinuz-R beside lib/modules/R in the unpacked package
            // (or the host's own /lib/modules/R for an installed kernel).
            let root = image
                .parent()
                .and_then(Path::parent)
                .unwrap_or(Path::new("/"));
            root.join("lib/modules").join(&release)
        }
    };
    if !modules.is_dir() {
        return Err(KernelError::NoModules {
            image: image.to_path_buf(),
            modules,
        });
    }
    Ok(GuestKernel {
        image: image.to_path_buf(),
        modules,
        release,
        source,
    })
}
