//! `warden selftest` and its in-sandbox probe.

use anyhow::Context;

pub fn selftest(
    only: Option<&str>,
    json: bool,
    list: bool,
    allow_degraded: bool,
    through_exec: bool,
    isolation: Option<&str>,
) -> anyhow::Result<u8> {
    if list {
        for (id, category, attack) in warden_selftest::list() {
            println!("{id:<28} {:<44} {attack}", category.label());
        }
        return Ok(0);
    }
    if let Some(o) = only {
        if !warden_selftest::list()
            .iter()
            .any(|(id, c, _)| id.starts_with(o) || c.label() == o)
        {
            anyhow::bail!("--only {o:?} matches no attack; `warden selftest --list` shows them");
        }
    }
    let exe = std::env::current_exe().context("cannot find warden's own executable")?;
    let mut flags = Vec::new();
    if allow_degraded {
        flags.push("--allow-degraded".to_string());
    }
    if through_exec {
        flags.push("--through-exec".to_string());
    }
    if let Some(i) = isolation {
        flags.extend(["--isolation".to_string(), i.to_string()]);
    }
    let weakened = warden_jail::Weakened::current();
    for (off, layer) in [
        (weakened.seccomp, "seccomp"),
        (weakened.landlock, "landlock"),
    ] {
        if off {
            eprintln!("warden: TEST BUILD: the {layer} layer is OFF (WARDEN_TEST_WEAKEN) in every sandbox of this selftest");
        }
    }
    let report = warden_jail::host::probe();
    let lab = warden_selftest::Lab::new(exe, flags)?;
    let outcomes = warden_selftest::run(&lab, only, &mut |o| {
        if !json {
            println!(
                "{:<9} {:<28} {} — {}",
                match o.result {
                    "contained" => "contained",
                    "escaped" => "ESCAPED",
                    _ => "skipped",
                },
                o.id,
                o.attack,
                o.detail
            );
        }
    });
    let degraded: Vec<String> = report
        .checks
        .iter()
        .filter(|c| !c.ok)
        .map(|c| format!("{}: {}", c.name, c.detail))
        .collect();
    let escaped = outcomes.iter().filter(|o| o.escaped()).count();
    let skipped = outcomes.iter().filter(|o| o.result == "skipped").count();
    let contained = outcomes.len() - escaped - skipped;
    if json {
        println!(
            "{}",
            warden_audit::json::to_string_pretty(&serde_json::json!({
                "attacks": outcomes,
                "contained": contained,
                "escaped": escaped,
                "skipped": skipped,
                "degraded": degraded,
            }))?
        );
    } else {
        println!();
        println!(
            "{:<44} {:>9} {:>8} {:>8}",
            "category", "contained", "escaped", "skipped"
        );
        let mut seen = Vec::new();
        for o in &outcomes {
            if seen.contains(&o.category) {
                continue;
            }
            seen.push(o.category);
            let of = |r: &str| {
                outcomes
                    .iter()
                    .filter(|x| x.category == o.category && x.result == r)
                    .count()
            };
            println!(
                "{:<44} {:>9} {:>8} {:>8}",
                o.category.label(),
                of("contained"),
                of("escaped"),
                of("skipped")
            );
        }
        println!(
            "{:<44} {:>9} {:>8} {:>8}",
            "all", contained, escaped, skipped
        );
        for d in &degraded {
            println!("degraded on this host: {d}");
        }
        if escaped == 0 && skipped == 0 {
            println!("every attack was contained");
        } else if escaped == 0 {
            println!("no attack escaped; {skipped} were not tried (see why above)");
        } else {
            println!("{escaped} attack(s) ESCAPED");
        }
    }
    Ok(if escaped == 0 { 0 } else { 1 })
}
