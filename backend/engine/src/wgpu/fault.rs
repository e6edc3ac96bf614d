//! The fault drills' switch for a lost GPU: `INFERGATE_FAULT_GPU_LOST=<file>`.
//!
//! While that file exists the GPU counts as pulled: a live device is destroyed (wgpu's `Device::destroy`,
//! which leaves the device in the same lost state a driver reset does) and no new device is created, so
//! every layer above sees what a real loss gives it. Removing the file is the device coming back. The
//! variable is read once; unset (always, outside drills) the switch costs one load of a cached `None`.

use std::path::PathBuf;
use std::sync::OnceLock;

/// The environment variable naming the switch file.
pub(crate) const FAULT_GPU_LOST: &str = "INFERGATE_FAULT_GPU_LOST";

/// The switch file when the drill switch is set and the file exists now.
pub(crate) fn device_pulled() -> Option<&'static PathBuf> {
    static SWITCH: OnceLock<Option<PathBuf>> = OnceLock::new();
    SWITCH
        .get_or_init(|| std::env::var_os(FAULT_GPU_LOST).map(PathBuf::from))
        .as_ref()
        .filter(|path| path.exists())
}
