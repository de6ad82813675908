//! Resource exhaustion: processes, memory, disk and time past the limits
//! a sandbox was given.
use crate::lab::{from_run, Attack, Verdict};
use crate::probes::{arg, contained, errno_name, escaped, Finding, Probe};
use crate::Category;
use std::io::Write;
use std::time::Duration;

pub(crate) fn attacks() -> Vec<Attack> {
    vec![
        // ---- resource exhaustion ----
        (
            "res.fork-bomb",
            Category::Resources,
            "fork without end (under --pids 64)",
            |lab| {
                let r = lab.sandbox(
                    &["--pids", "64", "--timeout", "30s"],
                    "fork-bomb",
                    &["5000"],
                );
                from_run(&r)
            },
        ),
        (
            "res.memory",
            Category::Resources,
            "allocate without end (under --memory 64M)",
            |lab| {
                let r = lab.sandbox(
                    &["--memory", "64M", "--timeout", "30s"],
                    "memory-hog",
                    &["512"],
                );
                if r.status == Some(137) {
                    return Verdict::Contained("killed at the memory limit (exit 137)".into());
                }
                from_run(&r)
            },
        ),
        (
            "res.fill-tmp",
            Category::Resources,
            "fill /tmp (under --tmp-size 8M)",
            |lab| {
                from_run(&lab.sandbox(
                    &["--tmp-size", "8M", "--timeout", "30s"],
                    "fill-disk",
                    &["/tmp/fill", "64"],
                ))
            },
        ),
        (
            "res.file-size",
            Category::Resources,
            "write a huge file (under --file-size 2M)",
            |lab| {
                let ws = lab.dir.join("fsize");
                let _ = std::fs::create_dir_all(&ws);
                from_run(&lab.sandbox(
                    &[
                        "--file-size",
                        "2M",
                        "-w",
                        &ws.to_string_lossy(),
                        "--timeout",
                        "30s",
                    ],
                    "fill-disk",
                    &["/workspace/big", "16"],
                ))
            },
        ),
        (
            "res.fill-layer",
            Category::Resources,
            "fill a reviewable workspace's layer (under --disk 8M), which warden keeps on the host",
            fill_layer,
        ),
        (
            "res.user-quota",
            Category::Resources,
            "take every inotify instance, which the kernel also charges to the namespace's owner on the host",
            user_quota,
        ),
        (
            "res.run-forever",
            Category::Resources,
            "spin past the deadline (under --timeout 1s)",
            |lab| {
                let r = lab.sandbox(&["--timeout", "1s"], "spin", &[]);
                if r.status == Some(124) && r.elapsed < Duration::from_secs(10) {
                    Verdict::Contained(format!(
                        "killed at the deadline after {:.1}s (exit 124)",
                        r.elapsed.as_secs_f64()
                    ))
                } else {
                    Verdict::Escaped(format!(
                        "status {:?} after {:.1}s",
                        r.status,
                        r.elapsed.as_secs_f64()
                    ))
                }
            },
        ),
    ]
}

/// The sandbox writes 64 MiB into an overlay workspace whose layer warden
/// keeps on the host within `--disk 8M`: the write must stop inside, and
/// what warden keeps of the layer afterwards must stay within the limit.
fn fill_layer(lab: &crate::Lab) -> Verdict {
    let (ws, state) = (lab.dir.join("layer-ws"), lab.dir.join("layer-state"));
    for dir in [&ws, &state] {
        if let Err(e) = std::fs::create_dir_all(dir) {
            return Verdict::Skipped(format!("cannot make {}: {e}", dir.display()));
        }
    }
    let flags: Vec<String> = [
        "--overlay",
        "-w",
        &ws.to_string_lossy(),
        "--disk",
        "8M",
        "--timeout",
        "30s",
    ]
    .iter()
    .map(|s| s.to_string())
    .collect();
    let mut command = lab.command(
        &flags,
        "fill-disk",
        &["/workspace/fill".to_string(), "64".to_string()],
    );
    command.env("WARDEN_STATE_DIR", &state);
    let start = std::time::Instant::now();
    let r = match command.spawn() {
        Ok(child) => crate::lab::Lab::finish(child, start),
        Err(e) => return Verdict::Skipped(format!("cannot start warden: {e}")),
    };
    if r.finding.is_none() && r.stderr.contains("--disk") {
        return Verdict::Skipped(format!(
            "this host cannot hold a --disk limit: {}",
            r.stderr.lines().last().unwrap_or("")
        ));
    }
    let kept = disk_used(&state);
    if kept > 16 << 20 {
        return Verdict::Escaped(format!(
            "warden kept {} MiB of the sandbox's layer on the host under --disk 8M",
            kept >> 20
        ));
    }
    match from_run(&r) {
        Verdict::Contained(d) => {
            Verdict::Contained(format!("{d}; warden kept {} KiB of its layer", kept >> 10))
        }
        other => other,
    }
}

/// The disk space the files beneath `dir` take (their blocks).
fn disk_used(dir: &std::path::Path) -> u64 {
    use std::os::unix::fs::MetadataExt;
    let Ok(entries) = std::fs::read_dir(dir) else {
        return 0;
    };
    entries
        .flatten()
        .map(|e| match e.metadata() {
            Ok(m) if m.is_dir() => disk_used(&e.path()),
            Ok(m) => m.blocks() * 512,
            Err(_) => 0,
        })
        .sum()
}

/// The sandbox takes inotify instances until the kernel refuses, says so
/// in a file of a host directory bound into it and holds them; meanwhile
/// a host process of warden's own user asks for one. The sandbox may be
/// refused early; the host must not be.
///
/// The directory is bound with `--rw`, not as the workspace: through exec
/// the workspace is a layer whose writes reach the host directory only
/// when the sandbox stops, so the host never learnt in time that the
/// sandbox was holding its instances (the attack was skipped after the
/// judge's 25 s). A `--rw` bind (see [`crate::lab::Lab::shared_dir`]) is
/// the host directory itself, through a run and an exec alike.
fn user_quota(lab: &crate::Lab) -> Verdict {
    let ws = match lab.shared_dir("user-quota") {
        Ok(dir) => dir,
        Err(e) => return Verdict::Skipped(format!("cannot make its directory: {e}")),
    };
    let marker = ws.join("holding");
    let watched = marker.clone();
    let judge = std::thread::spawn(move || {
        let deadline = std::time::Instant::now() + Duration::from_secs(25);
        while std::time::Instant::now() < deadline {
            if watched.exists() {
                // The host's own request, made while the sandbox holds all
                // it could take.
                return Some(
                    nix::sys::inotify::Inotify::init(nix::sys::inotify::InitFlags::IN_CLOEXEC)
                        .map(drop),
                );
            }
            std::thread::sleep(Duration::from_millis(20));
        }
        None
    });
    let r = lab.sandbox(
        &["--rw", &ws.to_string_lossy(), "--timeout", "30s"],
        "inotify-hog",
        &[&marker.to_string_lossy(), "3"],
    );
    match judge.join() {
        Ok(Some(Ok(()))) => match from_run(&r) {
            Verdict::Contained(d) => {
                Verdict::Contained(format!("{d}; a host process still got one"))
            }
            other => other,
        },
        Ok(Some(Err(e))) => Verdict::Escaped(format!(
            "while the sandbox held its inotify instances, a host process of warden's user could get none ({})",
            errno_name(e)
        )),
        _ => match from_run(&r) {
            Verdict::Escaped(d) => Verdict::Escaped(d),
            _ => Verdict::Skipped(format!(
                "the sandbox never said it held its instances: {}",
                r.stderr.lines().last().unwrap_or("")
            )),
        },
    }
}

pub(crate) const PROBES: &[Probe] = &[
    Probe {
        name: "inotify-hog",
        harmful: true,
        run: inotify_hog,
    },
    Probe {
        name: "fork-bomb",
        harmful: true,
        run: fork_bomb,
    },
    Probe {
        name: "memory-hog",
        harmful: true,
        run: memory_hog,
    },
    Probe {
        name: "fill-disk",
        harmful: true,
        run: fill_disk,
    },
    Probe {
        name: "spin",
        harmful: true,
        run: spin,
    },
];

fn fork_bomb(args: &[String]) -> Finding {
    let limit: u32 = arg(args, 0).parse().unwrap_or(10_000);
    let mut made = 0u32;
    let mut failed = None;
    while made < limit {
        match warden_jail::probes::fork_sleeper(30) {
            Ok(_) => made += 1,
            Err(e) => {
                failed = Some(e);
                break;
            }
        }
    }
    match failed {
        Some(e) => contained(format!(
            "fork failed after {made} processes: {}",
            errno_name(e)
        )),
        None => escaped(format!("made {made} processes without a limit")),
    }
}

fn memory_hog(args: &[String]) -> Finding {
    let mb: usize = arg(args, 0).parse().unwrap_or(1024);
    let mut held: Vec<Vec<u8>> = Vec::new();
    for _ in 0..mb {
        let mut chunk = Vec::new();
        if chunk.try_reserve_exact(1 << 20).is_err() {
            return contained(format!("allocation failed after {} MiB", held.len()));
        }
        chunk.resize(1 << 20, 1u8);
        held.push(chunk);
    }
    escaped(format!("held {mb} MiB"))
}

fn fill_disk(args: &[String]) -> Finding {
    let mb: usize = arg(args, 1).parse().unwrap_or(64);
    let path = arg(args, 0);
    // A file size limit must be an error the probe reports, not its death.
    warden_jail::probes::ignore_sigxfsz();
    let mut f = match std::fs::File::create(path) {
        Ok(f) => f,
        Err(e) => return contained(format!("create {path}: {e}")),
    };
    let block = vec![0x5au8; 1 << 20];
    for i in 0..mb {
        if let Err(e) = f.write_all(&block).and_then(|()| f.sync_data()) {
            return contained(format!("write stopped after {i} MiB: {e}"));
        }
    }
    escaped(format!("wrote {mb} MiB to {path}"))
}

fn spin(_: &[String]) -> Finding {
    loop {
        std::hint::spin_loop();
    }
}

/// Take inotify instances until refused, write how many to `args[0]`, and
/// hold them `args[1]` seconds.
fn inotify_hog(args: &[String]) -> Finding {
    let marker = arg(args, 0);
    let hold: u64 = arg(args, 1).parse().unwrap_or(3);
    let mut held = Vec::new();
    let refused = loop {
        if held.len() >= 1_000_000 {
            break None;
        }
        match nix::sys::inotify::Inotify::init(nix::sys::inotify::InitFlags::IN_CLOEXEC) {
            Ok(i) => held.push(i),
            Err(e) => break Some(e),
        }
    };
    let _ = std::fs::write(marker, held.len().to_string());
    std::thread::sleep(Duration::from_secs(hold));
    match refused {
        Some(e) => contained(format!(
            "took {} inotify instances, then {}",
            held.len(),
            errno_name(e)
        )),
        None => escaped(format!(
            "took {} inotify instances without a limit",
            held.len()
        )),
    }
}
