//! An OCI image built here, for containerd to import: one layer of a
//! tree the test made, as an OCI image layout in a tar (`ctr images
//! import` reads it; no registry involved).

use super::text;
use std::path::{Path, PathBuf};
use std::process::Command;

/// The image layout of `tree` as one layer, named `name`, with `config`
/// as its image configuration's `config` (its `Env`, `Cmd` or
/// `Entrypoint`), made under `work`; the tar's path.
pub fn layout_tar(tree: &Path, work: &Path, name: &str, config: serde_json::Value) -> PathBuf {
    let layout = work.join("layout");
    let blobs = layout.join("blobs/sha256");
    std::fs::create_dir_all(&blobs).unwrap();
    let layer = work.join("layer.tar");
    assert!(Command::new("tar")
        .args(["--numeric-owner", "--owner=0", "--group=0", "-C"])
        .arg(tree)
        .arg("-cf")
        .arg(&layer)
        .arg(".")
        .status()
        .unwrap()
        .success());
    let put = |path: &Path| -> (String, u64) {
        let o = Command::new("sha256sum").arg(path).output().unwrap();
        let d = text(&o.stdout)
            .split_whitespace()
            .next()
            .unwrap()
            .to_string();
        std::fs::copy(path, blobs.join(&d)).unwrap();
        (d, std::fs::metadata(path).unwrap().len())
    };
    let (layer_d, layer_n) = put(&layer);
    let config = serde_json::json!({
        "architecture": "amd64", "os": "linux",
        "config": config,
        "rootfs": {"type": "layers", "diff_ids": [format!("sha256:{layer_d}")]}
    });
    std::fs::write(work.join("config.json"), config.to_string()).unwrap();
    let (config_d, config_n) = put(&work.join("config.json"));
    let manifest = serde_json::json!({
        "schemaVersion": 2,
        "mediaType": "application/vnd.oci.image.manifest.v1+json",
        "config": {"mediaType": "application/vnd.oci.image.config.v1+json", "digest": format!("sha256:{config_d}"), "size": config_n},
        "layers": [{"mediaType": "application/vnd.oci.image.layer.v1.tar", "digest": format!("sha256:{layer_d}"), "size": layer_n}]
    });
    std::fs::write(work.join("manifest.json"), manifest.to_string()).unwrap();
    let (manifest_d, manifest_n) = put(&work.join("manifest.json"));
    let index = serde_json::json!({
        "schemaVersion": 2,
        "manifests": [{"mediaType": "application/vnd.oci.image.manifest.v1+json",
            "digest": format!("sha256:{manifest_d}"), "size": manifest_n,
            "annotations": {"io.containerd.image.name": name, "org.opencontainers.image.ref.name": "1"}}]
    });
    std::fs::write(layout.join("index.json"), index.to_string()).unwrap();
    std::fs::write(
        layout.join("oci-layout"),
        "{\"imageLayoutVersion\":\"1.0.0\"}",
    )
    .unwrap();
    let out = work.join("image.tar");
    assert!(Command::new("tar")
        .arg("-C")
        .arg(&layout)
        .arg("-cf")
        .arg(&out)
        .arg(".")
        .status()
        .unwrap()
        .success());
    out
}
