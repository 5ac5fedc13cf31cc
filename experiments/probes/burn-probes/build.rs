//! The patches of burn-autodiff the probes are built against (`sim measure --patch NAME`
//! sets BURN_PROBES_PATCH to its label's names, `a+b` for two), as `cfg(burn_patch =
//! "NAME")`: the sizeof probe's stand-ins of burn's private structs take the fields a patch
//! adds (a stand-in with 0.22.1's fields would not measure the patched struct).
//! Unset (unpatched burn, a release): no cfg, the stand-ins are 0.22.1's.

fn main() {
    println!("cargo::rerun-if-env-changed=BURN_PROBES_PATCH");
    println!("cargo::rustc-check-cfg=cfg(burn_patch, values(any()))");
    if let Ok(patches) = std::env::var("BURN_PROBES_PATCH") {
        for name in patches.split('+').map(str::trim).filter(|n| !n.is_empty()) {
            println!("cargo::rustc-cfg=burn_patch=\"{name}\"");
        }
    }
}
