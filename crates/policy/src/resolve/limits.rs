//! The limits' section: memory, processes, CPU, time, open files, `/tmp`
//! and the disk of what warden keeps, each checked against the host.

use std::time::Duration;

use crate::compose::Layer;
use crate::error::{Problem, ResolveError};
use crate::fields::Field;
use crate::{Defaults, Limit, MIB};

/// The limits resolution sizes from the host's defaults.
pub(super) struct Limits {
    pub memory: Limit<u64>,
    pub pids: Limit<u64>,
    pub open_files: u64,
    pub tmp_size: u64,
}

/// Memory, processes, CPU, time, open files and `/tmp`, each checked
/// against the host.
pub(super) fn limits(layer: &Layer, defaults: &Defaults) -> Result<Limits, ResolveError> {
    let memory = limit(layer.bytes(Field::Memory), defaults.memory);
    if memory.value < 16 * MIB {
        return Err(Field::Memory.invalid(Problem::MemoryTooSmall(memory.value)));
    }
    let pids = limit(layer.count(Field::Pids), defaults.pids);
    if pids.value < 2 {
        return Err(Field::Pids.invalid(Problem::PidsTooSmall(pids.value)));
    }
    if pids.value > defaults.pid_max {
        return Err(Field::Pids.invalid(Problem::PidsAboveKernel {
            asked: pids.value,
            max: defaults.pid_max,
        }));
    }
    if let Some(c) = layer.cores(Field::Cpus) {
        if !(c.is_finite() && c > 0.0) {
            return Err(Field::Cpus.invalid(Problem::BadCpus(c)));
        }
        if c > f64::from(defaults.host_cpus) {
            return Err(Field::Cpus.invalid(Problem::CpusAboveHost {
                asked: c,
                host: defaults.host_cpus,
            }));
        }
    }
    if layer.duration(Field::Timeout) == Some(Duration::ZERO) {
        return Err(Field::Timeout.invalid(Problem::ZeroTimeout));
    }
    let open_files = layer.count(Field::OpenFiles).unwrap_or(defaults.open_files);
    if !(16..=1 << 20).contains(&open_files) {
        return Err(Field::OpenFiles.invalid(Problem::BadOpenFiles(open_files)));
    }
    let tmp_size = layer.bytes(Field::TmpSize).unwrap_or(defaults.tmp_size);
    if tmp_size < MIB {
        return Err(Field::TmpSize.invalid(Problem::TmpTooSmall(tmp_size)));
    }
    Ok(Limits {
        memory,
        pids,
        open_files,
        tmp_size,
    })
}

/// The smallest default `--disk`.
const MIN_DEFAULT_DISK: u64 = 64 * MIB;

/// The size limit of an overlay's upper layer: `asked`, or by default half
/// of the memory limit (the layer is a tmpfs while the sandbox runs, and its
/// pages are charged to the sandbox's memory cgroup), bounded by half of
/// the state file system's free space `free` (where the layer is written
/// when the sandbox stops). An explicit size larger than the memory limit
/// or than `free` is refused: the sandbox could not get it.
pub(super) fn disk_limit(
    asked: Option<u64>,
    memory: u64,
    free: Option<u64>,
) -> Result<u64, ResolveError> {
    match asked {
        Some(0) => Err(Field::Disk.invalid(Problem::ZeroDisk)),
        Some(d) if d > memory => {
            Err(Field::Disk.invalid(Problem::DiskOverMemory { disk: d, memory }))
        }
        Some(d) => match free {
            Some(f) if d > f => {
                Err(Field::Disk.invalid(Problem::DiskOverFree { disk: d, free: f }))
            }
            _ => Ok(d),
        },
        None => {
            let d = (memory / 2).max(MIN_DEFAULT_DISK.min(memory));
            Ok(match free {
                Some(f) => d.min(f / 2).max(MIB.min(f)),
                None => d,
            })
        }
    }
}

fn limit(asked: Option<u64>, default: u64) -> Limit<u64> {
    match asked {
        Some(value) => Limit {
            value,
            explicit: true,
        },
        None => Limit {
            value: default,
            explicit: false,
        },
    }
}
