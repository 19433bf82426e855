//! Layer switches for the mutation check (`scripts/mutation`): a test-only
//! build (`--features mutation`) in which `CAPSULE_MUTATE=LAYER[,LAYER...]`
//! removes that layer from the prepared run while every report (result JSON,
//! `check`, `doctor`, the audit record) still claims it. The check then runs
//! the escape tests against such a build and requires some test to fail: a
//! layer whose removal no test notices is a protection no test proves.
//!
//! Fork safety: the variable is read here, in the parent, while the layers
//! are prepared ([`apply`], the last step of `sandbox::prepare`, and
//! [`removed`] where Landlock plans its scopes); nothing between clone and
//! exec reads the environment.
//!
//! Without the feature (every default and release build) [`apply`] returns
//! its argument and [`removed`] is `false`: the switches do not exist. A
//! release build with the feature does not compile.

#[cfg(all(feature = "mutation", not(debug_assertions)))]
compile_error!(
    "the `mutation` feature is for test builds only: it must never be in a release build"
);

use super::Layers;

/// One layer that enforces a protection (README, "Threat model").
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[cfg_attr(not(feature = "mutation"), allow(dead_code))]
pub enum Layer {
    /// Landlock, whole: filesystem rules, TCP rules, scopes.
    Landlock,
    /// Landlock's signal scope (ABI 6+), the rest of Landlock kept.
    SignalScope,
    /// Landlock's abstract Unix socket scope (ABI 6+).
    UnixScope,
    /// The main seccomp program (the syscall allowlist and argument checks).
    Seccomp,
    /// The seccomp user-notification guards (signals, network, processes,
    /// memfd, metadata) and the truncate guard.
    Guards,
    /// The view's mounts (the read-only host, private /tmp, /dev/shm,
    /// /proc, the covered /etc secrets); the namespaces are kept.
    View,
    /// The run's network namespace (the pid namespace and the view kept):
    /// the run is on the host's network with the program made for its own
    /// loopback (IP sockets allowed).
    Netns,
    /// Every namespace (pid, and with it the view and the network
    /// namespace: capsule makes them in one clone under `CLONE_NEWPID`, and
    /// dropping only that flag would turn init's `kill(-1)` on the host).
    Pidns,
    /// The rlimits (cpu_seconds, max_file_size_mb, max_open_files, and
    /// memory_mb / max_processes where they are the mechanism).
    Rlimits,
    /// The run's cgroup (memory_mb and max_processes where a cgroup holds them).
    Cgroup,
}

/// Every layer with its name in `CAPSULE_MUTATE`.
#[cfg_attr(not(feature = "mutation"), allow(dead_code))]
pub const LAYERS: &[(&str, Layer)] = &[
    ("landlock", Layer::Landlock),
    ("signal_scope", Layer::SignalScope),
    ("unix_scope", Layer::UnixScope),
    ("seccomp", Layer::Seccomp),
    ("guards", Layer::Guards),
    ("view", Layer::View),
    ("netns", Layer::Netns),
    ("pidns", Layer::Pidns),
    ("rlimits", Layer::Rlimits),
    ("cgroup", Layer::Cgroup),
];

/// Whether `CAPSULE_MUTATE` removes `layer` (always false without the feature).
#[cfg(feature = "mutation")]
pub fn removed(layer: Layer) -> bool {
    let Ok(v) = std::env::var("CAPSULE_MUTATE") else {
        return false;
    };
    v.split(',')
        .filter_map(|n| LAYERS.iter().find(|(name, _)| *name == n.trim()))
        .any(|(_, l)| *l == layer)
}

/// Whether `CAPSULE_MUTATE` removes `layer` (always false without the feature).
#[cfg(not(feature = "mutation"))]
#[inline(always)]
pub fn removed(_layer: Layer) -> bool {
    false
}

/// Remove from `layers` what `CAPSULE_MUTATE` names, leaving every field
/// that a report reads as it was.
#[cfg(feature = "mutation")]
pub fn apply(mut layers: Layers) -> Layers {
    if removed(Layer::Landlock) {
        layers.landlock = None;
    }
    if removed(Layer::Seccomp) {
        layers.seccomp = None;
    }
    if removed(Layer::Guards) {
        layers.notify_filter = None;
        layers.truncate_guard = None;
    }
    if removed(Layer::View) || removed(Layer::Pidns) {
        // The namespaces are made as before (with the view), its mounts are
        // not: the run sees the host as it is, writable, with its /tmp and
        // its /proc; the report still describes the view.
        if let Some(v) = layers.view.as_mut() {
            v.strip_for_mutation();
        }
    }
    if removed(Layer::Netns) {
        // The supervisor clones without CLONE_NEWNET (`supervisor`, where
        // the namespaces are asked for); nothing brings the host's `lo` up.
        layers.own_loopback = false;
    }
    if removed(Layer::Pidns) {
        // No namespace at all (the keeper's path), reported as before.
        layers.want_pidns = false;
        layers.netns = false;
        layers.own_loopback = false;
    }
    if removed(Layer::Rlimits) {
        layers.rlimits.clear();
    }
    if removed(Layer::Cgroup) {
        // The directories go; what the report reads (mechanisms, source) stays.
        layers.cgroup.remove();
    }
    layers
}

/// Without the feature: the layers as prepared.
#[cfg(not(feature = "mutation"))]
#[inline(always)]
pub fn apply(layers: Layers) -> Layers {
    layers
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_layer_has_one_name() {
        for (i, (name, layer)) in LAYERS.iter().enumerate() {
            assert!(
                LAYERS[i + 1..].iter().all(|(n, l)| n != name && l != layer),
                "{name}"
            );
        }
    }

    #[test]
    #[cfg(not(feature = "mutation"))]
    fn without_the_feature_nothing_is_removed() {
        // The variable is ignored by a default build.
        assert!(LAYERS.iter().all(|(_, l)| !removed(*l)));
    }
}
